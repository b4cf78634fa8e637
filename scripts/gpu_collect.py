"""Record what a real GPU computes, so the emulator can be checked against it on machines without one.

Runs on a GPU machine (scripts/gpu_check.sh calls it) and writes one compressed .npz: for every case of
tests/conformance/hw_ops.py (exact, video, warp and approximate instructions) the GPU's outputs for inputs
drawn from a seed named in the file, and for the tensor-core instructions (mma.sync and wgmma) the GPU's D
for seeded A, B, C. tests/emu/test_hw_reference.py regenerates the inputs and compares the emulator with
the recorded outputs; the shared-memory addresses of the CTAs of 2-CTA clusters are recorded for the
distributed shared memory layout (tests/emu/test_emu_dsmem_layout.py).
Usage: python scripts/gpu_collect.py OUT.npz [--emu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "emu"), str(ROOT / "src")]

from conformance import hw_ops, mma_probes  # noqa: E402

DEVICE = "cuda"  # --emu: a dry run of the whole script on the emulator


def record(out: dict, key: str, inputs, result) -> None:
    """The result under `key`, and beside it (in/...) the digest of the inputs that produced it."""
    out[key] = result
    out["in/" + key.removeprefix("op/")] = np.frombuffer(hw_ops.digest(inputs).encode(), np.uint8)


def collect_ops(out: dict) -> None:
    for case in hw_ops.EXACT + hw_ops.APPROX:
        record(out, f"op/{case.name}", *hw_ops.run_case(case, DEVICE))
    for name in sorted(hw_ops.WARP_BODIES):
        record(out, f"warp/{name}", *hw_ops.run_warp(name, DEVICE))


def collect_mma(out: dict) -> None:
    for kind, probes in (("mma", mma_probes.PROBES), ("wgmma", mma_probes.WGMMA)):
        for probe in probes:
            try:
                record(out, f"{kind}/{probe.name}", *probe.run(DEVICE))
            except Exception as e:  # record the others
                print(f"  {kind}/{probe.name}: FAILED: {type(e).__name__}: {e}", flush=True)


def collect_tma(out: dict) -> None:
    """The TMA transpose store with padded rows: which padding elements the hardware writes."""
    for H, pad in hw_ops.TMA_PADDINGS:
        out[f"tma/transpose_{H}_{pad}"] = hw_ops.run_tma_transpose(H, pad, DEVICE)


def collect_dsmem(out: dict) -> None:
    """Distributed shared memory: the generic and 32-bit shared addresses of each CTA of 2-CTA clusters."""
    out["dsmem/layout"] = hw_ops.run_dsmem_layout(DEVICE)


def main() -> int:
    global DEVICE
    args = [a for a in sys.argv[1:] if a != "--emu"]
    path = Path(args[0] if args else "hw_reference.npz")
    if "--emu" in sys.argv:
        DEVICE = "emu"
    from ptxforge.runtime.buffers import resolve_device

    dev = resolve_device(DEVICE)
    out: dict[str, np.ndarray] = {}
    for step in (collect_ops, collect_mma, collect_tma, collect_dsmem):
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
