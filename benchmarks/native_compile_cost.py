"""The native tier's compile cost per kernel: CPU seconds (this process, one core) to lower a corpus kernel to
LLVM IR in Python and print it, then LLVM's time at each of jit.py's levels (quick: -O0 code generation, no
passes; opt: the speed-3 pass pipeline and -O3), with the IR's size in lines. The seven kernels of
benchmarks/RESULTS.md's "Compile cost per kernel" table (sm_80 -O3 builds, the block shapes
tests/emu/test_native_tier.py launches them with). Nothing is cached: every compile runs.

    python benchmarks/native_compile_cost.py [--repeat N] [--kernels name,name]

Best of N for each figure (the machine is shared: the least disturbed run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ptxforge as pf
from ptxforge.emu.launch import emu_device
from ptxforge.emu.native import jit
from ptxforge.emu.native.codegen import BlockGen

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "ptx" / "cuda"
KERNELS = [  # (module, kernel, block)
    ("vector_ops", "vadd_f32", (256, 1, 1)),
    ("control_flow", "collatz_steps", (256, 1, 1)),
    ("reductions", "reduce_sum_shared", (256, 1, 1)),
    ("matmul_tiled", "matmul_tiled_f32", (16, 16, 1)),
    ("bitonic_sort", "bitonic_sort_f32", (256, 1, 1)),
    ("int_division", "int_divmod64", (256, 1, 1)),
    ("histogram", "histogram_shared", (256, 1, 1)),
]


def measure(module: str, kernel: str, block: tuple[int, int, int], repeat: int) -> dict[str, float]:
    mod = pf.parse((CORPUS / f"{module}.sm_80.O3.ptx").read_text(), filename=f"{module}.ptx")
    k = mod.kernel(kernel)
    layout, ops = emu_device().image(mod).compiled(k.function)
    best: dict[str, float] = {}

    def keep(name: str, v: float) -> None:
        best[name] = min(best.get(name, v), v)
    for _ in range(repeat):
        t0 = time.process_time()
        module_ir = BlockGen(layout, ops, block).build()  # (not native_plan: nothing cached between runs)
        t1 = time.process_time()
        text = str(module_ir)
        t2 = time.process_time()
        keep("lower", t1 - t0)
        keep("print", t2 - t1)
        for level in jit.LEVELS:
            t = time.process_time()
            jit._compile(text, level)
            keep(level, time.process_time() - t)
    best["instructions"] = len(ops)
    best["ir_lines"] = text.count("\n")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all seven)")
    args = ap.parse_args()
    want = set(filter(None, args.kernels.split(",")))
    print("| kernel (PTX instructions) | IR lines | Python: lowering + printing the IR | LLVM quick | LLVM opt |")
    print("|---|---|---|---|---|")
    tot = {"py": 0.0, "quick": 0.0, "opt": 0.0, "lines": 0}
    for module, kernel, block in KERNELS:
        if want and kernel not in want:
            continue
        r = measure(module, kernel, block, args.repeat)
        print(f"| {kernel} ({r['instructions']:.0f}) | {r['ir_lines']:.0f} | {r['lower']:.3f} + {r['print']:.3f} | "
              f"{r['quick']:.3f} | {r['opt']:.3f} |", flush=True)
        tot["py"] += r["lower"] + r["print"]
        tot["quick"] += r["quick"]
        tot["opt"] += r["opt"]
        tot["lines"] += r["ir_lines"]
    print(f"| all | {tot['lines']:.0f} | {tot['py']:.2f} | {tot['quick']:.3f} | {tot['opt']:.3f} |")


if __name__ == "__main__":
    main()
