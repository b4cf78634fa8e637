"""Regenerate the planted-bug PTX next to this file: nvcc -O3 -lineinfo -arch=sm_80 (needs nvcc on PATH)."""

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc is not on PATH", file=sys.stderr)
        return 1
    for src in sorted(HERE.glob("*.cu")):
        out = HERE / f"{src.stem}.sm_80.O3.ptx"
        cmd = [nvcc, "-ptx", "-O3", "-lineinfo", "-arch=sm_80", src.name, "-o", out.name]
        subprocess.run(cmd, check=True, cwd=HERE)
        print(f"wrote {out.relative_to(HERE.parents[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
