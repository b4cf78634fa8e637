"""Divergent loops on the emulator: compacted sessions (emu/compact.py) on and off, next to POCL.

Rows: the corpus Collatz kernel (tests/corpus/src/cuda/control_flow.cu, nvcc -O3 sm_80; x < 100000) at 16K,
64K and 256K threads, and two hand-written divergent kernels of tests/emu/test_emu_compaction.py (a loop with
two exits that meet again; shfl/vote/activemask inside a data-dependent loop with a nested loop). Each runs
with sessions on and off in the same process (off is the machine stepping every lane, as before the change),
best of --repeat, as wall and CPU seconds (`time.process_time`; the machine is shared, so CPU seconds are the
steadier figure); both must give the same memory and instruction counts. POCL (OpenCL C on the CPU, the
same script as benchmarks/emu_speed.py) runs the Collatz rows: --pocl-python / $PTXFORGE_POCL_PYTHON.

    python benchmarks/divergence_speed.py [--repeat 3] [--pocl-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "emu"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _rows():
    """(label, launch, outputs, pocl size or None)."""
    from emu_corpus import corpus_module
    from test_emu_compaction import PARAMS3, TWO_EXITS, WARP_LOOP, kernel

    from ptxforge.runtime.buffers import to_device

    rows = []
    collatz = corpus_module("control_flow", "sm_80.O3").kernel("collatz_steps")
    rng = np.random.default_rng(0)
    for n in (1 << 14, 1 << 16, 1 << 18):
        x = rng.integers(1, 100_000, n, dtype=np.uint32)
        bufs = [to_device(x), to_device(np.zeros(n, np.int32))]
        rows.append((f"Collatz loop (corpus, nvcc -O3), {n // 1024}K threads",
                     lambda n=n, b=bufs: collatz.launch(grid=(n // 256,), block=(256,), args=b + [np.int32(n)]),
                     lambda b=bufs: b[1].to_host(), n))
    two = kernel(TWO_EXITS, PARAMS3)
    n = 1 << 16
    seeds = rng.integers(2, 40000, n).astype(np.uint32)
    out = np.zeros((n, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)

    def two_exits():
        ctr[:] = 0
        return two.launch(grid=(n // 256,), block=(256,), args=[out, seeds, ctr])
    rows.append(("loop with two exits meeting again (atomic tickets), 64K threads", two_exits, lambda: out.copy(),
                 None))
    warp = kernel(WARP_LOOP, ".param .u64 out, .param .u64 seeds")
    s0 = rng.integers(0, 2**32, 1 << 14, dtype=np.uint64).astype(np.uint32)
    s = s0.copy()

    def warp_loop():
        s[:] = s0
        return warp.launch(grid=(64,), block=(256,), args=[None, s])
    rows.append(("shfl + vote + activemask in a divergent loop with a nested loop, 16K threads", warp_loop,
                 lambda: s.copy(), None))
    return rows


def _best(call, repeat):
    best = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        r = call()
        w, c = time.perf_counter() - w, time.process_time() - c
        best = (w, c, r) if best is None or c < best[1] else best
    return best


def pocl_python(arg):
    probe = "import pyopencl as cl; assert any('Portable' in p.name for p in cl.get_platforms())"
    for cand in (arg, os.environ.get("PTXFORGE_POCL_PYTHON"), str(ROOT / ".venv-peers" / "bin" / "python")):
        if cand and Path(cand).exists() and subprocess.run([cand, "-c", probe], capture_output=True).returncode == 0:
            return cand
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pocl-python", default=None)
    args = ap.parse_args()
    from emu_speed import POCL_SCRIPT

    from ptxforge.emu import compact

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = _rows()
    res = []
    for label, launch, result, pocl_n in rows:
        launch()  # compile
        got = {}
        for enabled in (False, True):
            compact.ENABLED = enabled
            before = compact.steps_run()
            w, c, r = _best(launch, args.repeat)
            got[enabled] = (w, c, r.thread_instructions, result(), compact.steps_run() - before)
        compact.ENABLED = True
        assert got[False][2] == got[True][2] and np.array_equal(got[False][3], got[True][3]), label
        res.append((label, got, pocl_n))
    py = pocl_python(args.pocl_python)
    peer = None
    if py is not None:
        sizes = [("collatz", "collatz", n) for *_, n in res if n is not None]
        seen = {}
        for key, kind, n in sizes:
            r = subprocess.run([py, "-c", POCL_SCRIPT, json.dumps([[key, kind, n]]), str(args.repeat)],
                               capture_output=True, text=True, timeout=600)
            seen[n] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
        peer = seen
        dev = next((v["device"] for v in seen.values() if v), None)
        if dev:
            print(f"POCL: {dev}")
    cols = ["kernel", "thread-instr", "sessions on: M thr-instr/s (wall / CPU)", "off: M/s (wall / CPU)",
            "speed-up (CPU)", "steps in sessions, per launch", "POCL s", "ptxforge / POCL time (wall)"]
    print("\n| " + " | ".join(cols) + " |\n" + "|---" * len(cols) + "|")
    for label, got, n in res:
        (w1, c1, ti, _, used), (w0, c0, *_) = got[True], got[False]
        cells = [label, f"{ti:,}", f"{ti / w1 / 1e6:.1f} / {ti / c1 / 1e6:.1f}",
                 f"{ti / w0 / 1e6:.1f} / {ti / c0 / 1e6:.1f}", f"{c0 / c1:.1f}x", f"{used // max(1, args.repeat):,}"]
        p = (peer or {}).get(n) if n is not None else None
        if n is None:
            cells += ["-", "-"]
        elif p is None:
            cells += ["-", "POCL not installed" if peer is None else "POCL failed"]
        else:
            ps = p["collatz"]["s"]
            cells += [f"{ps:.5f}", f"{w1 / ps:.1f}x" + ("" if p["collatz"]["ok"] else " (wrong)")]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
