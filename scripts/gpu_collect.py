"""Record what a real GPU computes, so the emulator can be checked against it on machines without one.

Runs on a GPU machine (scripts/gpu_check.sh calls it) and writes one compressed .npz: for every case of
tests/conformance/hw_ops.py (exact, video, warp and approximate instructions) the GPU's outputs for inputs
drawn from a seed named in the file, and for the tensor-core instructions (mma.sync and wgmma) the GPU's D
for seeded A, B, C. tests/emu/test_hw_reference.py regenerates the inputs and compares the emulator with
the recorded outputs. Usage: python scripts/gpu_collect.py OUT.npz [--emu]
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "emu"), str(ROOT / "src")]

from conformance import hw_ops, mma_probes  # noqa: E402

import ptxforge as pf  # noqa: E402

N = hw_ops.REFERENCE_N
DEVICE = "cuda"  # --emu: a dry run of the whole script on the emulator


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()[:16]


def collect_ops(out: dict) -> None:
    for case in hw_ops.EXACT + hw_ops.APPROX:
        ins = case.make_inputs(N, hw_ops.case_rng(case.name))
        pad = [np.zeros(N, np.uint32)] * (3 - len(ins))
        res = hw_ops.poisoned_output(case, N)
        pf.parse(case.ptx()).kernel("k").launch(grid=(N // 256,), block=(256,), args=[*ins, *pad, res, np.uint32(N)],
                                                device=DEVICE)
        out[f"op/{case.name}"] = res
        out[f"in/{case.name}"] = np.frombuffer(digest(ins).encode(), np.uint8)
    for name in sorted(hw_ops.WARP_BODIES):
        a, b = hw_ops.warp_inputs(name, N)
        res = np.full(N, 0xA5A5A5A5, np.uint32)
        pf.parse(hw_ops.warp_case_ptx(name)).kernel("k").launch(grid=(N // 256,), block=(256,),
                                                                 args=[a, b, res, np.uint32(N)], device=DEVICE)
        out[f"warp/{name}"] = res
        out[f"in/warp/{name}"] = np.frombuffer(digest([a, b]).encode(), np.uint8)


def collect_mma(out: dict) -> None:
    for probe in mma_probes.PROBES:
        try:
            regs = probe.inputs()
            d = np.full(probe.d_words, 0xA5A5A5A5, np.uint32)
            probe.kernel().launch(grid=(probe.warps,), block=(32,), args=[*regs, d], device=DEVICE)
        except Exception as e:  # record the others
            print(f"  mma/{probe.name}: FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        out[f"mma/{probe.name}"] = d
        out[f"in/mma/{probe.name}"] = np.frombuffer(digest(regs).encode(), np.uint8)
    for probe in mma_probes.WGMMA:
        try:
            k, ds, ins = probe.kernel(), [], []
            for r in range(probe.repeats):
                args = probe.inputs(r)
                k.launch(grid=(1,), block=(128,), args=args, device=DEVICE)
                ds.append(args[probe.out])
                ins += [a for i, a in enumerate(args) if i != probe.out and isinstance(a, np.ndarray)]
        except Exception as e:
            print(f"  wgmma/{probe.name}: FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        out[f"wgmma/{probe.name}"] = np.stack(ds)
        out[f"in/wgmma/{probe.name}"] = np.frombuffer(digest(ins).encode(), np.uint8)


def collect_tma(out: dict) -> None:
    """The TMA transpose store with padded rows: which padding elements the hardware writes."""
    from emu_corpus import corpus_module

    from ptxforge.runtime import tensor_map, to_device

    m = corpus_module("tma_bulk_sm90", "sm_90a.O3")
    for H, pad in ((70, 2), (66, 6)):
        W = 100
        x = np.arange(H * W, dtype=np.float32).reshape(H, W) + 1
        src = to_device(x, device=DEVICE)
        dst = to_device(np.full((W + 4, H + pad), -7.5, np.float32), device=DEVICE)
        m.kernel("tma_transpose_2d").launch(grid=(-(-W // 32), -(-H // 32)), block=(256,), device=DEVICE, args=[
            tensor_map(src, np.float32, (W, H), (W * 4,), (32, 32)),
            tensor_map(dst, np.float32, (H, W), ((H + pad) * 4,), (32, 32))])
        out[f"tma/transpose_{H}_{pad}"] = dst.to_host()


def main() -> int:
    global DEVICE
    args = [a for a in sys.argv[1:] if a != "--emu"]
    path = Path(args[0] if args else "hw_reference.npz")
    if "--emu" in sys.argv:
        DEVICE = "emu"
    from ptxforge.runtime.buffers import resolve_device

    dev = resolve_device(DEVICE)
    out: dict[str, np.ndarray] = {}
    for step in (collect_ops, collect_mma, collect_tma):
        t0 = time.perf_counter()
        try:
            step(out)
            print(f"{step.__name__}: ok in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as e:  # keep what the other steps record
            print(f"{step.__name__}: FAILED: {type(e).__name__}: {e}", flush=True)
    who = f"{dev.name}|{dev.arch}|driver {dev.driver_version}" if DEVICE == "cuda" else "emulator"
    out["meta/gpu"] = np.frombuffer(who.encode(), np.uint8)
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size // 1024} KB, {len(out)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
