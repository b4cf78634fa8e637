"""Tensor-core instructions: ldmatrix, mma.sync, wgmma (sm_90a) and setmaxnreg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import and_, cvt, mov, operand, or_, setp, shr
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.memory import Pointer
from ptxforge.dsl.values import Pred, Reg, RegArray, new_reg, value_of
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ptxforge.dsl.types import DType, DTypeLike
    from ptxforge.dsl.values import SReg


def _vec(regs: Iterable[Reg | SReg], n: int | None, what: str, t: DType | None = None) -> ir.Vector:
    regs = [value_of(r) for r in regs]
    if n is not None and len(regs) != n:
        raise DSLTypeError(f"{what}: expected {n} registers, got {len(regs)}")
    for r in regs:
        if not isinstance(r, Reg):
            raise DSLTypeError(f"{what}: expected registers, got {r!r}")
        if t is not None and r.type.bits != t.bits:
            raise DSLTypeError(f"{what}: {r.name} is {r.type}, expected {t.bits}-bit registers")
    return ir.Vector(tuple(r.operand for r in regs))


def ldmatrix(p: Pointer, *, x: int = 4, trans: bool = False) -> RegArray:
    """`ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 {r..}, [p]`: N 8x8 b16 matrices from shared
    memory into a warp's registers (each lane gives one row address)."""
    if not (isinstance(p, Pointer) and p.space == "shared"):
        raise DSLTypeError(f"ldmatrix: needs a shared-memory pointer, got {p!r}")
    if x not in (1, 2, 4):
        raise DSLError(f"ldmatrix: x must be 1, 2 or 4, got {x}")
    regs = RegArray(new_reg(T.b32) for _ in range(x))
    mods = ["sync", "aligned", "m8n8", f"x{x}"] + (["trans"] if trans else []) + ["shared", "b16"]
    current().emit("ldmatrix", mods, [ir.Vector(tuple(r.operand for r in regs)), p.address()])
    return regs


# registers per thread for mma.sync fragments: shape -> (a, b, c) counts of 32-bit registers for 16-bit inputs
_MMA_FRAGS = {"m16n8k16": (4, 2, 4), "m16n8k8": (2, 1, 4)}
_MMA_FP8 = {"m16n8k32": (4, 2, 4)}


def mma_sync(d: Sequence[Reg] | None, a: Sequence[Reg], b: Sequence[Reg], c: Sequence[Reg], *, shape: str = "m16n8k16",
             atype: DTypeLike = T.bf16, btype: DTypeLike | None = None,
             layout: tuple[str, str] = ("row", "col")) -> RegArray:
    """`mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype d, a, b, c`: one warp-wide tensor-core
    multiply-accumulate. d and c are tuples of f32 registers (d may be c to accumulate in place);
    a and b hold packed inputs in .b32 registers (from ldmatrix or pack)."""
    atype = T.dtype(atype)
    btype = T.dtype(btype) if btype is not None else atype
    frags = _MMA_FRAGS.get(shape) if atype.bits == 16 else _MMA_FP8.get(shape)
    if frags is None:
        raise DSLError(f"mma.sync: shape {shape} with {atype} is not supported by the DSL "
                       f"(use {', '.join(_MMA_FRAGS)} for 16-bit or m16n8k32 for fp8)")
    na, nb, nc = frags
    d = RegArray(d) if d is not None else RegArray(new_reg(T.f32) for _ in range(nc))
    dt = value_of(d[0]).type
    ct = value_of(c[0]).type
    if dt != T.f32 or ct != T.f32:
        raise DSLTypeError(f"mma.sync: the DSL accumulates in f32; got d {dt} and c {ct}")
    mods = ["sync", "aligned", shape, *layout, dt.name, atype.name, btype.name, ct.name]
    current().emit("mma", mods, [_vec(d, nc, "mma d"), _vec(a, na, "mma a", T.b32), _vec(b, nb, "mma b", T.b32),
                                 _vec(c, nc, "mma c")])
    return d


