"""The per-token FP8 quantization kernel (ptxforge.kernels.fp8) against a device-to-device copy, same run.

Both are DSL kernels launched by ptxforge on device buffers; time is the median of the launches' kernel
times (CUDA events on a GPU). The quantization reads 2 bytes and writes 1 (+4 per 128 for the scale) per
element; the copy (16-byte loads and stores) moves the same number of bytes it reads, and its bandwidth is
the reference (goal: quantization >= 90% of it). Results are checked bit for bit against the numpy
reference. Needs a GPU (`--device emu` runs the same code on the emulator, for testing the script).
Usage: python benchmarks/gpu_fp8_quant.py [--tokens 4096] [--hidden 7168] [--repeat 20] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import ml_dtypes
import numpy as np

from ptxforge.dsl import ctaid, if_, kernel, ld, mad, ntid, ptr, st, tid, u32
from ptxforge.kernels import fp8
from ptxforge.runtime import empty, to_device
from ptxforge.runtime.cuda_driver import unavailable_reason


@kernel(arch="sm_90a")
def copy16(src: ptr(u32, align=16), dst: ptr(u32, align=16), vectors: u32):
    i = mad(ctaid.x, ntid.x, tid.x)
    with if_(i < vectors):
        st(dst[i * 4], ld(src[i * 4], v=4))


def median_time(k, grid, block, args, device, repeat):
    return statistics.median([k.launch(grid=grid, block=block, args=args, device=device).wall_s
                              for _ in range(repeat + 2)][2:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.device.startswith("cuda"):
        why = unavailable_reason()
        if why is not None:
            print(f"gpu_fp8_quant: no GPU here ({why.split('; use')[0]}); nothing measured")
            return 0
    t_, h, dev = args.tokens, args.hidden, args.device
    x = (np.random.default_rng(0).standard_normal((t_, h)) * 3).astype(ml_dtypes.bfloat16)
    groups = t_ * h // fp8.GROUP
    dx = to_device(x, device=dev)
    dq, ds, de = (empty((t_, h), np.uint8, device=dev), empty((t_, h // 128), np.float32, device=dev),
                  empty((t_, h // 128), np.uint8, device=dev))
    rows = []
    for name, k in (("fp8 quant, f32 scales", fp8.per_token_quant), ("fp8 quant, UE8M0", fp8.per_token_quant_pow2)):
        t = median_time(k, (-(-groups // 4),), (128,), [dx, dq, ds, de, np.uint32(groups)], dev, args.repeat)
        ref_q, ref_s, _ = fp8.per_token_quant_ref(x, k is fp8.per_token_quant_pow2)
        ok = np.array_equal(dq.to_host(), ref_q) and np.array_equal(ds.to_host(), ref_s)
        rows.append((name, t, t_ * h * (2 + 1 + 4 / 128), ok))
    vectors = t_ * h * 2 // 16
    dy = empty((t_, h), ml_dtypes.bfloat16, device=dev)
    t = median_time(copy16, (-(-vectors // 256),), (256,), [dx, dy, np.uint32(vectors)], dev, args.repeat)
    ok = np.array_equal(dy.to_host().view(np.uint16), x.view(np.uint16))
    rows.append(("device-to-device copy (peer)", t, t_ * h * 4, ok))
    copy_bw = rows[-1][2] / rows[-1][1]
    print(f"{t_} x {h} bf16 on {dev}; median of {args.repeat} launches")
    print(f"{'kernel':<30} {'ms':>9} {'GB/s':>8} {'vs copy':>8}  bit-exact")
    for name, t, nbytes, ok in rows:
        print(f"{name:<30} {t * 1e3:9.3f} {nbytes / t / 1e9:8.0f} {nbytes / t / copy_bw:8.0%}  {'yes' if ok else 'NO'}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
