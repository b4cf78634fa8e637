#!/usr/bin/env python3
"""Compile a selection of the CUDA corpus sources to PTX with NVRTC, the run-time compiler that JIT systems
such as DeepGEMM use (called by generate.py).

NVRTC is loaded with ctypes from the nvidia-cuda-nvrtc wheel (or $CUDA_HOME/lib64), so no binding package
is needed. For every source in NVRTC_SOURCES and each of its architectures this writes
<out>/<stem>.<arch>.ptx and prints one JSON line. The CUDA headers (cuda_fp16.h, cuda_fp8.h ...) come from
--include, which generate.py sets to the include folder of the nvcc it found.
"""

from __future__ import annotations

import argparse
import ctypes
import fnmatch
import glob
import json
import os
import re
import sys
from pathlib import Path

# stem -> PTX targets (compute_XX gives PTX; the corpus file is named after the matching sm_XX)
NVRTC_SOURCES = {
    "vector_ops": ("sm_80", "sm_90a"), "scans": ("sm_80",), "warp_ops": ("sm_80", "sm_90a"), "atomics": ("sm_80",),
    "fp8_group_quant": ("sm_90a",), "mma_sync": ("sm_80",), "matmul_tiled": ("sm_80",),
    "wgmma_sm90a": ("sm_90a",), "warp_specialized_sm90a": ("sm_90a",),
    "lowp_conversions": ("sm_90a",),
    "jit_templates": ("sm_80", "sm_90a"), "libcu_atomics": ("sm_80",), "coop_groups": ("sm_80",),
    "libcu_pipeline_barrier": ("sm_80",), "ep_style_asm": ("sm_90a",), "gemm_style_sync_sm90a": ("sm_90a",),
}


def load_nvrtc() -> ctypes.CDLL:
    """libnvrtc from the pip wheel beside this interpreter, else $CUDA_HOME/lib64, else the loader's path."""
    roots = [Path(p) for p in sys.path if p and Path(p).is_dir()]
    candidates = [c for r in roots for c in sorted(glob.glob(str(r / "nvidia" / "*" / "lib" / "libnvrtc.so*")))]
    home = os.environ.get("CUDA_HOME")
    if home:
        candidates += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    for c in [*candidates, "libnvrtc.so"]:
        if "builtins" in c or "alt" in Path(c).name:
            continue
        # NVRTC dlopens its builtins library by name at compile time: load it first from the same folder
        for b in sorted(glob.glob(os.path.join(os.path.dirname(c), "libnvrtc-builtins.so*"))):
            try:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        try:
            return ctypes.CDLL(c)
        except OSError:
            continue
    raise OSError("libnvrtc not found: install nvidia-cuda-nvrtc or set CUDA_HOME")


class NVRTC:
    def __init__(self):
        self.lib = load_nvrtc()
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return f"{major.value}.{minor.value}"

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(rc).decode()}")

    def compile(self, source: str, name: str, options: list[str]) -> str:
        prog = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            if rc != 0:
                size = ctypes.c_size_t()
                self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                self.lib.nvrtcGetProgramLog(prog, log)
                raise RuntimeError(log.value.decode(errors="replace").strip()[-2000:])
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            ptx = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx.value.decode()
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="folder of the CUDA corpus sources (src/cuda)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the PTX files")
    ap.add_argument("--include", type=Path, required=True, help="CUDA include folder (cuda_fp16.h ...)")
    ap.add_argument("--only", help="compile only sources whose stem matches this glob")
    args = ap.parse_args()
    nvrtc = NVRTC()
    version = nvrtc.version()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for stem, archs in NVRTC_SOURCES.items():
        if args.only and not fnmatch.fnmatch(stem, args.only):
            continue
        path = args.src / f"{stem}.cu"
        for arch in archs:
            # CUDA 13 keeps libcu++ / CCCL (cuda/atomic, cuda/std/...) in include/cccl
            includes = [f"--include-path={p}" for p in (args.include, args.include / "cccl") if p.is_dir()]
            options = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}", "--std=c++17", *includes,
                       "-default-device"]
            try:
                ptx = nvrtc.compile(path.read_text(), path.name, options)
            except Exception as exc:  # report and go on with the others
                failed += 1
                print(json.dumps({"name": f"{stem}@{arch}", "error": str(exc).splitlines()[-1]}), flush=True)
                continue
            ptx = re.sub(r"^(\s*//.*)\r?$", r"\1", ptx, flags=re.M)
            out = args.out / f"{stem}.{arch}.ptx"
            out.write_text(ptx)
            print(json.dumps({"path": str(out.resolve()), "source": str(path.resolve()),
                              "generator": f"NVRTC {version}", "generator_version": f"NVRTC {version}",
                              "arch": arch,
                              "flags": " ".join(o for o in options if not o.startswith("--include-path"))}),
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
