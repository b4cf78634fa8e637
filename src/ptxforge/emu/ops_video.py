"""Video instructions: scalar vadd/vsub/vabsdiff/vmin/vmax/vshl/vshr/vmad/vset with byte and half-word
selectors and secondary operations, and the SIMD vadd2/4 ... vset2/4 with selectors and masks.

The arithmetic is emu/semantics/video.py (the manual's pseudocode); this module decodes the instruction:
types, `.sat`, the secondary operation (`.add`/`.min`/`.max`), shift mode, comparison, vmad's `.po`,
`.shr7`/`.shr15` and operand negation, and the selector suffixes the parser keeps in register names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.semantics import video
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx

# the modifier groups read from the ISA table (every scalar op's secondary operations are vadd's; the SIMD vset2/4
# compare as vset does)
_SECOPS = modifier_slot("vadd", "secop")
_CMPS = modifier_slot("vset", "cmp")
_SCALES = modifier_slot("vmad", "scale")


def _op(fn):
    return Op(NORMAL, fn=fn)


def _sem():
    return video


def _source(ctx, op):
    """(reader of the whole 32-bit register or immediate, selector or None, negated)."""
    neg = isinstance(op, ir.Minus)
    if neg:
        op = op.operand
    sel = None
    if isinstance(op, ir.Register):
        base, sel = ir.split_selector(op.name)
        op = ir.Register(base, op.span)
    return ctx.read(op, ".b32"), sel, neg


def _dest(ctx, op):
    base, sel = ir.split_selector(op.name) if isinstance(op, ir.Register) else (None, None)
    return ctx.write(ir.Register(base, op.span) if base else op, ".b32"), sel


def _types(ins, n: int) -> list[str]:
    ts = [t[1:] for t in ins.types]
    if len(ts) != n:
        raise ValueError(f"{ins.mnemonic}: expected {n} types")
    return ts


def build_video(ctx: Ctx) -> Op:
    ins = ctx.ins
    op = ins.opcode
    video = _sem()
    ops = ins.operands
    d, dsel = _dest(ctx, ops[0])
    srcs = [_source(ctx, o) for o in ops[1:]]
    (a, asel, neg_a), (b, bsel, neg_b) = srcs[0], srcs[1]
    c = srcs[2][0] if len(srcs) > 2 else (lambda st: np.uint32(0))
    if op != "vmad" and any(s[2] for s in srcs):
        raise ctx.error(f"{op}: only vmad's operands may be negated")
    sat = ins.has("sat")
    secop = next((s for s in ins.suffixes if s in _SECOPS), None)
    cmp = next((s for s in ins.suffixes if s in _CMPS), None)
    has_c = len(srcs) > 2

    def sel_kw():
        return {"asel": asel, "bsel": bsel}

    if op[-1] in "24":  # SIMD
        n, base_op = int(op[-1]), op[:-1]
        if base_op == "vset":
            atype, btype = _types(ins, 2)
            dtype = "u32"
        else:
            dtype, atype, btype = _types(ins, 3)
        add = ins.has("add")

        def fn(st, m):
            d(st, np.asarray(video.simd(base_op, a(st), b(st), c(st), n, dtype=dtype, atype=atype, btype=btype,
                                        sat=sat, add=add, mask=dsel, cmp=cmp, **sel_kw())).astype(np.uint32), m)
        return _op(fn)
    if op == "vset":
        atype, btype = _types(ins, 2)

        def fn(st, m):
            d(st, np.asarray(video.vset(a(st), b(st), cmp, c(st) if has_c else None, atype, btype, secop, dsel,
                                        **sel_kw())).astype(np.uint32), m)
        return _op(fn)
    if op in ("vshl", "vshr"):
        dtype, atype, _ = _types(ins, 3)
        mode = "wrap" if ins.has("wrap") else "clamp"

        def fn(st, m):
            d(st, np.asarray(video.shift(op, a(st), b(st), c(st) if has_c else None, dtype, atype, mode, sat,
                                         secop, dsel, **sel_kw())).astype(np.uint32), m)
        return _op(fn)
    if op == "vmad":
        dtype, atype, btype = _types(ins, 3)
        neg_c = srcs[2][2]
        neg_ab = neg_a != neg_b
        if neg_a and neg_b:
            raise ctx.error("vmad: negate either a or b (or c), not both a and b")
        if (neg_a or neg_b) and neg_c:
            raise ctx.error("vmad: operand negation is limited to either (a xor b) or c")
        scale = next((s for s in ins.suffixes if s in _SCALES), None)
        po = ins.has("po")

        def fn(st, m):
            d(st, np.asarray(video.vmad(*np.broadcast_arrays(a(st), b(st), c(st)), dtype, atype, btype, sat, scale,
                                        po, neg_ab, neg_c, **sel_kw())).astype(np.uint32), m)
        return _op(fn)
    dtype, atype, btype = _types(ins, 3)

    def fn(st, m):  # type: ignore[no-redef]  # (the vector form above returned its own fn)
        d(st, np.asarray(video.scalar(op, a(st), b(st), c(st) if has_c else None, dtype, atype, btype, sat, secop,
                                      dsel, **sel_kw())).astype(np.uint32), m)
    return _op(fn)


BUILDERS = {name: build_video for name in ir.VIDEO_OPCODES}
