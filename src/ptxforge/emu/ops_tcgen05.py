"""Blackwell 5th-generation tensor core instructions (tcgen05, sm_100a) over tensor memory (tensor_memory.py).

Covered: alloc / dealloc / relinquish_alloc_permit (cta_group::1), ld / st with shape 32x32b (.x1 ..
.x128, ld .pack::16b, st .unpack::16b), wait::ld / wait::st, fence::before/after_thread_sync,
mma.cta_group::1 with kind::tf32, kind::f16 (f16/bf16), kind::f8f6f4 (e4m3/e5m2), all into f32, and
kind::i8 (u8/s8 into s32) on A and B from shared-memory descriptors, M = 128, and
commit ... mbarrier::arrive::one (optionally .multicast::cluster). Other forms raise UnsupportedInstruction naming them.

Like wgmma, every tcgen05 operation completes at issue (a legal schedule: a program may only use the
results after the wait/commit that orders them), so waits and fences do nothing and commit arrives on
its mbarrier at once. tcgen05.mma and tcgen05.commit are issued per thread; alloc, dealloc, ld and st
are warp-collective (.sync.aligned) and run once per warp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import tensor_memory as TM
from ptxforge.emu.mbarrier import _mbar_update
from ptxforge.emu.op import NORMAL, WARPSYNC, Op
from ptxforge.emu.ops_wgmma import canonical_addresses
from ptxforge.emu.semantics import formats as F
from ptxforge.emu.semantics.formats import F32
from ptxforge.emu.semantics.mma import _dot_rn
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx

# shared-memory descriptor bits 61-63 -> swizzle width in bytes (PTX ISA "Shared Memory Descriptor")
# tcgen05.fence's and tcgen05.wait's forms, as the ISA table spells them ('fence::before_thread_sync', 'wait::ld')
FENCE_FORMS = modifier_slot("tcgen05.fence", "form")
WAIT_FORMS = modifier_slot("tcgen05.wait", "form")
_SWIZZLE = {0: 0, 2: 128, 4: 64, 6: 32}
# instruction descriptor atype/btype codes per kind -> (format name, element bytes)
_FORMATS = {"f16": {0: ("f16", 2), 1: ("bf16", 2)},
            "tf32": {2: ("tf32", 4)},
            "f8f6f4": {0: ("e4m3", 1), 1: ("e5m2", 1)},
            "i8": {0: ("u8", 1), 1: ("s8", 1)}}
_D_TYPE = {"f16": 1, "tf32": 1, "f8f6f4": 1, "i8": 2}  # only F32 (1) / S32 (2) accumulators here
_K_BYTES = 32  # a dense tcgen05.mma consumes 32 bytes of K per row of A and B (K = 8 / 16 / 32)


def _op(fn, kind="normal"):
    return Op(WARPSYNC if kind == "sync" else NORMAL, fn=fn)


def _lanes(st, m):
    return np.arange(st.N) if m is None else np.flatnonzero(m)


def _tmem(st) -> TM.TensorMemory:
    tm = getattr(st, "tmem", None)
    if tm is None:
        tm = st.tmem = TM.TensorMemory()
    return tm


def _value(reader, st, lane):
    v = reader(st)
    return int(v) if np.ndim(v) == 0 else int(np.asarray(v)[lane])


def _warps(st, m):
    """(first lane of the warp, executing lanes of the warp) for every warp with executing lanes."""
    lanes = _lanes(st, m)
    for w in np.unique(lanes >> 5):
        yield int(w) * 32, lanes[(lanes >> 5) == w]


def _uniform(reader, st, lanes, what: str) -> int:
    v = np.broadcast_to(np.asarray(reader(st)), (st.N,))[lanes].astype(np.int64)
    if (v != v[0]).any():
        bad = int(lanes[np.flatnonzero(v != v[0])[0]])
        raise TM.fault(f"{what} must be the same in every thread of the warp: {int(v[0]):#x} in one thread, "
                       f"{int(v[lanes == bad][0]):#x} in another", bad)
    return int(v[0])


def _where(ctx) -> str:
    return f"{ctx.ins.span.file}:{ctx.ins.span.line}"


# ---------------------------------------------------------------------------- allocation


def _check_cta_group(ctx):
    if ctx.ins.has("cta_group::2"):
        raise ctx.error(".cta_group::2 (a pair of CTAs sharing tensor memory) is not supported yet")


def build_alloc(ctx: Ctx) -> Op:
    _check_cta_group(ctx)
    ops = ctx.ins.operands
    space, dst = ctx.address(ops[0], "shared")
    ncols = ctx.read(ops[1], ".u32")
    where = _where(ctx)

    def alloc(st, m):
        tm = _tmem(st)
        lps = st.mem.lanes_per_slot
        for lead, lanes in _warps(st, m):
            n = _uniform(ncols, st, lanes, "tcgen05.alloc: the column count")
            first = tm.alloc(lead // lps, n, int(lanes[0]), where)
            one = lanes[:1]  # one store per warp: the address goes to shared memory once
            a = np.broadcast_to(np.asarray(dst(st)), (st.N,))[one]
            M.store(st.mem, space, a, np.uint32, [np.asarray([first], np.uint32)], one)
    return _op(alloc, "sync")


def build_dealloc(ctx: Ctx) -> Op:
    _check_cta_group(ctx)
    ops = ctx.ins.operands
    taddr = ctx.read(ops[0], ".b32")
    ncols = ctx.read(ops[1], ".u32")

    def dealloc(st, m):
        tm = _tmem(st)
        lps = st.mem.lanes_per_slot
        for lead, lanes in _warps(st, m):
            a = _uniform(taddr, st, lanes, "tcgen05.dealloc: the address")
            n = _uniform(ncols, st, lanes, "tcgen05.dealloc: the column count")
            tm.dealloc(lead // lps, a, n, int(lanes[0]))
    return _op(dealloc, "sync")


def build_relinquish(ctx: Ctx) -> Op:
    _check_cta_group(ctx)

    def relinquish(st, m):
        tm = _tmem(st)
        for lead, _ in _warps(st, m):
            tm.relinquish(lead // st.mem.lanes_per_slot)
    return _op(relinquish, "sync")


# ---------------------------------------------------------------------------- ld / st


def _shape_and_count(ctx):
    ins = ctx.ins
    shape = next((s for s in ins.suffixes if "x" in s and s[0].isdigit()), None)
    num = next((s for s in ins.suffixes if s[0] == "x" and s[1:].isdigit()), None)
    if shape != "32x32b":
        raise ctx.error(f"tcgen05 shape .{shape} is not supported yet (only .32x32b)")
    if num is None:
        raise ctx.error("missing the .num repeat count (.x1 .. .x128)")
    return int(num[1:])


def build_ld_st(ctx: Ctx) -> Op:
    ins = ctx.ins
    load = ins.has("ld")
    if load and ins.has("red"):
        raise ctx.error("tcgen05.ld.red is not supported yet")
    ncols = _shape_and_count(ctx)
    packed = ins.has("pack::16b") if load else ins.has("unpack::16b")
    ops = ins.operands
    vec, addr = (ops[0], ops[1]) if load else (ops[1], ops[0])
    if len(ops) > 2:
        raise ctx.error("the optional immediate offset / redval operands are not supported yet")
    elems = list(vec.elements) if isinstance(vec, ir.Vector) else [vec]
    # .xN moves N registers per thread (ptxas agrees, also with packing); .pack::16b / .unpack::16b put
    # two adjacent columns' 16-bit elements in one register, so the access then spans 2N columns.
    # The manual does not say what unpack leaves in a column's upper 16 bits: the emulator writes zeros.
    nregs = ncols
    if packed:
        ncols *= 2
    if len(elems) != nregs:
        raise ctx.error(f".32x32b.x{nregs} needs {nregs} registers, got {len(elems)}")
    _, taddr = ctx.address(addr, "tensor")
    what = "tcgen05.ld" if load else "tcgen05.st"
    regs = [ctx.write(e, ".b32") for e in elems] if load else [ctx.read(e, ".b32") for e in elems]

    def access(st, m):
        tm = _tmem(st)
        lps = st.mem.lanes_per_slot
        warp_ids = np.broadcast_to(np.asarray(st.sreg("%warpid")), (st.N,))
        out = [np.zeros(st.N, np.uint32) for _ in regs] if load else None
        vals = None if load else [np.broadcast_to(np.asarray(r(st), np.uint32), (st.N,)) for r in regs]
        for lead, lanes in _warps(st, m):
            a = _uniform(taddr, st, lanes, f"{what}: the tensor memory address")
            row, col = TM.split(a)
            first = int(lanes[0])
            TM.check_warp_lanes(int(warp_ids[first]), row, 32, first, a, what)
            slot = lead // lps
            cells = tm.check(slot, row, 32, col, ncols, first, a, what)
            t = lanes - lead  # thread i of the warp accesses lane row + i
            if load:
                for hook in st.machine.hooks.on_tmem_load:
                    hook(st, tm, slot, row, col, ncols, lanes, what)
                got = cells[t]  # [threads, ncols]
                if packed:  # two adjacent columns' low halves -> one register (manual: .pack::16b)
                    got = (got[:, 0::2] & 0xFFFF) | ((got[:, 1::2] & 0xFFFF) << 16)
                for j in range(nregs):
                    out[j][lanes] = got[:, j]
            else:
                v = np.stack([x[lanes] for x in vals], 1)
                if packed:  # one register -> two adjacent columns, 16 bits each (upper halves zero)
                    v = np.stack([v & 0xFFFF, v >> 16], 2).reshape(len(lanes), ncols)
                cells[t] = v
                tm.written[slot][row + t, col: col + ncols] = True
        if load:
            for w, v in zip(regs, out, strict=True):
                w(st, v, m)
    return _op(access, "sync")


# ---------------------------------------------------------------------------- mma


def _decode(codes, name):
    if name in ("u8", "s8"):
        v = codes.astype(np.int64)
        return np.where(v >= 128, v - 256, v) if name == "s8" else v
    fmt = {"f16": F.F16, "bf16": F.BF16, "tf32": F.TF32, "e4m3": F.E4M3, "e5m2": F.E5M2}[name]
    return F.decode(codes.astype(np.uint64), fmt)  # tf32: the upper 19 bits of each 32-bit element


def _descriptor(desc: int, lane: int, which: str):
    """(start, lbo, sbo, swizzle width) of a tcgen05 shared-memory descriptor, checked per the manual."""
    if (desc >> 46) & 7 != 1:
        raise TM.fault(f"tcgen05.mma: the {which} descriptor {desc:#018x} has {(desc >> 46) & 7:#05b} in bits "
                       "46-48; the manual fixes them to 0b001 (a wgmma-style descriptor?)", lane)
    mode = (desc >> 61) & 7
    if mode not in _SWIZZLE:
        what = "128-byte swizzling with 32-byte atoms is not supported yet" if mode == 1 else "is invalid"
        raise TM.fault(f"tcgen05.mma: the {which} descriptor's swizzle mode {mode} {what}", lane)
    if (desc >> 52) & 1:
        raise TM.fault(f"tcgen05.mma: the {which} descriptor uses the absolute leading-dimension address mode "
                       "(bit 52), which sm_100a does not have", lane)
    if (desc >> 49) & 7:
        raise TM.fault(f"tcgen05.mma: the {which} descriptor's matrix base offset {(desc >> 49) & 7} is not "
                       "supported yet (only 0: patterns that start on their swizzle boundary)", lane)
    enc = 0x3FFF
    return (desc & enc) << 4, ((desc >> 16) & enc) << 4, ((desc >> 32) & enc) << 4, _SWIZZLE[mode]


def _operand(st, desc, lane, which, rows, kdim, esize, name, mn_major):
    """A (rows = M) or B (rows = N) as float64 [rows, K] from shared memory."""
    start, lbo, sbo, width = _descriptor(desc, lane, which)
    if mn_major:  # K rows strided, M/N contiguous
        addr = canonical_addresses(start, lbo, sbo, width, kdim, rows, esize, k_major=False).T
    else:
        addr = canonical_addresses(start, lbo, sbo, width, rows, kdim, esize)
    flat = addr.reshape(-1).astype(np.int64)
    codes = M.load(st.mem, "shared", flat, {1: np.uint8, 2: np.uint16, 4: np.uint32}[esize], 1,
                   np.full(flat.size, lane))[0]
    return _decode(np.asarray(codes).reshape(addr.shape), name)


def _instruction(idesc: int, kind: str, lane: int):
    """Decode the 32-bit instruction descriptor (PTX ISA "Instruction descriptor", kind::tf32, f16,
    f8f6f4, i8)."""
    def bad(msg):
        return TM.fault(f"tcgen05.mma.kind::{kind}: instruction descriptor {idesc:#010x}: {msg}", lane)
    if idesc & 0b100:
        raise bad("sparse matrices (bit 2) are not supported yet")
    if (idesc >> 4) & 3 != _D_TYPE[kind]:
        want = "kind::i8 needs S32 (2)" if kind == "i8" else "only F32 (1) accumulators are supported yet"
        raise bad(f"D type {(idesc >> 4) & 3} (bits 4-5): {want}")
    if idesc & 0b1000 and kind != "i8":
        raise bad("saturate (bit 3) applies to kind::i8 only")
    if kind == "i8" and idesc & (3 << 13):
        raise bad("kind::i8 cannot negate A or B (bits 13-14)")
    fmts = _FORMATS[kind]
    a, b = (idesc >> 7) & 7, (idesc >> 10) & 7
    if a not in fmts or b not in fmts:
        raise bad(f"A/B types {a}/{b} (bits 7-9, 10-12): supported are "
                  + ", ".join(f"{k} = {v[0]}" for k, v in fmts.items()))
    n, mm = ((idesc >> 17) & 0x3F) << 3, ((idesc >> 24) & 0x1F) << 4
    if mm != 128:
        raise bad(f"M = {mm} (bits 24-28): only M = 128 (one D row per tensor memory lane) is supported yet")
    if n < 16 or n > 256 or n % 16:
        raise bad(f"N = {n} (bits 17-22): M = 128 needs N a multiple of 16 from 16 to 256")
    if (idesc >> 30) & 3:
        raise bad("the B-reuse shift (bits 30-31) applies to .ws only")
    return dict(a=fmts[a], b=fmts[b], sat=bool(idesc & 0b1000), neg_a=bool(idesc >> 13 & 1),
                neg_b=bool(idesc >> 14 & 1), tr_a=bool(idesc >> 15 & 1), tr_b=bool(idesc >> 16 & 1), m=mm, n=n)


def build_mma(ctx: Ctx) -> Op:
    ins = ctx.ins
    _check_cta_group(ctx)
    kind = next((s.split("::")[1] for s in ins.suffixes if s.startswith("kind::")), None)
    for s in ("ws", "sp", "block_scale", "collector::a::fill", "collector::a::use", "collector::a::lastuse",
              "ashift"):
        if ins.has(s):
            raise ctx.error(f"tcgen05.mma with .{s} is not supported yet")
    if kind not in _FORMATS:
        raise ctx.error(f"tcgen05.mma.kind::{kind} is not supported yet (kind::tf32, f16, f8f6f4 and i8 are)")
    ops = ins.operands
    if len(ops) != 5 or isinstance(ops[4], ir.Vector | ir.Immediate):
        raise ctx.error("only the form [d], a-desc, b-desc, idesc, enable-input-d is supported yet "
                        "(no disable-output-lane, scale-input-d)")
    if isinstance(ops[1], ir.Address):
        raise ctx.error("A in tensor memory ([a-tmem]) is not supported yet")
    _, d_addr = ctx.address(ops[0], "tensor")
    a_desc, b_desc = ctx.read(ops[1], ".b64"), ctx.read(ops[2], ".b64")
    idesc, enable_d = ctx.read(ops[3], ".b32"), ctx.read(ops[4], ".pred")

    def mma(st, m):
        tm = _tmem(st)
        lps = st.mem.lanes_per_slot
        for lane in _lanes(st, m).tolist():  # a single-thread instruction: every executing thread issues one
            d = _value(d_addr, st, lane) & 0xFFFFFFFF
            f = _instruction(_value(idesc, st, lane), kind, lane)
            row, col = TM.split(d)
            if row != 0:
                raise TM.fault(f"tcgen05.mma: D at {d:#010x} starts at lane {row}; with M = 128 D occupies "
                               "lanes 0-127, so the address must name lane 0", lane, d)
            slot = lane // lps
            cells = tm.check(slot, 0, 128, col, f["n"], lane, d, "tcgen05.mma D")
            (an, es), (bn, _) = f["a"], f["b"]
            k = _K_BYTES // es
            A = _operand(st, _value(a_desc, st, lane) & (2 ** 64 - 1), lane, "A", f["m"], k, es, an, f["tr_a"])
            B = _operand(st, _value(b_desc, st, lane) & (2 ** 64 - 1), lane, "B", f["n"], k, es, bn, f["tr_b"])
            if f["neg_a"]:
                A = -A
            if f["neg_b"]:
                B = -B
            en = enable_d(st)
            use_d = bool(en if np.ndim(en) == 0 else en[lane])
            if use_d:
                for hook in st.machine.hooks.on_tmem_mma_input:
                    hook(st, tm, slot, col, f["n"], lane, "tcgen05.mma with enable-input-d")
            TM.mark_written(tm, slot, 0, 128, col, f["n"])
            tm.mma_issued(slot, lane, col, f["n"])
            if kind == "i8":  # exact integer products and sums, wrapping (or clamped with saturate)
                acc = A @ B.T + (cells.view(np.int32).astype(np.int64) if use_d else 0)
                if f["sat"]:
                    acc = np.clip(acc, -(1 << 31), (1 << 31) - 1)
                cells[:] = (acc & 0xFFFFFFFF).astype(np.uint32)
                continue
            C = cells.view(np.float32).astype(np.float64) if use_d else np.zeros((128, f["n"]))
            cells[:] = _dot_rn(A, B.T, C, F32).astype(np.uint32)
    return _op(mma)


# ---------------------------------------------------------------------------- commit


def build_commit(ctx: Ctx) -> Op:
    ins = ctx.ins
    _check_cta_group(ctx)
    if not ins.has("mbarrier::arrive::one"):
        raise ctx.error("tcgen05.commit without .mbarrier::arrive::one is not supported")
    ops = ins.operands
    space, bar = ctx.address(ops[0], "shared")
    if space == "generic":
        raise ctx.error("tcgen05.commit needs a .shared::cluster mbarrier address")
    multicast = ins.has("multicast::cluster")
    mask = ctx.read(ops[1], ".b16") if multicast else None

    def commit(st, m):  # every tcgen05 op of this thread has completed: arrive now
        tm = _tmem(st)
        for lane in _lanes(st, m).tolist():
            tm.commit(lane // st.mem.lanes_per_slot, lane)
        if not multicast:
            _mbar_update(st, m, space, bar, count=1)
            return
        lanes = _lanes(st, m)
        a = np.broadcast_to(np.asarray(bar(st), np.int64), (st.N,)) & M.CLUSTER_OFF_MASK
        bits = np.broadcast_to(np.asarray(mask(st), np.int64), (st.N,))
        for r in range(16):
            sel = np.zeros(st.N, bool)
            sel[lanes] = (bits[lanes] >> r) & 1 == 1
            if sel.any():
                ar = a | (r << M.CLUSTER_RANK_SHIFT)
                _mbar_update(st, sel, space, lambda st, ar=ar: ar, count=1)
    return _op(commit)


def _nothing(st, m):
    return None


def build_tcgen05(ctx: Ctx) -> Op:
    ins = ctx.ins
    head = ins.suffixes[0] if ins.suffixes else ""
    if head in FENCE_FORMS:
        return _op(_nothing)  # operations complete at issue: nothing to order
    if head in WAIT_FORMS:
        return _op(_nothing, "sync")
    builder = {"alloc": build_alloc, "dealloc": build_dealloc, "relinquish_alloc_permit": build_relinquish,
               "ld": build_ld_st, "st": build_ld_st, "mma": build_mma, "commit": build_commit}.get(head)
    if builder is None:
        raise ctx.error(f"tcgen05.{head} is not supported yet")
    return builder(ctx)


BUILDERS = {"tcgen05": build_tcgen05}
