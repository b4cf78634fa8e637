"""Hopper warpgroup MMA: wgmma.mma_async (f16/bf16/e4m3/e5m2 inputs, f32 accumulators), fence/commit/wait.

The emulator completes each wgmma at issue, so fence, commit_group and wait_group have nothing to wait
for. A and B come from shared-memory matrix descriptors (A may also come from registers); the
descriptor gives the start address, the leading/stride byte offsets and the swizzle mode
(none, 32B, 64B, 128B), decoded here into the element addresses of the canonical layouts.
"""

from __future__ import annotations

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.ptx import ir

_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}  # descriptor bits 62-63 -> swizzle width in bytes
_ESIZE = {".f16": 2, ".bf16": 2, ".e4m3": 1, ".e5m2": 1}


def _op(fn, kind="sync"):
    from ptxforge.emu.compiler import NORMAL, WARPSYNC, Op

    return Op(WARPSYNC if kind == "sync" else NORMAL, fn=fn)


def descriptor_addresses(desc: int, rows: int, cols: int, esize: int, k_major: bool) -> np.ndarray:
    """Shared-memory byte addresses [rows, cols] of a wgmma operand described by `desc`.

    k_major: element (r, c) has c (the K index) contiguous; otherwise r is the K index and c (M or N)
    is contiguous (the transposed, MN-major layout).
    """
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    return canonical_addresses(start, lbo, sbo, _SWIZZLE[(desc >> 62) & 3], rows, cols, esize)


def canonical_addresses(start: int, lbo: int, sbo: int, width: int, rows: int, cols: int,
                        esize: int) -> np.ndarray:
    """Byte addresses [rows, cols] of a canonical core-matrix layout (shared by wgmma and tcgen05.mma):
    rows are the strided dimension (8-row groups SBO apart), cols the contiguous one; `width` is the
    swizzle width in bytes (0: none, 16-byte chunks of a row LBO apart)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    strided, contig = r, c  # K-major: 8-row groups along M/N, K contiguous; MN-major: K rows, MN contiguous
    byte = contig * esize
    if width == 0:  # interleaved 8x16-byte core matrices
        addr = start + (strided // 8) * sbo + (byte // 16) * lbo + (strided % 8) * 16 + byte % 16
        return addr
    addr = start + (strided // 8) * sbo + (byte // width) * lbo + (strided % 8) * width + byte % width
    mask = width // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def _accumulator_coords(n: int):
    """(row, col) of accumulator register i of thread t (0..127) of a warpgroup, m64nNk16."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + (i % 2)
    return row, col


