"""The native tier's code speed per launch: process CPU seconds (user + sys, every thread) of one launch at one
worker thread, for emu_speed.py's block sum (64K threads), tiled matmul (256^3) and 1M-thread vector add, at
each compile level. CPU time, not wall time: the figure a loaded, shared machine disturbs least. Compare two
trees by running this with each one's sources first on PYTHONPATH, alternating, and keep the best of the runs.

    PYTHONPATH=<tree>/src python benchmarks/native_launch_cpu.py [--repeat N] [--levels opt,quick]

Prints one JSON line: {"src": the ptxforge imported, level: {row: best seconds of N launches}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import ptxforge  # (first: emu_speed puts this tree's src/ on sys.path; PYTHONPATH picks the tree measured)

ROOT = Path(__file__).resolve().parents[1]
ROWS = (("reduce", 1 << 16), ("matmul", 256), ("vadd", 1 << 20))  # (emu_speed.py's kind, size)


def best_launch_cpu(launch: Any, repeat: int) -> float:
    """The least process CPU time of `repeat` calls of `launch` (after two warm-up calls: the compile, the
    allocator)."""
    launch()
    launch()
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        launch()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--levels", default="opt,quick")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests" / "emu")]
    import emu_speed
    from emu_corpus import corpus_module

    mods = {m: corpus_module(m, "sm_80.O3") for m in ("vector_ops", "reductions", "matmul_tiled")}
    out: dict[str, Any] = {"src": ptxforge.__file__}
    for level in args.levels.split(","):
        rng = np.random.default_rng(0)
        out[level] = {}
        for kind, n in ROWS:
            k, grid, block, kargs, bufs, check = emu_speed._pocl_row_launch(kind, n, mods, rng, args.repeat)
            opts = {"tier": "native", "threads": 1, "level": level}

            def launch(k: Any = k, grid: Any = grid, block: Any = block, kargs: Any = kargs, opts: Any = opts
                       ) -> Any:
                r = k.launch(grid=grid, block=block, args=kargs, options=opts)
                assert r.tier == "native", r.tier_note
                return r
            out[level][kind] = best_launch_cpu(launch, args.repeat)
            assert check(2 + args.repeat), f"{kind}: wrong result"
            for bf in bufs:
                bf.free()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
