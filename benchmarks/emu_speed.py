"""Emulator throughput: thread-instructions per second, next to numba-cuda's CUDA simulator.

Same algorithms on both: a 1M-thread vector add and 64K-thread block reductions (warp shuffles +
bar.sync; a shared-memory tree + bar.sync). ptxforge runs the nvcc -O3 PTX of
tests/corpus/src/cuda/{vector_ops,reductions}.cu; numba's
simulator (NUMBA_ENABLE_CUDASIM=1) runs the same kernels written in Python. Its thread-instruction count
is taken as the PTX count of the same launch, so the rates compare time per unit of identical work.

numba runs in a separate interpreter (it is not a dependency): --numba-python PATH, or
$PTXFORGE_NUMBA_PYTHON, or .venv-peers/bin/python (`make peers`); skipped with a message when absent.
The simulator is slow, so it runs a smaller grid of the same kernel and its rate is per thread-instruction.

    python benchmarks/emu_speed.py [--repeat 3] [--numba-python PATH]
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
sys.path.insert(0, str(ROOT / "tests" / "emu"))  # emu_corpus

NUMBA_SCRIPT = r"""
import os, sys, time, json
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import numpy as np
from numba import cuda, float32

@cuda.jit
def vadd(a, b, c, n):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        c[i] = a[i] + b[i]

@cuda.jit
def reduce_sum_warp(x, out, n):
    partial = cuda.shared.array(32, float32)
    v = float32(0)
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    while i < n:
        v += x[i]
        i += cuda.blockDim.x * cuda.gridDim.x
    o = 16
    while o > 0:
        v += cuda.shfl_down_sync(0xffffffff, v, o)
        o >>= 1
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    if lane == 0:
        partial[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = partial[lane] if lane < (cuda.blockDim.x >> 5) else float32(0)
        o = 16
        while o > 0:
            v += cuda.shfl_down_sync(0xffffffff, v, o)
            o >>= 1
        if lane == 0:
            out[cuda.blockIdx.x] = v

@cuda.jit
def reduce_sum_shared(x, out, n):
    s = cuda.shared.array(256, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + tid
    s[tid] = x[i] if i < n else float32(0)
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if tid < stride:
            s[tid] += s[tid + stride]
        cuda.syncthreads()
        stride >>= 1
    if tid == 0:
        out[cuda.blockIdx.x] = s[0]

which, blocks = sys.argv[1], int(sys.argv[2])
res = {}
if which == "vadd":
    n = blocks * 256
    a = np.ones(n, np.float32); b = np.ones(n, np.float32); c = np.zeros(n, np.float32)
    t = time.perf_counter(); vadd[blocks, 256](a, b, c, n); res["s"] = time.perf_counter() - t
    res["ok"] = bool((c == 2).all())
else:
    n = blocks * 256
    x = np.ones(n, np.float32); out = np.zeros(blocks, np.float32)
    fn = reduce_sum_warp if which == "reduce" else reduce_sum_shared
    try:
        t = time.perf_counter(); fn[blocks, 256](x, out, n); res["s"] = time.perf_counter() - t
        res["ok"] = bool((out == 256).all())
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(res))
"""


def ptxforge_runs(repeat: int):
    from emu_corpus import corpus_module

    vec = corpus_module("vector_ops", "sm_80.O3")
    red = corpus_module("reductions", "sm_80.O3")
    rows = []
    n = 1 << 20
    a = np.random.rand(n).astype(np.float32)
    b = np.random.rand(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    k = vec.kernel("vadd_f32")
    k.launch(grid=(n // 256,), block=(256,), args=[a[:256], b[:256], c[:256], np.int32(256)])  # compile
    best = None
    for _ in range(repeat):
        r = k.launch(grid=(n // 256,), block=(256,), args=[a, b, c, np.int32(n)])
        best = r if best is None or r.wall_s < best.wall_s else best
    assert np.array_equal(c, a + b)
    rows.append(("vector add, 1M threads (4096 x 256)", best.thread_instructions, best.wall_s, None))
    n = 1 << 16
    x = np.random.rand(n).astype(np.float32)
    out = np.zeros(n // 256, np.float32)
    for kname, label, nty in (("reduce_sum_warp", "shfl + bar.sync", np.int32),
                              ("reduce_sum_shared", "shared-memory tree + bar.sync", np.uint32)):
        k = red.kernel(kname)
        walls = {}
        for sanitize in (False, True):
            best = None
            for _ in range(repeat):
                out[:] = 0
                r = k.launch(grid=(n // 256,), block=(256,), args=[x, out, nty(n)], sanitize=sanitize)
                best = r if best is None or r.wall_s < best.wall_s else best
            assert np.allclose(out, x.reshape(-1, 256).sum(1), rtol=1e-4)
            walls[sanitize] = best.wall_s
        rows.append((f"block reduction, 64K threads (256 x 256), {label}", best.thread_instructions,
                     walls[False], walls[True]))
    return rows


def numba_python(arg: str | None) -> str | None:
    peers = str(Path(__file__).resolve().parents[1] / ".venv-peers" / "bin" / "python")
    for cand in (arg, os.environ.get("PTXFORGE_NUMBA_PYTHON"), peers):
        if cand and Path(cand).exists():
            r = subprocess.run([cand, "-c", "import numba.cuda"], capture_output=True)
            if r.returncode == 0:
                return cand
    return None


def numba_run(py: str, which: str, blocks: int) -> dict:
    r = subprocess.run([py, "-c", NUMBA_SCRIPT, which, str(blocks)], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numba-python", default=None)
    ap.add_argument("--numba-blocks", type=int, default=16, help="blocks of 256 threads for the simulator")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = ptxforge_runs(args.repeat)
    py = numba_python(args.numba_python)
    print()
    print("| algorithm | ptxforge thread-instr | ptxforge s | ptxforge M thr-instr/s | with sanitizer M/s | "
          "numba sim (grid) | numba s | numba M thr-instr/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, ti, s, s_san), which in zip(rows, ("vadd", "reduce", "reduce_shared"), strict=False):
        san = f"{ti / s_san / 1e6:.1f}" if s_san else "-"
        rate = ti / s
        full_blocks = 4096 if which == "vadd" else 256
        nb = min(args.numba_blocks, full_blocks)
        if py is None:
            cells = ["not installed", "-", "-", "-"]
        else:
            res = numba_run(py, which, nb)
            if "error" in res:
                cells = [f"{nb} blocks", "fails", res["error"].split(": ")[-1][:70], "-"]
            else:
                ti_sim = ti * nb / full_blocks  # same kernel, same per-thread work
                nrate = ti_sim / res["s"]
                cells = [f"{nb} blocks", f"{res['s']:.2f}", f"{nrate / 1e6:.3f}", f"{rate / nrate:,.0f}x"]
        print(f"| {name} | {ti:,} | {s:.3f} | {rate / 1e6:.1f} | {san} | " + " | ".join(cells) + " |")
    if py is None:
        print("\nnumba-cuda not found (run `make peers`, pass --numba-python or set PTXFORGE_NUMBA_PYTHON); "
              "simulator skipped.")


if __name__ == "__main__":
    main()
