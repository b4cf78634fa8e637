"""`vprintf`, the device runtime's printf, called from a DSL kernel: the module declares it `.extern .func`,
ptxas-shaped, and the emulator prints the formatted line (arguments packed as nvcc packs them)."""

import numpy as np

from ptxforge.dsl import ExternFunction, kernel, ptr, u8, u32, vprintf
from ptxforge.runtime.buffers import DeviceBuffer


@kernel(arch="sm_90a")
def hello(fmt: ptr(u8), args: ptr(u32)) -> None:
    vprintf(fmt.value(), args.value())


def test_vprintf_is_declared_extern_and_called():
    text = hello.ptx()
    assert ".extern .func (.param .s32 func_retval0) vprintf(" in text
    assert "call.uni \t(retval0), vprintf, (param0, param1);" in text
    assert isinstance(vprintf, ExternFunction)


def test_vprintf_prints_on_the_emulator():
    fmt = DeviceBuffer.from_array(np.frombuffer(b"block %u saw %u of %u\n\0", np.uint8))
    args = DeviceBuffer.from_array(np.array([0, 3, 4], np.uint32))
    lines = []
    hello.launch(grid=(1,), block=(2,), args=[fmt, args], options={"printf": lines.append})
    assert lines == ["block 0 saw 3 of 4\n"] * 2  # every thread that calls it prints
