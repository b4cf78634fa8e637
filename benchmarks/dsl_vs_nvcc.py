"""PTX instruction counts: DSL kernels (examples/) against nvcc -O3 on the same CUDA C++ (examples/cuda/).

Counts static instructions in the kernel body as ptxforge.parse sees them (labels and declarations
excluded), and the registers ptxas allocates for each (ptxas -v).
Usage: python benchmarks/dsl_vs_nvcc.py [--arch sm_80 sm_90a]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import ptxforge  # noqa: E402
from ptxforge.toolchain import assemble, find_tool  # noqa: E402

PAIRS = [("vector_add", "vadd", "vector_add.cu"), ("block_reduce", "block_sum", "block_reduce.cu")]


def count_ptx(text: str, kernel: str) -> int:
    m = ptxforge.parse(text)
    return sum(1 for _ in m.function(kernel).instructions())


def ptxas_registers(ptx: str, arch: str) -> int | None:
    """Registers per thread ptxas allocates for the kernel (ptxas -v)."""
    res = assemble(ptx, arch, ["-v"])
    for m in res.messages:
        hit = re.search(r"Used (\d+) registers", m.message)
        if hit:
            return int(hit.group(1))
    return None


def nvcc_ptx(cu: Path, arch: str) -> str:
    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "k.ptx"
        subprocess.run([str(nvcc), "-O3", f"-arch={arch}", "-ptx", str(cu), "-o", str(out)], check=True,
                       capture_output=True)
        return out.read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=["sm_80", "sm_90a"])
    args = ap.parse_args()
    nvcc_version = subprocess.run([str(find_tool("nvcc")), "--version"], capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1]
    print(f"# {datetime.date.today()} {platform.machine()} {platform.processor() or ''}; {nvcc_version}")
    print("| kernel | arch | DSL PTX instructions | nvcc -O3 PTX instructions | DSL ptxas registers | "
          "nvcc ptxas registers |")
    print("|---|---|---|---|---|---|")
    import importlib

    for module, kname, cu in PAIRS:
        kernel = getattr(importlib.import_module(module), kname)
        for arch in args.arch:
            dsl_text = kernel.ptx(arch)
            ref_text = nvcc_ptx(ROOT / "examples" / "cuda" / cu, arch)
            row = [kname, arch, count_ptx(dsl_text, kname), count_ptx(ref_text, kname),
                   ptxas_registers(dsl_text, arch), ptxas_registers(ref_text, arch)]
            print("| " + " | ".join("n/a" if v is None else str(v) for v in row) + " |")


if __name__ == "__main__":
    main()
