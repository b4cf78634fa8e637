"""Sanitizer throughput: thread-instructions per second with every check on, next to the plain emulator.

The 64K-thread block reductions (256 blocks x 256 threads) of tests/corpus/src/cuda/reductions.cu
(nvcc -O3 PTX) and the planted-bug suite's `block_reduce`, each run with `sanitize=False` and with
`sanitize=True` (bounds, alignment, uninitialized shared reads, shared and global races per barrier
interval, barrier divergence, member masks) in the same process. The peer of the same run is the plain
emulator (the cost of the checks) and, where numba-cuda is installed, numba's CUDA simulator on the same
reduction (it checks array bounds as it runs Python; see benchmarks/emu_speed.py for how it is found).

    python benchmarks/sanitizer_speed.py [--repeat 3] [--numba-python PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

GOAL = 10e6  # thread-instructions per second with every check on (issue 4)


def _module(path: Path):
    import ptxforge as pf

    return pf.parse(path.read_text(), filename=path.name)


def best_of(kernel, repeat: int, make_args, sanitize: bool):
    best = None
    args = None
    for _ in range(repeat):
        args = make_args()
        r = kernel.launch(grid=(256,), block=(256,), args=args, device="emu", sanitize=sanitize)
        best = r if best is None or r.wall_s < best.wall_s else best
    return best, args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numba-python", default=None)
    ap.add_argument("--numba-blocks", type=int, default=16)
    opts = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    red = _module(ROOT / "tests" / "corpus" / "ptx" / "cuda" / "reductions.sm_80.O3.ptx")
    planted = _module(ROOT / "tests" / "sanitizer" / "kernels" / "planted.sm_80.O3.ptx")
    n = 1 << 16
    x = np.random.default_rng(0).random(n).astype(np.float32)
    cases = [
        ("reduce_sum_warp (shfl + bar.sync)", red.kernel("reduce_sum_warp"),
         lambda: [x, np.zeros(256, np.float32), np.int32(n)]),
        ("reduce_sum_shared (shared tree)", red.kernel("reduce_sum_shared"),
         lambda: [x, np.zeros(256, np.float32), np.int32(n)]),
        ("block_reduce (shared tree + shfl)", planted.kernel("block_reduce"),
         lambda: [x, np.zeros(256, np.float32)]),
    ]
    ref = x.reshape(256, 256).sum(1)
    print()
    print("| 64K-thread kernel | thread-instr | plain s | plain M/s | sanitized s | sanitized M/s | "
          "check cost | goal 10M/s |")
    print("|---|---|---|---|---|---|---|---|")
    warp_rate = None
    for name, k, make in cases:
        k.launch(grid=(256,), block=(256,), args=make(), device="emu")  # compile once
        plain, _ = best_of(k, opts.repeat, make, False)
        san, args = best_of(k, opts.repeat, make, True)
        assert np.allclose(args[1], ref, rtol=1e-4), f"{name}: wrong result under the sanitizer"
        rp = plain.thread_instructions / plain.wall_s
        rs = san.thread_instructions / san.wall_s
        warp_rate = warp_rate or (san.thread_instructions, san.wall_s)
        print(f"| {name} | {san.thread_instructions:,} | {plain.wall_s:.3f} | {rp / 1e6:.1f} | "
              f"{san.wall_s:.3f} | {rs / 1e6:.1f} | {san.wall_s / plain.wall_s:.1f}x | "
              f"{'met' if rs >= GOAL else 'NOT met'} |")
    try:
        from emu_speed import numba_python, numba_run
    except Exception as e:  # emu_speed.py is the emulator benchmark; its numba helpers are optional here
        print(f"\nnumba simulator peer unavailable ({type(e).__name__}: {e})")
        return
    py = numba_python(opts.numba_python)
    if py is None:
        print("\nnumba-cuda not found (run `make peers`, pass --numba-python or set PTXFORGE_NUMBA_PYTHON); "
              "simulator skipped.")
        return
    nb = opts.numba_blocks
    res = numba_run(py, "reduce", nb)
    if "error" in res:
        print(f"\nnumba simulator failed: {res['error']}")
        return
    ti, s = warp_rate
    nrate = ti * nb / 256 / res["s"]
    print(f"\nnumba CUDA simulator, reduce_sum_warp on {nb} blocks: {res['s']:.2f} s, "
          f"{nrate / 1e6:.3f} M thread-instr/s; ptxforge with every check on is "
          f"{ti / s / nrate:,.0f}x faster")


if __name__ == "__main__":
    main()
