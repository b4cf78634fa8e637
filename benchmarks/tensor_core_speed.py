"""The FP8 wgmma path on the emulator: a DeepGEMM-shaped FP8 GEMM (tests/corpus/src/cuda/fp8_gemm_sm90a.cu,
wgmma m64n128k32 e4m3 -> f32, bit-exact tensor-core summation) on both tiers (the interpreter and the native
tier, each in its own process; results compared bit for bit) and, in the same run, with another ptxforge source
tree given by --baseline (e.g. a worktree of an older commit; interpreter). Times are CPU seconds of the launch
(process time, every thread's), the median of --repeat runs; wall seconds beside them.

    python benchmarks/tensor_core_speed.py [--baseline PATH/TO/OTHER/src] [--shape 256,256,512] [--repeat 3]
        [--expert 4096,2048,7168] [--no-expert-native]

The peer is torch's FP32 matmul (CPU, all cores) of the same shape and of a DeepSeek-V3 expert shape
(--expert), timed in the same run. The native tier runs the expert shape too (once, after the measured shape's
launches compiled the kernel; --no-expert-native skips it); the interpreter's expert-shape time is extrapolated
from the measured shape (the launch is one wgmma per 64x128x32 tile, so it scales with M*N*K), and the table
says so.
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
tier, repeat, ptx = sys.argv[1], int(sys.argv[2]), sys.argv[3]
shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[4:]]
kern = pf.parse(open(ptx).read(), filename="fp8_gemm.ptx").kernel("fp8_gemm_1d2d")
try:
    from ptxforge.runtime.launch_config import EmulatorOptions
    opts = {"options": EmulatorOptions(tier=tier)} if tier != "interp" else {}
except (ImportError, TypeError):     # (an older tree: no tiers)
    opts = {}
out = []
for i, (m, n, k) in enumerate(shapes):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    sa = np.ones((m, k // 128), np.float32); sb = np.ones((n // 128, k // 128), np.float32)
    times, walls, digest, ran = [], [], None, None
    runs = repeat + 1 if i == 0 else 1   # the first launch also compiles the module: not counted
    for _ in range(runs):
        d = np.zeros((m, n), np.float32)
        t, w = time.process_time(), time.perf_counter()
        res = kern.launch(grid=(n // 128, m // 128), block=(256,), device="emu",
                          args=[a, sa, b, sb, d, np.int32(m), np.int32(n), np.int32(k)], **opts)
        times.append(time.process_time() - t)
        walls.append(time.perf_counter() - w)
        digest = d.view(np.uint32).astype(np.uint64).sum().item()
        ran = getattr(res, "tier", "interp")
    if i == 0:
        times, walls = times[1:], walls[1:]
    out.append({"launch_s": sorted(times)[len(times) // 2], "wall_s": sorted(walls)[len(walls) // 2],
                "digest": digest, "tier": ran})
A = np.random.default_rng(1).standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
B = np.random.default_rng(2).standard_normal((32, 128)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
C = np.zeros((64, 128))
S.dot_tensor_core(A, B, C, block=32, bits=13)
t = time.process_time()
for _ in range(20):
    S.dot_tensor_core(A, B, C, block=32, bits=13)
print(json.dumps({"shapes": out, "call_ms": (time.process_time() - t) / 20 * 1e3}))
"""


def measure(src: Path, tier: str, shapes: list, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    args = [sys.executable, "-c", CHILD, tier, str(repeat), str(PTX), *(",".join(map(str, s)) for s in shapes)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed for {src} ({tier}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_matmul_s(m: int, n: int, k: int, repeat: int) -> tuple[float, float] | None:
    """(CPU seconds, wall seconds) of torch's FP32 matmul [m, k] @ [k, n], the median of `repeat` runs (None
    without torch)."""
    try:
        import time

        import torch
    except ImportError:
        return None
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.matmul(a, b)
    times, walls = [], []
    for _ in range(repeat):
        t, w = time.process_time(), time.perf_counter()
        torch.matmul(a, b)
        times.append(time.process_time() - t)
        walls.append(time.perf_counter() - w)
    return sorted(times)[len(times) // 2], sorted(walls)[len(walls) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="another ptxforge src/ directory to time beside this one")
    ap.add_argument("--shape", default="256,256,512", help="M,N,K (multiples of 128)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--expert", default="4096,2048,7168", help="M,N,K of the expert shape")
    ap.add_argument("--no-expert-native", action="store_true", help="extrapolate the native tier's expert time too")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    expert = tuple(int(x) for x in args.expert.split(","))
    m, n, k = shape
    calls = (m // 64) * (n // 128) * (k // 32)
    grow = expert[0] * expert[1] * expert[2] / (m * n * k)
    interp = measure(ROOT / "src", "interp", [shape], args.repeat)
    native = measure(ROOT / "src", "native", [shape] if args.no_expert_native else [shape, expert], args.repeat)
    rows = [("this checkout, interpreter", interp), ("this checkout, native tier", native)]
    if args.baseline:
        rows.append((f"baseline {args.baseline}", measure(args.baseline, "interp", [shape], args.repeat)))
    print(f"FP8 GEMM {m}x{n}x{k} on the emulator ({calls} wgmma m64n128k32 calls), CPU seconds (wall)")
    print(f"{'build':<48} {'tier':>7} {'launch s':>9} {'wall s':>8} {'per wgmma ms':>13}  result digest")
    for name, r in rows:
        sh = r["shapes"][0]
        print(f"{name:<48} {sh['tier']:>7} {sh['launch_s']:9.3f} {sh['wall_s']:8.3f} "
              f"{sh['launch_s'] / calls * 1e3:13.3f}  {sh['digest']}")
    same = interp["shapes"][0]["digest"] == native["shapes"][0]["digest"]
    print(f"native tier bit-identical to the interpreter (digest of D's bits): {same}")
    print(f"interpreter's tensor-core sum (dot_tensor_core, one 64x128x32 call): {interp['call_ms']:.2f} ms")
    ref = torch_matmul_s(m, n, k, max(1, args.repeat))
    if ref is None:
        print("torch is not installed: no FP32 matmul peer")
        return
    ref_e = torch_matmul_s(*expert, max(1, args.repeat))
    assert ref_e is not None
    label_e = "x".join(map(str, expert))
    print(f"{'shape':<44} {'emulator CPU s':>15} {'wall s':>8} {'torch CPU s':>12} {'wall s':>8} {'ratio CPU':>10}")
    table = [(f"{m}x{n}x{k} interpreter (measured)", interp["shapes"][0]["launch_s"],
              interp["shapes"][0]["wall_s"], ref),
             (f"{m}x{n}x{k} native (measured)", native["shapes"][0]["launch_s"], native["shapes"][0]["wall_s"], ref),
             (f"{label_e} interpreter (extrapolated x{grow:.0f})", interp["shapes"][0]["launch_s"] * grow,
              interp["shapes"][0]["wall_s"] * grow, ref_e)]
    if args.no_expert_native:
        table.append((f"{label_e} native (extrapolated x{grow:.0f})", native["shapes"][0]["launch_s"] * grow,
                      native["shapes"][0]["wall_s"] * grow, ref_e))
    else:
        table.append((f"{label_e} native (measured)", native["shapes"][1]["launch_s"], native["shapes"][1]["wall_s"],
                      ref_e))
    for label, cpu, wall, (tc, tw) in table:
        print(f"{label:<44} {cpu:15.3f} {wall:8.3f} {tc:12.3f} {tw:8.3f} {cpu / tc:9.1f}x")


if __name__ == "__main__":
    main()
