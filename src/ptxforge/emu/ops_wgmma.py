"""Hopper warpgroup MMA: wgmma.mma_async and wgmma.fence / commit_group / wait_group.

Forms run (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
  .f32.f16.f16 / .f16.f16.f16 / .f32.bf16.bf16            m64nNk16, A and B may be transposed (MN-major)
  .f32.tf32.tf32                                          m64nNk8, K-major only
  .f32/.f16 with .e4m3/.e5m2 inputs (any mix)             m64nNk32, K-major only
  .s32 with .s8/.u8 inputs (any mix), {.satfinite}        m64nNk32, K-major only
A comes from a shared-memory descriptor or from 4 registers (any input type), B from a descriptor.
Single-bit (.b1, k256) and sparse (.sp) forms raise UnsupportedInstruction.

The emulator completes each wgmma at issue, so fence, commit_group and wait_group have nothing to wait
for. A descriptor gives the start address, the leading/stride byte offsets and the swizzle mode (none,
32B, 64B, 128B), decoded here into the element addresses of the manual's canonical layouts.

Numerics (the manual leaves accumulation order, internal precision and rounding unspecified): float
forms sum as an H200's tensor cores do (`semantics.mma.mma_codes`: each block of products aligned to the
largest exponent and truncated, 25 bits kept for f16/bf16/tf32 and 13 for fp8 inputs, rounded toward zero
into .f32 or to nearest into .f16); .tf32 operands drop the low 13 bits of their 32-bit data; imm-scale-a/b
= -1 negate A/B before the product. Integer forms are exact: wrapped to 32 bits, or clamped to
[INT32_MIN, INT32_MAX] with .satfinite.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.op import NORMAL, WARPSYNC, Op
from ptxforge.emu.semantics import mma as S
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx

SWIZZLE_WIDTH = {0: 0, 1: 128, 2: 64, 3: 32}  # descriptor bits 62-63 -> swizzle width in bytes
_ESIZE = {".f16": 2, ".bf16": 2, ".tf32": 4, ".e4m3": 1, ".e5m2": 1, ".s8": 1, ".u8": 1}
_FLOAT8 = (".e4m3", ".e5m2")
_INT8 = (".s8", ".u8")
_LOAD = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _op(fn, kind="sync"):
    return Op(WARPSYNC if kind == "sync" else NORMAL, fn=fn)


def descriptor_addresses(desc: int, rows: int, cols: int, esize: int, k_major: bool) -> np.ndarray:
    """Shared-memory byte addresses [rows, cols] of a wgmma operand described by `desc`.

    k_major: element (r, c) has c (the K index) contiguous; otherwise r is the K index and c (M or N)
    is contiguous (the transposed, MN-major layout).
    """
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    return canonical_addresses(start, lbo, sbo, SWIZZLE_WIDTH[(desc >> 62) & 3], rows, cols, esize, k_major)


@functools.lru_cache(maxsize=512)
def canonical_addresses(start: int, lbo: int, sbo: int, width: int, rows: int, cols: int,
                        esize: int, k_major: bool = True) -> np.ndarray:
    """Byte addresses [rows, cols] of a canonical core-matrix layout (shared by wgmma and tcgen05.mma):
    rows are the strided dimension (8-row groups SBO apart), cols the contiguous one; `width` is the
    swizzle width in bytes (0: none, 16-byte chunks of a row LBO apart). Without swizzling, an MN-major
    operand (k_major False) has its 8-row K groups LBO apart and its 16-byte MN chunks SBO apart.
    Cached (a kernel's descriptors repeat every k-block); the array returned is read-only."""
    addr = _canonical_addresses(start, lbo, sbo, width, rows, cols, esize, k_major)
    addr.flags.writeable = False
    return addr


def _canonical_addresses(start, lbo, sbo, width, rows, cols, esize, k_major):
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    strided, contig = r, c  # K-major: 8-row groups along M/N, K contiguous; MN-major: K rows, MN contiguous
    byte = contig * esize
    if width == 0:  # interleaved 8x16-byte core matrices
        # canonical layouts: K-major ((8,m),(T,2k)):((1T,SBO),(1,LBO)) -- 8-row groups at SBO, 16-byte K
        # chunks at LBO; MN-major ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) -- 16-byte MN chunks at SBO, 8-row
        # K groups at LBO (the roles swap relative to the swizzled MN-major layouts below)
        group, chunk = (sbo, lbo) if k_major else (lbo, sbo)
        return start + (strided // 8) * group + (byte // 16) * chunk + (strided % 8) * 16 + byte % 16
    addr = start + (strided // 8) * sbo + (byte // width) * lbo + (strided % 8) * width + byte % width
    mask = width // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


class FormSource(Protocol):
    """What `WgmmaForm` reads: the instruction, and how to make an error about it (the interpreter's `Ctx`, or
    the native tier's)."""

    ins: ir.Instruction

    def error(self, msg: str) -> Exception: ...


class WgmmaForm:
    """The static part of one wgmma.mma_async: types, shape, immediates, fragment coordinates."""

    def __init__(self, ctx: FormSource) -> None:
        ins = ctx.ins
        if ins.has("sp"):
            raise ctx.error("sparse wgmma (wgmma.mma_async.sp) is not supported")
        shape = next((s for s in ins.suffixes if s.startswith("m64n")), None)
        ts = ins.types
        if shape is None or len(ts) != 3:
            raise ctx.error("expected .m64nNkK and three types (.dtype.atype.btype)")
        self.n = int(shape[4:].split("k")[0])
        self.k = int(shape.split("k")[1])
        self.dt, self.at, self.bt = ts
        dt, at, bt = ts
        form = f"wgmma.mma_async.{shape}.{dt[1:]}.{at[1:]}.{bt[1:]}"
        ok = ((at == bt and at in (".f16", ".bf16", ".tf32") and (dt == ".f32" or (dt == ".f16" and at == ".f16")))
              or (at in _FLOAT8 and bt in _FLOAT8 and dt in (".f32", ".f16"))
              or (at in _INT8 and bt in _INT8 and dt == ".s32"))
        if not ok:
            raise ctx.error(f"{form} is not supported (no such form, or .b1)")
        if self.k != S.wgmma_k(at):
            raise ctx.error(f"{form}: .{at[1:]} inputs need K = {S.wgmma_k(at)}")
        self.integer = at in _INT8
        self.satfinite = ins.has("satfinite")
        if self.satfinite and not self.integer:
            raise ctx.error(f"{form}: .satfinite applies to the integer forms only")
        self.esize = _ESIZE[at]
        ops = ins.operands
        self.a_in_regs = isinstance(ops[1], ir.Vector)
        imms = [int(o.value) for o in ops[4:] if isinstance(o, ir.Immediate)]
        if len(imms) != len(ops[4:]):
            raise ctx.error(f"{form}: imm-scale / imm-trans operands must be immediates")
        # operands after scale-d: none (integer); imm-scale-a, imm-scale-b (tf32, fp8); plus imm-trans-a,
        # imm-trans-b (f16/bf16 with A in shared memory) or imm-trans-b alone (f16/bf16 with A in registers)
        n_trans = 0 if self.integer or at in (".tf32", *_FLOAT8) else (1 if self.a_in_regs else 2)
        expect = 0 if self.integer else 2 + n_trans
        if len(imms) != expect:
            raise ctx.error(f"{form}: expected {expect} immediate operands after scale-d, got {len(imms)}")
        scales, trans = imms[:2], imms[2:]
        if any(s not in (1, -1) for s in scales) or any(t not in (0, 1) for t in trans):
            raise ctx.error(f"{form}: imm-scale must be 1 or -1 and imm-trans 0 or 1")
        self.neg_a = bool(scales) and scales[0] == -1
        self.neg_b = bool(scales) and scales[1] == -1
        self.tnsp_a = not self.a_in_regs and bool(trans) and trans[0] == 1
        self.tnsp_b = bool(trans) and trans[-1] == 1
        self.d_bits = 16 if dt == ".f16" else 32
        nregs = self.n // 2 * self.d_bits // 32
        if not isinstance(ops[0], ir.Vector):
            got = f", got {ops[0].name}" if isinstance(ops[0], ir.Register) else ""
            raise ctx.error(f"{form}: D needs a vector of {nregs} registers{got}")
        if len(ops[0].elements) != nregs:
            raise ctx.error(f"{form}: D needs {nregs} registers, got {len(ops[0].elements)}")
        a = ops[1]
        if self.a_in_regs and (not isinstance(a, ir.Vector) or len(a.elements) != 4):
            count = len(a.elements) if isinstance(a, ir.Vector) else 1
            raise ctx.error(f"{form}: A in registers needs 4 registers, got {count}")
        self.d_rows, self.d_cols = S.wgmma_d_coords(self.n)
        if self.a_in_regs:
            self.a_rows, self.a_cols = S.wgmma_a_coords(at)


def build_wgmma(ctx: Ctx) -> Op:
    ins = ctx.ins
    if ins.has("fence") or ins.has("commit_group") or ins.has("wait_group"):
        return _op(lambda st, m: None, "normal")
    if not ins.has("mma_async"):
        raise ctx.error(f"{ins.mnemonic} is not supported")
    fm = WgmmaForm(ctx)
    ops = ins.operands
    d_elems = list(ops[0].elements)  # type: ignore[union-attr]  # a Vector: WgmmaForm checked
    dregs = [ctx.write(e, ".b32") for e in d_elems]
    dread = [ctx.read(e, ".b32") for e in d_elems]
    a_regs = [ctx.read(e, ".b32") for e in ops[1].elements] if fm.a_in_regs else None  # type: ignore[union-attr]
    a_desc = None if fm.a_in_regs else ctx.read(ops[1], ".b64")
    b_desc = ctx.read(ops[2], ".b64")
    scale_d = ctx.read(ops[3], ".pred")

    def f(st, m):
        lanes_live = st.live_mask() if m is None else m
        groups = np.flatnonzero(np.pad(lanes_live, (0, -st.N % 128)).reshape(-1, 128).any(1))
        if groups.size and groups[-1] * 128 + 128 > st.N:
            raise UnsupportedInstruction("wgmma needs a whole warpgroup (128 threads) in the block")
        dall = np.stack([np.broadcast_to(np.asarray(r(st), np.uint32), (st.N,)) for r in dread], 1)  # [N, regs]
        new = dall.copy()
        sd = np.broadcast_to(np.asarray(scale_d(st), bool), (st.N,))
        bd = np.broadcast_to(np.asarray(b_desc(st), np.uint64), (st.N,))
        ad = None if a_desc is None else np.broadcast_to(np.asarray(a_desc(st), np.uint64), (st.N,))
        aall = None if a_regs is None else \
            np.stack([np.broadcast_to(np.asarray(r(st), np.uint32), (st.N,)) for r in a_regs], 1)
        for g in groups:
            lead = int(g) * 128
            lanes = slice(lead, lead + 128)
            B = _operand(st, int(bd[lead]), lead, fm.k, fm.n, fm.bt, fm.esize, fm.tnsp_b).T
            if ad is not None:
                A = _operand(st, int(ad[lead]), lead, fm.k, 64, fm.at, fm.esize, fm.tnsp_a)
            else:
                A = np.zeros((64, fm.k), np.int64 if fm.integer else np.float64)
                A[fm.a_rows, fm.a_cols] = S.unpack_elements(aall[lanes], fm.at)
            if fm.neg_a:
                A = -A
            if fm.neg_b:
                B = -B
            C = np.zeros((64, fm.n), np.int64 if fm.integer else np.float64)
            if sd[lead]:
                C[fm.d_rows, fm.d_cols] = S.unpack_elements(dall[lanes], fm.dt)
            D = S.mma_codes(A, B, C, fm.at, fm.dt, fm.satfinite, unit="wgmma")
            new[lanes] = S.pack_elements(D[fm.d_rows, fm.d_cols], fm.dt)  # [128, registers]
        for j, w in enumerate(dregs):
            w(st, new[:, j], m)
    return _op(f)


def _operand(st, desc, lead, k, mn, ty, esize, mn_major):
    """Element values [mn, k] of an A (mn = 64) or B (mn = N) operand in shared memory."""
    if mn_major:
        addr = descriptor_addresses(desc, k, mn, esize, k_major=False).T
    else:
        addr = descriptor_addresses(desc, mn, k, esize, k_major=True)
    flat = addr.reshape(-1).astype(np.int64)
    codes = M.load(st.mem, "shared", flat, _LOAD[esize], 1, np.full(flat.size, lead))[0]
    return S.element_values(codes.reshape(addr.shape), ty)


BUILDERS = {"wgmma": build_wgmma}
