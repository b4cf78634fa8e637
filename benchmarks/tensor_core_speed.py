"""The FP8 wgmma path on the emulator: a DeepGEMM-shaped FP8 GEMM (tests/corpus/src/cuda/fp8_gemm_sm90a.cu,
wgmma m64n128k32 e4m3 -> f32, bit-exact tensor-core summation) timed with this checkout and, in the same run,
with another ptxforge source tree given by --baseline (e.g. a worktree of an older commit), each in its own
process. Times are CPU seconds of the launch (process time), the median of --repeat runs.

    python benchmarks/tensor_core_speed.py [--baseline PATH/TO/OTHER/src] [--shape 256,256,512] [--repeat 3]
        [--expert 4096,2048,7168]

The peer is torch's FP32 matmul (CPU) of the same shape and of a DeepSeek-V3 expert shape (--expert), timed
in the same run; the emulator's expert-shape time is extrapolated from the measured shape (the launch is
one wgmma per 64x128x32 tile, so it scales with M*N*K), and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PTX = ROOT / "tests" / "corpus" / "ptx" / "cuda" / "fp8_gemm_sm90a.sm_90a.O3.ptx"

CHILD = r"""
import json, sys, time
import ml_dtypes, numpy as np
import ptxforge as pf
from ptxforge.emu.semantics import mma as S
m, n, k, repeat, ptx = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
kern = pf.parse(open(ptx).read(), filename="fp8_gemm.ptx").kernel("fp8_gemm_1d2d")
rng = np.random.default_rng(0)
a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
b = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
sa = np.ones((m, k // 128), np.float32); sb = np.ones((n // 128, k // 128), np.float32)
times, digest = [], None
for _ in range(repeat + 1):          # the first launch also compiles the module: not counted
    d = np.zeros((m, n), np.float32)
    t = time.process_time()
    res = kern.launch(grid=(n // 128, m // 128), block=(256,), device="emu",
                      args=[a, sa, b, sb, d, np.int32(m), np.int32(n), np.int32(k)])
    times.append(time.process_time() - t)
    digest = d.view(np.uint32).astype(np.uint64).sum().item()
A = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
B = rng.standard_normal((32, 128)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
C = np.zeros((64, 128))
S.dot_tensor_core(A, B, C, block=32, bits=13)
t = time.process_time()
for _ in range(20):
    S.dot_tensor_core(A, B, C, block=32, bits=13)
call = (time.process_time() - t) / 20
print(json.dumps({"launch_s": sorted(times[1:])[len(times[1:]) // 2], "digest": digest, "call_ms": call * 1e3,
                  "instr": res.instructions if hasattr(res, "instructions") else None}))
"""


def measure(src: Path, shape, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD, *map(str, shape), str(repeat), str(PTX)], env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed for {src}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_matmul_s(m: int, n: int, k: int, repeat: int) -> float | None:
    """CPU seconds of torch's FP32 matmul [m, k] @ [k, n], the median of `repeat` runs (None without torch)."""
    try:
        import time

        import torch
    except ImportError:
        return None
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.matmul(a, b)
    times = []
    for _ in range(repeat):
        t = time.process_time()
        torch.matmul(a, b)
        times.append(time.process_time() - t)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="another ptxforge src/ directory to time beside this one")
    ap.add_argument("--shape", default="256,256,512", help="M,N,K (multiples of 128)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--expert", default="4096,2048,7168", help="M,N,K of the extrapolated expert shape")
    args = ap.parse_args()
    shape = [int(x) for x in args.shape.split(",")]
    m, n, k = shape
    calls = (m // 64) * (n // 128) * (k // 32)
    rows = [("this checkout", measure(ROOT / "src", shape, args.repeat))]
    if args.baseline:
        rows.append((f"baseline {args.baseline}", measure(args.baseline, shape, args.repeat)))
    print(f"FP8 GEMM {m}x{n}x{k} on the emulator ({calls} wgmma m64n128k32 calls), CPU seconds")
    print(f"{'build':<48} {'launch s':>9} {'per wgmma ms':>13} {'dot call ms':>12}  result digest")
    for name, r in rows:
        per_call = r["launch_s"] / calls * 1e3
        print(f"{name:<48} {r['launch_s']:9.2f} {per_call:13.2f} {r['call_ms']:12.2f}  {r['digest']}")
    em, en, ek = (int(x) for x in args.expert.split(","))
    grow = em * en * ek / (m * n * k)
    for label, (tm, tn, tk), emu in ((f"{m}x{n}x{k} (measured)", (m, n, k), rows[0][1]["launch_s"]),
                                     (f"{em}x{en}x{ek} (emulator extrapolated x{grow:.0f})", (em, en, ek),
                                      rows[0][1]["launch_s"] * grow)):
        ref = torch_matmul_s(tm, tn, tk, max(1, args.repeat))
        if ref is None:
            print("torch is not installed: no FP32 matmul peer")
            break
        print(f"{label:<48} emulator {emu:9.2f} s, torch FP32 matmul {ref:8.3f} s: {emu / ref:8.0f}x")
    if len(rows) == 2:
        same = rows[0][1]["digest"] == rows[1][1]["digest"]
        print(f"speed-up: launch {rows[1][1]['launch_s'] / rows[0][1]['launch_s']:.1f}x, "
              f"tensor-core sum {rows[1][1]['call_ms'] / rows[0][1]['call_ms']:.1f}x; results identical: {same}")


if __name__ == "__main__":
    main()
