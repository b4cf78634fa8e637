"""Measure the per-SM copy rates the planner (`ptxforge plan`) assumes, with copy kernels written in the DSL.

Kernels (sm_90a), one block per SM (each block records %smid; the run checks they are distinct):
    ldst  THREADS threads, each keeping UNROLL 16-byte `ld.global.nc.L1::no_allocate.v4` loads in flight,
          then `st.global.v4` stores (the DeepEP V1 style warp copy)
    tma   one thread streams 8 KB chunks through a ring of STAGES shared-memory buffers with
          `cp.async.bulk` loads (mbarrier complete_tx) and `cp.async.bulk.global.shared::cta` stores
and three modes: read (loads only), write (stores only), copy (both). For 1..32 SMs it prints GB/s per SM;
with --write it records the figures (median per SM over the SM counts that fit in one wave, dated, with
the device name) in src/ptxforge/plan/calibration.py, which the planner's presets read.

Usage (needs an NVIDIA GPU with sm_90 or newer; without one it says so and exits 0):
    python scripts/calibrate_copy.py [--sms 1 2 4 8 16 24 32] [--mb-per-sm 64] [--repeat 5] [--write h200]
    python scripts/calibrate_copy.py --check      # run every kernel on the CPU emulator and verify the bytes
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ptxforge.dsl import (  # noqa: E402
    bar_sync,
    cp_async_bulk,
    ctaid,
    fence_mbarrier_init,
    if_,
    kernel,
    ld,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait,
    mbarriers,
    mov,
    ptr,
    range_,
    raw,
    reg,
    shared,
    smid,
    st,
    tid,
    u32,
)

THREADS, UNROLL = 512, 4          # ldst: 512 x 4 x 16 B = 32 KB in flight per SM
CHUNK, STAGES = 8192, 4           # tma: 4 x 8 KB = 32 KB of shared memory per SM
VEC = THREADS * UNROLL            # 16-byte vectors per ldst iteration
READ, WRITE, COPY = 0, 1, 2
MODES = {"read": READ, "write": WRITE, "copy": COPY}
CALIBRATION = ROOT / "src" / "ptxforge" / "plan" / "calibration.py"


@kernel(arch="sm_90a", maxntid=THREADS)
def copy_ldst(src: ptr(u32, align=16), dst: ptr(u32, align=16), sm_ids: ptr(u32), vecs_per_block: u32,
              MODE=COPY):
    with if_(tid.x == 0):
        st(sm_ids[ctaid.x], mov(smid))
    base = ctaid.x * vecs_per_block
    acc = reg.u32(0)
    for i in range_(0, vecs_per_block, VEC):
        idx = [(base + i + (u * THREADS) + tid.x) << 2 for u in range(UNROLL)]
        if MODE == WRITE:
            for u in range(UNROLL):
                st(dst[idx[u]], (idx[u], idx[u], idx[u], idx[u]))
            continue
        vals = [ld(src[idx[u]], v=4, nc=True, L1="no_allocate") for u in range(UNROLL)]
        for u in range(UNROLL):
            if MODE == COPY:
                st(dst[idx[u]], tuple(vals[u]))
            else:
                acc ^= vals[u][0] ^ vals[u][3]
    if MODE == READ:
        st(dst[(ctaid.x * THREADS + tid.x) << 2], acc)


@kernel(arch="sm_90a", maxntid=32)
def copy_tma(src: ptr(u32, align=16), dst: ptr(u32, align=16), sm_ids: ptr(u32), chunks_per_block: u32,
             MODE=COPY):
    buf = shared(u32, (STAGES, CHUNK // 4), align=128, name="buf")
    full = mbarriers(STAGES, name="full")
    words = CHUNK // 4
    with if_(tid.x == 0):
        st(sm_ids[ctaid.x], mov(smid))
        for s in range(STAGES):
            mbarrier_init(full[s], 1)
        fence_mbarrier_init()
    bar_sync()
    with if_(tid.x == 0):
        first = ctaid.x * chunks_per_block
        if MODE != WRITE:
            for s in range(STAGES):  # prologue: chunks_per_block >= STAGES
                mbarrier_arrive_expect_tx(full[s], CHUNK)
                cp_async_bulk(buf[s, 0], src + (first + s) * words, CHUNK, full[s])
        for c in range_(0, chunks_per_block):
            s = c & (STAGES - 1)
            if MODE != WRITE:
                mbarrier_wait(full[s], (c >> 2) & 1)
            if MODE != READ:
                raw("cp.async.bulk.global.shared::cta.bulk_group [{g}], [{sm}], {n};\n"
                    "cp.async.bulk.commit_group;",
                    g=(dst + (first + c) * words).value(), sm=buf[s, 0].value(), n=CHUNK)
                if MODE == COPY:
                    raw("cp.async.bulk.wait_group.read 0;")  # buffer s is free for the next load
                else:
                    raw(f"cp.async.bulk.wait_group.read {STAGES - 1};")
            if MODE != WRITE:
                with if_(c + STAGES < chunks_per_block):
                    mbarrier_arrive_expect_tx(full[s], CHUNK)
                    cp_async_bulk(buf[s, 0], src + (first + c + STAGES) * words, CHUNK, full[s])
        if MODE != READ:
            raw("cp.async.bulk.wait_group 0;")


KERNELS = {(engine, mode): k.specialize(MODE=m) for engine, k in (("ldst", copy_ldst), ("tma", copy_tma))
           for mode, m in MODES.items()}


def launch(engine: str, mode: str, blocks: int, per_block_bytes: int, src, dst, ids, device: str):
    k = KERNELS[(engine, mode)]
    if engine == "ldst":
        return k.launch(grid=(blocks,), block=(THREADS,), device=device,
                        args=[src, dst, ids, np.uint32(per_block_bytes // 16)])
    return k.launch(grid=(blocks,), block=(32,), device=device,
                    args=[src, dst, ids, np.uint32(per_block_bytes // CHUNK)])


def check() -> int:
    """Run every kernel on the emulator with a few blocks and verify the bytes each mode moves."""
    blocks = 2
    ok = True
    for (engine, mode) in KERNELS:
        per_block = VEC * 16 * 2 if engine == "ldst" else CHUNK * (STAGES + 2)
        n = blocks * per_block // 4
        src = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
        dst = np.zeros(n, np.uint32)
        ids = np.full(blocks, 0xFFFFFFFF, np.uint32)
        launch(engine, mode, blocks, per_block, src, dst, ids, "emu")
        if mode == "copy":
            good = np.array_equal(dst, src)
        elif mode == "write":
            good = engine == "tma" or np.array_equal(dst, np.arange(n, dtype=np.uint32) & ~np.uint32(3))
        else:
            good = True
            if engine == "ldst":
                words = src.reshape(blocks, -1, UNROLL, THREADS, 4)
                want = np.bitwise_xor.reduce(words[..., 0] ^ words[..., 3], axis=(1, 2))
                got = dst[: blocks * THREADS * 4].reshape(blocks, THREADS, 4)[..., 0]
                good = np.array_equal(got, want)
        good = good and bool((ids != 0xFFFFFFFF).all())
        ok &= good
        note = _assembles(KERNELS[(engine, mode)])
        ok &= "FAILED" not in note
        print(f"{engine:<5} {mode:<6} emulator {'ok' if good else 'WRONG'}{note}")
    return 0 if ok else 1


def _assembles(k) -> str:
    """', ptxas sm_90a ok' when ptxas takes the kernel (and nothing where there is no ptxas)."""
    from ptxforge.toolchain import ToolNotFound, assemble

    try:
        res = assemble(k.ptx(), "sm_90a")
    except ToolNotFound:
        return ""
    return ", ptxas sm_90a ok" if res.ok else f", ptxas FAILED: {res.stderr.strip()}"


def measure(args) -> int:
    from ptxforge.runtime import empty
    from ptxforge.runtime.cuda_device import cuda_device
    from ptxforge.runtime.cuda_driver import unavailable_reason

    why = unavailable_reason()
    if why is not None:
        print(f"calibrate_copy: no GPU here ({why.split('; use')[0]}); nothing measured")
        return 0
    dev = cuda_device()
    per_block = args.mb_per_sm << 20
    top = max(args.sms)
    src = empty(top * per_block // 4, np.uint32, device="cuda")
    dst = empty(top * per_block // 4, np.uint32, device="cuda")
    ids = empty(top, np.uint32, device="cuda")
    print(f"{dev.name}, {dev.arch}; {args.mb_per_sm} MB per SM, median of {args.repeat} launches (CUDA events)")
    print(f"{'engine':<6} {'mode':<6} {'SMs':>4} {'GB/s':>9} {'GB/s per SM':>12}  distinct SMs")
    per_sm: dict[tuple[str, str], list[float]] = {}
    for engine in ("ldst", "tma"):
        for mode in MODES:
            for n in args.sms:
                times = [launch(engine, mode, n, per_block, src, dst, ids, "cuda").wall_s
                         for _ in range(args.repeat + 1)][1:]
                t = statistics.median(times)
                distinct = len(set(ids.to_host()[:n].tolist()))
                moved = n * per_block  # bytes read (read, copy) or written (write)
                rate = moved / t / 1e9
                print(f"{engine:<6} {mode:<6} {n:>4} {rate:9.1f} {rate / n:12.1f}  {distinct}")
                if distinct == n:
                    per_sm.setdefault((engine, mode), []).append(rate / n)
    for buf in (src, dst, ids):
        buf.free()
    figures = {}
    for engine in ("ldst", "tma"):
        r = statistics.median(per_sm.get((engine, "read"), [0.0]))
        w = statistics.median(per_sm.get((engine, "write"), [0.0]))
        c = statistics.median(per_sm.get((engine, "copy"), [0.0]))
        print(f"{engine}: {r:.1f} GB/s read, {w:.1f} GB/s write, {c:.1f} GB/s copy per SM (median over SM counts)")
        # a copy reads and writes every byte: the planner's read and write rates are those of a copy
        figures[f"{engine}_read_gbs"] = round(c, 1)
        figures[f"{engine}_write_gbs"] = round(c, 1)
    if args.write:
        write_calibration(args.write, figures, dev.name)
    return 0


def write_calibration(preset: str, figures: dict, device: str) -> None:
    """Record `figures` for `preset` in src/ptxforge/plan/calibration.py (atomically)."""
    sys.path.insert(0, str(CALIBRATION.parent.parent.parent))
    from ptxforge.plan.calibration import MEASURED

    entry = {**figures, "device": device, "date": datetime.date.today().isoformat(),
             "how": "scripts/calibrate_copy.py (copy mode, median GB/s per SM over 1..32 SMs)"}
    measured = {**MEASURED, preset: entry}
    text = CALIBRATION.read_text().split("MEASURED = ")[0] + "MEASURED = " + repr(measured) + "\n"
    tmp = CALIBRATION.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(CALIBRATION)
    print(f"wrote {preset} figures to {CALIBRATION}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, nargs="+", default=[1, 2, 4, 8, 16, 24, 32])
    ap.add_argument("--mb-per-sm", type=int, default=64, help="MB each SM moves per launch (default 64)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write", metavar="PRESET", help="record the figures for PRESET (e.g. h200)")
    ap.add_argument("--check", action="store_true", help="verify the kernels on the CPU emulator and exit")
    args = ap.parse_args()
    return check() if args.check else measure(args)


if __name__ == "__main__":
    sys.exit(main())
