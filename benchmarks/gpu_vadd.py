"""Vector add on the GPU: ptxforge launches (DSL kernel and nvcc's PTX) against PyTorch in the same run.

Kernel time is the median of CUDA-event timings over repeated launches on device buffers; bandwidth
counts 12 bytes per element (two 4-byte reads, one write). Launch overhead is host wall time per call for a
256-element add, after warm-up. Needs a GPU; without one it says so and exits 0.
Usage: python benchmarks/gpu_vadd.py [--sizes 24 26 28] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import ptxforge as pf  # noqa: E402
from ptxforge.runtime import empty, to_device  # noqa: E402
from ptxforge.runtime.cuda_driver import unavailable_reason  # noqa: E402


def ours(kernel, count, n: int, repeat: int, rng) -> tuple[float, bool]:
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    da, db, dc = to_device(a, device="cuda"), to_device(b, device="cuda"), empty(n, np.float32, device="cuda")
    dc.copy_from(np.full(n, np.nan, np.float32))  # poisoned: every element must be written
    times = [kernel.launch(grid=(-(-n // 256),), block=(256,), args=[da, db, dc, count(n)], device="cuda").wall_s
             for _ in range(repeat + 2)][2:]
    ok = bool(np.array_equal(dc.to_host(), a + b))
    for buf in (da, db, dc):
        buf.free()
    return statistics.median(times), ok


def torch_add(n: int, repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    c = torch.empty_like(a)
    times = []
    for _ in range(repeat + 2):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.add(a, b, out=c)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times[2:])


def launch_overhead(kernel, count, calls: int = 200) -> float:
    n = 256
    da, db, dc = (to_device(np.ones(n, np.float32), device="cuda") for _ in range(3))
    for _ in range(5):
        kernel.launch(grid=(1,), block=(256,), args=[da, db, dc, count(n)], device="cuda")
    t0 = time.perf_counter()
    for _ in range(calls):
        kernel.launch(grid=(1,), block=(256,), args=[da, db, dc, count(n)], device="cuda")
    return (time.perf_counter() - t0) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[24, 26, 28], help="log2 of the element counts")
    ap.add_argument("--repeat", type=int, default=20, help="timed launches per size (median reported)")
    args = ap.parse_args()
    why = unavailable_reason()
    if why is not None:
        print(f"gpu_vadd: no GPU here ({why.split('; use')[0]}); nothing measured")
        return 0
    from vector_add import vadd

    from ptxforge.runtime.cuda_device import cuda_device

    dev = cuda_device()
    demo = pf.parse((Path(pf.__file__).parent / "data" / "demo.sm_90a.ptx").read_text())
    # (kernel, type of its count parameter): the DSL's is u32, nvcc's `int n` is s32
    kernels = {"DSL vadd": (vadd.module("sm_80").kernel("vadd"), np.uint32),
               "nvcc vadd": (demo.kernel("vadd"), np.int32)}
    rng = np.random.default_rng(0)
    print(f"{dev.name}, {dev.arch}, driver {dev.driver_version}; median of {args.repeat} launches (CUDA events)")
    print(f"{'n':>12} {'kernel':<12} {'ms':>9} {'GB/s':>8}  correct")
    all_ok = True
    for lg in args.sizes:
        n = 1 << lg
        for name, (k, count) in kernels.items():
            t, ok = ours(k, count, n, args.repeat, rng)
            all_ok &= ok
            print(f"{n:>12,} {name:<12} {t * 1e3:9.3f} {12 * n / t / 1e9:8.0f}  {'yes' if ok else 'NO'}")
        t = torch_add(n, args.repeat)
        if t is not None:
            print(f"{n:>12,} {'torch.add':<12} {t * 1e3:9.3f} {12 * n / t / 1e9:8.0f}  (peer)")
    for name, (k, count) in kernels.items():
        us = launch_overhead(k, count) * 1e6
        print(f"launch overhead, {name}: {us:.0f} us per call (host wall time, 256 elements)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