def setmaxnreg(n: int, *, inc: bool) -> None:
    """`setmaxnreg.inc|dec.sync.aligned.u32 n` (sm_90a): raise or lower this warpgroup's per-thread
    register budget (n a multiple of 8 in [24, 256])."""
    if not isinstance(n, int) or n % 8 or not 24 <= n <= 256:
        raise DSLError(f"setmaxnreg: n must be a multiple of 8 in [24, 256], got {n!r}")
    current().emit("setmaxnreg", ["inc" if inc else "dec", "sync", "aligned", "u32"], [ir.Immediate(n, str(n))])


# --------------------------------------------------------------------------- wgmma (sm_90a)


def wgmma_fence() -> None:
    """`wgmma.fence.sync.aligned`: order register/shared accesses before the next wgmma."""
    current().emit("wgmma", ["fence", "sync", "aligned"], [])


def wgmma_commit() -> None:
    """`wgmma.commit_group.sync.aligned`."""
    current().emit("wgmma", ["commit_group", "sync", "aligned"], [])


def wgmma_wait(n: int = 0) -> None:
    """`wgmma.wait_group.sync.aligned n`."""
    current().emit("wgmma", ["wait_group", "sync", "aligned"], [ir.Immediate(n, str(n))])


def wgmma_descriptor(p: Pointer, *, lbo: int, sbo: int, swizzle: int = 0) -> Reg:
    """The 64-bit shared-memory matrix descriptor of `p` for wgmma: start address, leading and stride
    byte offsets (all >> 4) and the swizzle mode (0 none, 1 128B, 2 64B, 3 32B) in bits 62-63."""
    if not (isinstance(p, Pointer) and p.space == "shared"):
        raise DSLTypeError(f"wgmma_descriptor: needs a shared-memory pointer, got {p!r}")
    addr = and_(shr(p.value(), 4), 0x3FFF)
    desc = cvt(addr, T.u64)
    const = ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | (swizzle & 3) << 62
    return or_(desc.view(T.b64), const)


def wgmma_mma_async(d: Sequence[Reg] | None, a_desc: Reg, b_desc: Reg, *, shape: str = "m64n8k16",
                    atype: DTypeLike = T.bf16, btype: DTypeLike | None = None, scale_d: Pred | int = 1,
                    scale_a: int = 1, scale_b: int = 1, trans_a: int = 0, trans_b: int = 0) -> RegArray:
    """`wgmma.mma_async.sync.aligned.shape.f32.atype.btype {d}, a_desc, b_desc, scale_d, sa, sb, ta, tb`:
    a warpgroup (128 threads) multiply-accumulate from shared-memory descriptors into f32 registers
    (n/2 per thread for m64nNk16). `scale_d` 0 ignores the old d (a predicate or a Python int)."""
    atype = T.dtype(atype)
    btype = T.dtype(btype) if btype is not None else atype
    if not shape.startswith("m64n") or "k" not in shape:
        raise DSLError(f"wgmma: shape must be m64nNkK, got {shape!r}")
    n = int(shape[4:shape.index("k")])
    need = n // 2
    d = RegArray(d) if d is not None else RegArray(new_reg(T.f32) for _ in range(need))
    for desc, what in ((a_desc, "a"), (b_desc, "b")):
        if not (isinstance(desc, Reg) and desc.type.bits == 64):
            raise DSLTypeError(f"wgmma: the {what} descriptor must be a 64-bit register (wgmma_descriptor)")
    sd = value_of(scale_d)
    if isinstance(sd, Pred):
        sd_op = sd.operand
    else:
        sd_op = setp("ne", mov(int(sd), type=T.u32), 0).operand
    mods = ["mma_async", "sync", "aligned", shape, "f32", atype.name, btype.name]
    imms = [ir.Immediate(v, str(v)) for v in (scale_a, scale_b, trans_a, trans_b)]
    current().emit("wgmma", mods, [_vec(d, need, "wgmma d", T.f32), a_desc.operand, b_desc.operand, sd_op, *imms])
    return d


__all__ = ["ldmatrix", "mma_sync", "setmaxnreg", "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_descriptor",
           "wgmma_mma_async", "operand"]
