#!/usr/bin/env python3
"""Compile the numba-cuda corpus kernels to PTX with numba.cuda.compile_ptx (called by generate.py).

Each src/numba/*.py module defines a list ``CORPUS`` of dicts: name (output stem), fn (plain Python
function), sig (numba signature tuple), optional fastmath (bool) and archs (compute capabilities, default
((8, 0), (9, 0))). For every (kernel, cc) this writes <out>/<name>.sm_<cc>.ptx and prints one JSON line.
compile_ptx needs libnvvm (CUDA toolkit or the nvidia-cuda-nvcc wheel) and libnvrtc (it asks NVRTC which
architectures exist; the nvidia-cuda-nvrtc wheel provides it).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import sys
import traceback
from pathlib import Path


def load_module(path: Path):
    sys.dont_write_bytecode = True   # keep __pycache__ out of src/
    spec = importlib.util.spec_from_file_location(f"corpus_numba_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="folder of numba corpus modules")
    ap.add_argument("--out", type=Path, required=True, help="folder for the PTX files")
    ap.add_argument("--only", help="compile only modules whose stem matches this glob")
    args = ap.parse_args()

    import numba
    from numba import cuda

    try:
        from numba_cuda import __version__ as numba_cuda_version
    except ImportError:
        numba_cuda_version = "unknown"

    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in sorted(args.src.glob("*.py")):
        if args.only and not fnmatch.fnmatch(path.stem, args.only):
            continue
        for spec in load_module(path).CORPUS:
            for cc in spec.get("archs", ((8, 0), (9, 0))):
                arch = f"sm_{cc[0]}{cc[1]}"
                fastmath = bool(spec.get("fastmath", False))
                try:
                    ptx, _ = cuda.compile_ptx(spec["fn"], spec["sig"], cc=cc, fastmath=fastmath)
                except Exception as exc:  # report and go on with the other kernels
                    failed += 1
                    detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
                    print(json.dumps({"name": f"{spec['name']}@{arch}", "error": detail}), flush=True)
                    continue
                out = args.out / f"{spec['name']}.{arch}.ptx"
                out.write_text(ptx)
                print(json.dumps({
                    "path": str(out.resolve()),
                    "source": str(path.resolve()),
                    "generator": f"numba-cuda {numba_cuda_version}",
                    "generator_version": f"numba-cuda {numba_cuda_version}, numba {numba.__version__}",
                    "arch": arch,
                    "flags": "fastmath=True" if fastmath else "",
                }), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
