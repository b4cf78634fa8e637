"""`ptxforge devices`: where kernels can run here and which NVIDIA tools were found."""

from __future__ import annotations

import argparse

from ptxforge import environment
from ptxforge.emu.launch import emu_device
from ptxforge.runtime.buffers import default_device
from ptxforge.runtime.cuda_device import cuda_device
from ptxforge.runtime.cuda_driver import check, driver, unavailable_reason
from ptxforge.toolchain import ToolNotFound, find_tool, ptxas_version


def run(args: argparse.Namespace) -> int:
    print("devices:")
    print(f"  emu      CPU SIMT emulator, {emu_device().num_sms} SMs emulated, bit-exact; sanitizer available")
    why = unavailable_reason()
    if why is None:
        for i in range(check(driver().cuDeviceGetCount(), "cuDeviceGetCount")):
            dev = cuda_device(i)
            v = dev.driver_version
            print(f"  cuda:{i}   {dev.name}, {dev.arch}, {dev.num_sms} SMs, "
                  f"{dev.max_shared_per_block // 1024} KiB shared/block, driver CUDA {v // 1000}.{v % 1000 // 10}")
    else:
        print(f"  cuda     not available: {why.split('; use')[0]}")
    chosen = default_device()
    source = "PTXFORGE_DEVICE" if environment.device() else "default"
    print(f"launches that name no device use: {chosen} ({source}); "
          f"'auto' means {'the GPU' if why is None else 'the emulator'} here")
    print("tools:")
    for tool in ("ptxas", "cuobjdump", "nvdisasm"):
        try:
            path = find_tool(tool)
        except ToolNotFound:
            print(f"  {tool:<10} not found (pip install 'ptxforge[tools]' brings it, or set CUDA_HOME)")
            continue
        extra = f" (CUDA {ptxas_version(path)})" if tool == "ptxas" else ""
        print(f"  {tool:<10} {path}{extra}")
    return 0