def build_wgmma(ctx):
    ins = ctx.ins
    if ins.has("fence") or ins.has("commit_group") or ins.has("wait_group"):
        return _op(lambda st, m: None, "normal")
    if not ins.has("mma_async"):
        raise ctx.error(f"{ins.mnemonic} is not supported")
    shape = next(s for s in ins.suffixes if s.startswith("m64n"))
    n = int(shape[4:].split("k")[0])
    kd = int(shape.split("k")[1])
    ts = ins.types
    dt, at, bt = ts[0], ts[1], ts[2]
    if at not in _ESIZE or bt not in _ESIZE or dt != ".f32":
        raise ctx.error(f"wgmma with .{dt[1:]}.{at[1:]}.{bt[1:]} is not supported yet")
    ops = ins.operands
    d_elems = list(ops[0].elements)
    dregs = [ctx.write(e, ".b32") for e in d_elems]
    dread = [ctx.read(e, ".b32") for e in d_elems]
    a_regs = [ctx.read(e, ".b32") for e in ops[1].elements] if isinstance(ops[1], ir.Vector) else None
    a_desc = None if a_regs else ctx.read(ops[1], ".b64")
    b_desc = ctx.read(ops[2], ".b64")
    scale_d = ctx.read(ops[3], ".pred")
    imms = [int(o.value) for o in ops[4:] if isinstance(o, ir.Immediate)]
    neg_a = len(imms) > 0 and imms[0] == -1
    neg_b = len(imms) > 1 and imms[1] == -1
    tnsp_a = len(imms) > 2 and imms[2] == 1
    tnsp_b = len(imms) > 3 and imms[3] == 1
    esize = _ESIZE[at]
    rows, cols = _accumulator_coords(n)

    def decode(codes, ty):
        from ptxforge.emu.semantics import formats as F

        fmt = {".f16": F.F16, ".bf16": F.BF16, ".e4m3": F.E4M3, ".e5m2": F.E5M2}[ty]
        return F.decode(codes.astype(np.uint64), fmt)

    def f(st, m):
        from ptxforge.emu.semantics.formats import F32
        from ptxforge.emu.semantics.mma import _dot_rn

        lanes_live = st.live_mask() if m is None else m
        groups = np.flatnonzero(lanes_live.reshape(-1, 128).any(1)) if st.N % 128 == 0 else \
            np.flatnonzero(np.pad(lanes_live, (0, -st.N % 128)).reshape(-1, 128).any(1))
        dvals = [np.broadcast_to(np.asarray(r(st), np.uint32), (st.N,)) for r in dread]
        new = [v.copy() for v in dvals]
        sd = np.broadcast_to(np.asarray(scale_d(st), bool), (st.N,))
        bd = np.broadcast_to(np.asarray(b_desc(st), np.uint64), (st.N,))
        ad = None if a_desc is None else np.broadcast_to(np.asarray(a_desc(st), np.uint64), (st.N,))
        for g in groups:
            lead = g * 128
            lanes = lead + np.arange(128)
            B_addr = descriptor_addresses(int(bd[lead]), kd, n, esize, k_major=False) if tnsp_b else \
                descriptor_addresses(int(bd[lead]), n, kd, esize, k_major=True).T
            B = decode(_read(st, B_addr, lead, esize), bt)
            if ad is not None:
                A_addr = descriptor_addresses(int(ad[lead]), kd, 64, esize, k_major=False).T if tnsp_a else \
                    descriptor_addresses(int(ad[lead]), 64, kd, esize, k_major=True)
                A = decode(_read(st, A_addr, lead, esize), at)
            else:
                if esize != 2:
                    raise UnsupportedInstruction("wgmma with 8-bit A in registers is not supported")
                A = _a_from_registers(st, a_regs, lanes, at, decode)
            if neg_a:
                A = -A
            if neg_b:
                B = -B
            C = np.zeros((64, n))
            if sd[lead]:
                acc = np.stack([v[lanes] for v in dvals], 1)  # [128, regs]
                C[rows, cols] = acc.view(np.float32)
            D = _dot_rn(A, B, C, F32).astype(np.uint32)
            out = D[rows, cols]  # [128, regs]
            for j in range(len(new)):
                new[j][lanes] = out[:, j]
        for w, v in zip(dregs, new, strict=True):
            w(st, v, m)
    return _op(f)


def _read(st, addr, lead, esize):
    flat = addr.reshape(-1).astype(np.int64)
    lanes = np.full(flat.size, lead)
    return M.load(st.mem, "shared", flat, np.uint16 if esize == 2 else np.uint8, 1, lanes)[0].reshape(addr.shape)


def _a_from_registers(st, regs, lanes, at, decode):
    """A (64x16) from registers: the m64nNk16 A fragment of each warp (4 registers of 2 elements)."""
    t = np.arange(128)
    w, lane = t // 32, t % 32
    A = np.zeros((64, 16))
    for i, r in enumerate(regs):
        v = np.broadcast_to(np.asarray(r(st), np.uint32), (st.N,))[lanes]
        for h in range(2):
            e = 2 * i + h
            row = 16 * w + lane // 4 + 8 * ((e // 2) % 2)
            col = 2 * (lane % 4) + (e % 2) + 8 * (e // 4)
            A[row, col] = decode((v >> np.uint32(16 * h)) & np.uint32(0xFFFF), at)
    return A


BUILDERS = {"wgmma": build_wgmma}
