"""Sanitizer throughput: thread-instructions per second with every check on, next to the plain emulator.

The 64K-thread block reductions (256 blocks x 256 threads) of tests/corpus/src/cuda/reductions.cu
(nvcc -O3 PTX) and the planted-bug suite's `block_reduce`, each run with `sanitize=False` and with
`sanitize=True` (bounds, alignment, uninitialized shared reads, shared and global races per barrier
interval, barrier divergence, member masks) in the same process. The peer of the same run is the plain
emulator (the cost of the checks) and, where numba-cuda is installed, numba's CUDA simulator on the same
reduction (it checks array bounds as it runs Python; see benchmarks/emu_speed.py for how it is found).

The 1M-thread vector add (`vadd_f32` of tests/corpus/src/cuda/vector_ops.cu, 4096 x 256, on device buffers)
plain and sanitized, each in a fresh process: best launch time and the process's peak resident memory
(ru_maxrss; the process holds the module, the arrays and the emulator, so plain is the reference). With
`--baseline SRC` (the src/ of another tree, e.g. a worktree of the commit before a change) the vector add
and the reductions are measured for that tree too, in the same run.

    python benchmarks/sanitizer_speed.py [--repeat 3] [--numba-python PATH] [--baseline OTHER/src]
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
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else str(ROOT / "src")
sys.path.insert(0, _SRC)  # --src: measure another tree's ptxforge (a child of a --baseline run)
sys.path.insert(0, str(ROOT / "benchmarks"))
VADD_N = 1 << 20

GOAL = 10e6  # thread-instructions per second with every check on (issue 4)


def _module(path: Path):
    import ptxforge as pf

    return pf.parse(path.read_text(), filename=path.name)


def best_of(kernel, repeat: int, make_args, sanitize: bool):
    best = None
    args = None
    for _ in range(repeat):
        args = make_args()
        r = kernel.launch(grid=(256,), block=(256,), args=args, device="emu", options={"sanitize": sanitize})
        best = r if best is None or r.wall_s < best.wall_s else best
    return best, args


def reductions(repeat: int) -> list:
    """[(name, thread-instructions, plain s, sanitized s)] of the 64K-thread reductions."""
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
    rows = []
    for name, k, make in cases:
        k.launch(grid=(256,), block=(256,), args=make(), device="emu")  # compile once
        plain, _ = best_of(k, repeat, make, False)
        san, args = best_of(k, repeat, make, True)
        assert np.allclose(args[1], ref, rtol=1e-4), f"{name}: wrong result under the sanitizer"
        rows.append((name, int(san.thread_instructions), plain.wall_s, san.wall_s))
    return rows


def vadd(sanitize: bool, repeat: int) -> dict:
    """The 1M-thread vector add in this process: best wall seconds, peak and starting resident MB."""
    import resource

    from ptxforge.runtime.buffers import to_device

    k = _module(ROOT / "tests" / "corpus" / "ptx" / "cuda" / "vector_ops.sm_80.O3.ptx").kernel("vadd_f32")
    rng = np.random.default_rng(0)
    a, b = rng.random(VADD_N, np.float32), rng.random(VADD_N, np.float32)
    bufs = [to_device(a), to_device(b), to_device(np.zeros(VADD_N, np.float32))]
    k.launch(grid=(4,), block=(256,), args=bufs + [np.int32(1024)], options={"sanitize": sanitize})  # compile
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    best = None
    for _ in range(repeat):
        r = k.launch(grid=(VADD_N // 256,), block=(256,), args=bufs + [np.int32(VADD_N)],
                     options={"sanitize": sanitize})
        best = r if best is None or r.wall_s < best.wall_s else best
    assert np.array_equal(bufs[2].to_host(), a + b), "vector add: wrong result"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"s": best.wall_s, "ti": int(best.thread_instructions), "peak_mb": peak, "start_mb": start}


def _child(what: str, src: str, repeat: int):
    """Run one measurement in a fresh process with `src` first on the path; its JSON result."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--child", what, "--src", src, "--repeat", str(repeat)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{what} ({src}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numba-python", default=None)
    ap.add_argument("--numba-blocks", type=int, default=16)
    ap.add_argument("--baseline", default=None, help="src/ of another tree, measured in the same run")
    ap.add_argument("--src", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child is not None:
        import json

        if opts.child == "reductions":
            print(json.dumps(reductions(opts.repeat)))
        else:
            print(json.dumps(vadd(opts.child == "vadd-sanitized", opts.repeat)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    trees = [("this tree", _SRC)] + ([("baseline", opts.baseline)] if opts.baseline else [])
    red = {label: _child("reductions", src, opts.repeat) for label, src in trees}
    print()
    print("| 64K-thread kernel | tree | thread-instr | plain s | plain M/s | sanitized s | sanitized M/s | "
          "check cost | goal 10M/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(len(red["this tree"])):
        for label, _ in trees:
            name, ti, ps, ss = red[label][i]
            rs = ti / ss
            print(f"| {name} | {label} | {ti:,} | {ps:.3f} | {ti / ps / 1e6:.1f} | {ss:.3f} | {rs / 1e6:.1f} | "
                  f"{ss / ps:.1f}x | {'met' if rs >= GOAL else 'NOT met'} |")
    print()
    print("| vector add, 1M threads (fresh process each) | tree | plain s | sanitized s | time cost (goal <= 5x) | "
          "plain peak MB | sanitized peak MB | memory cost (goal <= 2x) | MB before the 1M launches (plain / san) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, src in trees:
        p = _child("vadd-plain", src, opts.repeat)
        q = _child("vadd-sanitized", src, opts.repeat)
        tc, mc = q["s"] / p["s"], q["peak_mb"] / p["peak_mb"]
        print(f"| vadd_f32 4096 x 256 | {label} | {p['s']:.4f} | {q['s']:.4f} | {tc:.1f}x "
              f"({'met' if tc <= 5 else 'NOT met'}) | {p['peak_mb']:.0f} | {q['peak_mb']:.0f} | {mc:.2f}x "
              f"({'met' if mc <= 2 else 'NOT met'}) | {p['start_mb']:.0f} / {q['start_mb']:.0f} |")
    warp_rate = (red["this tree"][0][1], red["this tree"][0][3])
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
