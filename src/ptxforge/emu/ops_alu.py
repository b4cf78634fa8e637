"""Integer, logic, bit, move, compare and select instructions.

Hot, trivially exact forms (add/sub/mul.lo/mad.lo/mul.wide, min/max, shifts, logic) are inline numpy; the rest
goes to `ptxforge.emu.semantics.integer` (the bit-exact reference), and so do add/sub/mul/mad/min/max when
compiled for reference mode (`ctx.reference`). Shifts and logic have no semantics function: one form.
Float types defer to ops_float.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import ops_float
from ptxforge.emu import ramps as R
from ptxforge.emu.memory import CLUSTER_OFF_MASK, CLUSTER_RANK_SHIFT, SHARED_WINDOW
from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.operands import bits_of_type, is_signed
from ptxforge.emu.ops_float import bc
from ptxforge.emu.semantics import bitops, integer
from ptxforge.emu.semantics import compare as sem_cmp
from ptxforge.ptx import ir
from ptxforge.ptx.isa import FAMILIES, modifier_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    from ptxforge.emu.operands import Ctx, Value
    from ptxforge.emu.registry import Builder

_U: dict[int, type[np.unsignedinteger[Any]]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_S = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
FLOATS = {".f16", ".f16x2", ".bf16", ".bf16x2", ".f32", ".f64", ".tf32"}
# '.f4e' ... '.rc16', as the ISA table lists them (a family with modifiers: never the table's None)
PRMT_MODES: frozenset[str] = FAMILIES["prmt"].modifiers  # type: ignore[assignment]
LOP3_BOOL_OPS = modifier_slot("lop3", "boolop")  # 'or', 'and': p = (d != 0) BoolOp q (semantics.bitops.lop3)


def _op(kind_fn):
    return Op(NORMAL, fn=kind_fn)


def _ty(ctx, default=".b32") -> str:
    ts = ctx.ins.types
    return ts[-1] if ts else default


def _sem():
    return integer


def _semantic_unary(ctx, name, ty, **kw):
    d = ctx.write(ctx.ins.operands[0], ty)
    a = ctx.read(ctx.ins.operands[1], ty)
    fn = getattr(_sem(), name)
    dt = _U[bits_of_type(ty)]
    t = ty[1:]
    return _op(lambda st, m: d(st, np.asarray(fn(a(st), t, **kw)).astype(dt, copy=False), m))


def _semantic_binary(ctx, name, ty, out_ty=None, **kw):
    out_ty = out_ty or ty
    d = ctx.write(ctx.ins.operands[0], out_ty)
    a = ctx.read(ctx.ins.operands[1], ty)
    b = ctx.read(ctx.ins.operands[2], ty)
    fn = getattr(_sem(), name)
    dt = _U[bits_of_type(out_ty)]
    t = ty[1:]
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), t, **kw)).astype(dt, copy=False), m))


# ---------------------------------------------------------------------------- add / sub / mul / mad


def build_add(ctx: Ctx, sub: bool = False) -> Op:
    ty = _ty(ctx)
    if ty in FLOATS:
        return ops_float.build_arith(ctx, "sub" if sub else "add")
    if ctx.ins.has("cc") or ctx.ins.opcode in ("addc", "subc"):
        return build_carry(ctx)
    if ctx.ins.has("sat") or ty.endswith("x2") or ctx.reference:
        return _semantic_binary(ctx, "sub" if sub else "add", ty, sat=ctx.ins.has("sat"))
    ops = ctx.ins.operands
    d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    if sub:
        return _op(lambda st, m: d(st, a(st) - b(st), m))
    if bits_of_type(ty) == 64:  # address arithmetic: a ramp plus a uniform value stays a ramp
        lazy = isinstance(ops[0], ir.Register) and ctx.reg_slot(ops[0]) in R.ramp_only(ctx.layout)
        if lazy:
            a, b = ctx.read(ops[1], ty, keep_ramps=True), ctx.read(ops[2], ty, keep_ramps=True)

        def add64(st, m):
            x, y = a(st), b(st)
            if lazy:
                if m is None:
                    lz = R.lazy_add(st, x, y)
                    if lz is not None:  # kept as the rule: the ld/st after it take one slice
                        d(st, lz, m)
                        return
                x, y = R.value(st, x), R.value(st, y)
            r = x + y
            if m is None and np.ndim(r) == 1:
                _ramp_add(st, x, y, r)
            d(st, r, m)
        return _op(add64)
    return _op(lambda st, m: d(st, a(st) + b(st), m))


def _ramp_add(st, x, y, r) -> None:
    """Tag `r = x + y` (64-bit) as a ramp when one side is a known ramp and the other uniform."""
    if np.ndim(x) == 0:
        x, y = y, x
    if np.ndim(y) != 0:
        return
    tag = R.affine(R.known(st, x), 1, int(y), r.shape[0], 64)
    if tag:
        R.note(st, r, tag)


def build_sub(ctx: Ctx) -> Op:
    return build_add(ctx, sub=True)


def build_carry(ctx: Ctx) -> Op:
    """add.cc / addc[.cc] / sub.cc / subc[.cc]: the carry flag lives in st.cc (per lane); subtraction is
    a + ~b + (1 or CF), so one flag serves mixed add/sub chains as on the hardware."""
    ty = _ty(ctx, ".u32")
    ins = ctx.ins
    ops = ins.operands
    d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    use_in = ins.opcode in ("addc", "subc")
    set_out = ins.has("cc")
    fn = _sem().sub_cc if ins.opcode in ("sub", "subc") else _sem().add_cc
    t = ty[1:]
    dt = _U[bits_of_type(ty)]

    def f(st, m):
        r, carry = fn(*bc(a(st), b(st)), t, carry_in=np.asarray(st.cc) if use_in else None)
        d(st, np.asarray(r).astype(dt, copy=False), m)
        if set_out:
            c = np.broadcast_to(np.asarray(carry, bool), np.shape(st.cc))
            st.cc = c.copy() if m is None else np.where(m, c, st.cc)
    return _op(f)


def build_mul(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    if ty in FLOATS:
        return ops_float.build_arith(ctx, "mul")
    ins = ctx.ins
    mode = "hi" if ins.has("hi") else "wide" if ins.has("wide") else "lo"
    ops = ins.operands
    bits = bits_of_type(ty)
    if ctx.reference:
        return _semantic_binary(ctx, "mul", ty, out_ty="." + ty[1] + str(bits * 2) if mode == "wide" else ty,
                                mode=mode)
    if mode == "lo":
        d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
        return _op(lambda st, m: d(st, a(st) * b(st), m))
    if mode == "wide" and bits <= 32:
        wt = ("." + ty[1] + str(bits * 2))
        d = ctx.write(ops[0], wt)
        a, b = ctx.read(ops[1], ty), ctx.read(ops[2], ty)
        signed = is_signed(ty)
        sd, wd = (_S if signed else _U)[bits], (_S if signed else _U)[bits * 2]
        ud = _U[bits * 2]
        lazy = isinstance(ops[0], ir.Register) and ctx.reg_slot(ops[0]) in R.ramp_only(ctx.layout)

        def wide(st, m):
            x, y = np.asarray(a(st)), np.asarray(b(st))
            if x.ndim == 0 and y.ndim == 1:
                x, y = y, x
            if m is None and y.ndim == 0 and x.ndim == 1 and bits == 32:
                tag = _ramp_wide(st, x, int(y.view(sd)), signed)
                if tag and lazy and st.machine is not None and x.shape[0] == st.N:
                    d(st, R.Ramp(tag, st.N), m)  # only adds and ld/st read it: kept as the rule
                    return
                if tag:  # an index ramp scaled to a byte offset: made from the cached iota in one pass
                    r = R.iota(x.shape[0], np.uint64, tag[1]) + np.uint64(tag[0])
                    R.note(st, r, tag)
                    d(st, r, m)
                    return
            r = x.view(sd).astype(wd)
            if r.ndim == 1:
                np.multiply(r, y.view(sd).astype(wd), out=r)  # in place: one temporary less
                r = r.view(ud)
            else:
                r = (r * y.view(sd).astype(wd)).view(ud)
            d(st, r, m)
        return _op(wide)
    out = ty if mode != "wide" else "." + ty[1] + str(bits * 2)
    return _semantic_binary(ctx, "mul", ty, out_ty=out, mode=mode)


def _ramp_wide(st, x, k: int, signed: bool):
    """The ramp tag of x * k (mul.wide.{s,u}32, k uniform) when x is a ramp (an index scaled to a byte offset,
    the usual start of an address; x is tested here, see ramps.find), else None."""
    tag = R.find(st, x) if k > 0 else None
    if tag and signed and R.affine(tag, 1, 0, x.shape[0], 31) is None:
        return None  # some index is negative as a signed value
    return R.affine(tag, k, 0, x.shape[0], 64)


def build_mad(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    if ty in FLOATS:
        return ops_float.build_fma(ctx)
    ins = ctx.ins
    mode = "hi" if ins.has("hi") else "wide" if ins.has("wide") else "lo"
    ops = ins.operands
    bits = bits_of_type(ty)
    fast = not ctx.reference  # reference: every form from semantics.integer.mad
    if fast and mode == "lo" and not ins.has("cc") and not ins.opcode == "madc" and not ins.has("sat"):
        d = ctx.write(ops[0], ty)
        a, b, c = (ctx.read(o, ty) for o in ops[1:4])

        def madlo(st, m):
            x, k, z = a(st), b(st), c(st)
            if m is None and bits == 32:
                r = R.global_index(st, x, k, z) if np.ndim(k) == 0 else R.global_index(st, k, x, z)
                if r is not None:
                    d(st, r, m)
                    return
            r = x * k
            if type(r) is np.ndarray and r.ndim == 1 and np.ndim(z) <= 1 and np.asarray(z).dtype == r.dtype:
                np.add(r, z, out=r)  # r is a fresh product: added in place
            else:
                r = r + z
            d(st, r, m)
        return _op(madlo)
    if fast and mode == "wide" and bits <= 32 and not ins.has("cc") and ins.opcode != "madc":
        wt = "." + ty[1] + str(bits * 2)
        d = ctx.write(ops[0], wt)
        a, b = ctx.read(ops[1], ty), ctx.read(ops[2], ty)
        c = ctx.read(ops[3], wt)
        if is_signed(ty):
            sd, wd, ud = _S[bits], _S[bits * 2], _U[bits * 2]
            return _op(lambda st, m: d(st, (np.asarray(a(st)).view(sd).astype(wd) *
                                            np.asarray(b(st)).view(sd).astype(wd)).view(ud) + c(st), m))
        ud = _U[bits * 2]
        return _op(lambda st, m: d(st, np.asarray(a(st)).astype(ud) * np.asarray(b(st)).astype(ud)
                                   + c(st), m))
    out = ty if mode != "wide" else "." + ty[1] + str(bits * 2)
    d = ctx.write(ops[0], out)
    a, b = ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    c = ctx.read(ops[3], out)
    sem = _sem()
    use_in = ins.opcode == "madc"
    set_out = ins.has("cc")
    sat = ins.has("sat")
    t = ty[1:]
    dt = _U[bits_of_type(out)]

    def f(st, m):
        if use_in or set_out:
            r = sem.mad(*bc(a(st), b(st), c(st)), t, mode=mode, sat=sat,
                        carry_in=st.cc if use_in else None, cc=True)
            r, carry = r if isinstance(r, tuple) else (r, None)
            if set_out and carry is not None:
                cb = np.asarray(carry).astype(bool)
                st.cc = cb if m is None else np.where(m, cb, st.cc)
        else:
            r = sem.mad(*bc(a(st), b(st), c(st)), t, mode=mode, sat=sat)
        d(st, np.asarray(r).astype(dt, copy=False), m)
    return _op(f)


def build_simple_int(name: str) -> Builder:
    def build(ctx):
        ty = _ty(ctx)
        if ty in FLOATS:
            return ops_float.build_named(ctx, name)
        kw = {}
        if name in ("min", "max") and ctx.ins.has("relu"):
            kw["relu"] = True
        if name in ("min", "max") and not kw and not ty.endswith("x2") and not ctx.reference:
            ops = ctx.ins.operands
            d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
            fn = np.minimum if name == "min" else np.maximum
            if is_signed(ty):
                sd, ud = _S[bits_of_type(ty)], _U[bits_of_type(ty)]
                return _op(lambda st, m: d(st, fn(np.asarray(a(st)).view(sd),
                                                   np.asarray(b(st)).view(sd)).view(ud), m))
            return _op(lambda st, m: d(st, fn(a(st), b(st)), m))
        if name in ("abs", "neg"):
            return _semantic_unary(ctx, name, ty)
        if name in ("mul24", "mad24"):
            mode = "hi" if ctx.ins.has("hi") else "lo"
            if name == "mul24":
                return _semantic_binary(ctx, name, ty, mode=mode)
            ops = ctx.ins.operands
            d = ctx.write(ops[0], ty)
            a, b, c = (ctx.read(o, ty) for o in ops[1:4])
            sem = _sem()
            dt = _U[bits_of_type(ty)]
            return _op(lambda st, m: d(st, np.asarray(sem.mad24(*bc(a(st), b(st), c(st)), ty[1:], mode=mode))
                                       .astype(dt, copy=False), m))
        return _semantic_binary(ctx, name, ty, **kw)
    return build


# ---------------------------------------------------------------------------- logic and shifts


def build_logic(name: str) -> Builder:
    fns = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}

    def build(ctx):
        ty = _ty(ctx)
        ops = ctx.ins.operands
        fn = fns[name]
        d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
        return _op(lambda st, m: d(st, fn(a(st), b(st)), m))
    return build


def build_not(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d, a = ctx.write(ops[0], ty), ctx.read(ops[1], ty)
    return _op(lambda st, m: d(st, ~a(st), m))


def build_cnot(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d, a = ctx.write(ops[0], ty), ctx.read(ops[1], ty)
    dt = _U[bits_of_type(ty)]
    return _op(lambda st, m: d(st, (np.asarray(a(st)) == 0).astype(dt), m))


def build_shift(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ins = ctx.ins
    ops = ins.operands
    bits = bits_of_type(ty)
    dt = _U[bits]
    d, a = ctx.write(ops[0], ty), ctx.read(ops[1], ty)
    left = ins.opcode == "shl"
    signed = is_signed(ty) and not left
    if isinstance(ops[2], ir.Immediate):
        k = min(int(ops[2].value), bits)
        if k >= bits:
            if signed:
                sd = _S[bits]
                return _op(lambda st, m: d(st, (np.asarray(a(st)).view(sd) >> (bits - 1)).view(dt), m))
            z = dt(0)
            return _op(lambda st, m: d(st, np.zeros(np.shape(a(st)), dt) if np.ndim(a(st)) else z, m))
        kk = dt(k)
        if left:
            return _op(lambda st, m: d(st, a(st) << kk, m))
        if signed:
            sd = _S[bits]
            return _op(lambda st, m: d(st, (np.asarray(a(st)).view(sd) >> sd(k)).view(dt), m))
        return _op(lambda st, m: d(st, a(st) >> kk, m))
    b = ctx.read(ops[2], ".u32")

    def f(st, m):
        x = np.asarray(a(st))
        s = np.minimum(np.asarray(b(st)), np.uint32(bits)).astype(dt)
        big = s >= bits
        s2 = np.where(big, dt(0), s).astype(dt)
        if left:
            r = np.where(big, dt(0), x << s2)
        elif signed:
            sd = _S[bits]
            sx = x.view(sd)
            r = np.where(big, sx >> sd(bits - 1), sx >> s2.astype(sd)).view(dt)
        else:
            r = np.where(big, dt(0), x >> s2)
        d(st, np.asarray(r).astype(dt, copy=False), m)
    return _op(f)


def _int_unary_sem(name):
    def build(ctx):
        ty = _ty(ctx)
        ops = ctx.ins.operands
        out_ty = ".u32" if name in ("popc", "clz", "bfind") else ty
        d, a = ctx.write(ops[0], out_ty), ctx.read(ops[1], ty)
        fn = getattr(_bits_sem(), name)
        kw = {"shiftamt": True} if name == "bfind" and ctx.ins.has("shiftamt") else {}
        dt = _U[bits_of_type(out_ty)]
        return _op(lambda st, m: d(st, np.asarray(fn(a(st), ty[1:], **kw)).astype(dt, copy=False), m))
    return build


def _bits_sem():
    return bitops


def build_bfe(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d, a = ctx.write(ops[0], ty), ctx.read(ops[1], ty)
    b, c = ctx.read(ops[2], ".u32"), ctx.read(ops[3], ".u32")
    fn = _bits_sem().bfe
    dt = _U[bits_of_type(ty)]
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st), c(st)), ty[1:])).astype(dt, copy=False), m))


def build_bfi(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    c, e = ctx.read(ops[3], ".u32"), ctx.read(ops[4], ".u32")
    fn = _bits_sem().bfi
    dt = _U[bits_of_type(ty)]
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st), c(st), e(st)), ty[1:])).astype(dt, copy=False),
                               m))


def build_fns(ctx: Ctx) -> Op:
    """fns.b32 d, mask, base, offset: the offset-th set bit of mask from bit base (0xffffffff if none)."""
    ops = ctx.ins.operands
    d = ctx.write(ops[0], ".b32")
    mask, base, off = ctx.read(ops[1], ".b32"), ctx.read(ops[2], ".u32"), ctx.read(ops[3], ".s32")
    fn = _bits_sem().fns
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(mask(st), base(st), off(st)))).astype(np.uint32), m))


def build_bmsk_szext(ctx: Ctx) -> Op:
    """bmsk.mode.b32 d, a, b and szext.mode.type d, a, b (mode clamp or wrap)."""
    ops = ctx.ins.operands
    d, a, b = ctx.write(ops[0], ".b32"), ctx.read(ops[1], ".b32"), ctx.read(ops[2], ".u32")
    mode = "wrap" if ctx.ins.has("wrap") else "clamp"
    sem = _bits_sem()
    if ctx.ins.opcode == "bmsk":
        return _op(lambda st, m: d(st, np.asarray(sem.bmsk(*bc(a(st), b(st)), mode)).astype(np.uint32), m))
    ty = _ty(ctx)[1:]
    return _op(lambda st, m: d(st, np.asarray(sem.szext(*bc(a(st), b(st)), ty, mode)).astype(np.uint32), m))


def build_prmt(ctx: Ctx) -> Op:
    ops = ctx.ins.operands
    d = ctx.write(ops[0], ".b32")
    a, b, c = (ctx.read(o, ".b32") for o in ops[1:4])
    mode = next((s for s in ctx.ins.suffixes if "." + s in PRMT_MODES), None)
    fn = _bits_sem().prmt
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st), c(st)), mode=mode)).astype(np.uint32), m))


def build_lop3(ctx: Ctx) -> Op:
    """lop3.b32 d, a, b, c, immLut and lop3.BoolOp.b32 d|p, a, b, c, immLut, q (p = (d != 0) BoolOp q)."""
    ops = ctx.ins.operands
    pair = isinstance(ops[0], ir.PredPair)
    d = ctx.write(ops[0].first if pair else ops[0], ".b32")  # type: ignore[union-attr]  # pair: a PredPair
    a, b, c = (ctx.read(o, ".b32") for o in ops[1:4])
    lut = int(ops[4].value) if isinstance(ops[4], ir.Immediate) else None
    if lut is None:
        raise ctx.error("lop3 needs an immediate truth table")
    bool_op = next((s for s in ctx.ins.suffixes if s in LOP3_BOOL_OPS), None)
    if bool_op is None:
        return _op(lambda st, m: d(st, bitops.lop3(a(st), b(st), c(st), lut), m))
    p = (ctx.write(ops[0].second, ".pred")  # type: ignore[union-attr]  # pair: a PredPair
         if pair and not isinstance(ops[0].second, ir.Sink) else None)  # type: ignore[union-attr]
    q = ctx.read(ops[5], ".pred")

    def f(st, m):
        r, pr = bitops.lop3(a(st), b(st), c(st), lut, bool_op=bool_op, q=q(st))
        d(st, r, m)
        if p is not None:
            p(st, pr, m)
    return _op(f)


def build_shf(ctx: Ctx) -> Op:
    ops = ctx.ins.operands
    d = ctx.write(ops[0], ".b32")
    a, b, c = ctx.read(ops[1], ".b32"), ctx.read(ops[2], ".b32"), ctx.read(ops[3], ".u32")
    left = ctx.ins.has("l")
    clamp = ctx.ins.has("clamp")

    def f(st, m):
        lo = np.asarray(a(st)).astype(np.uint64)
        hi = np.asarray(b(st)).astype(np.uint64)
        n = np.asarray(c(st)).astype(np.uint64)
        n = np.minimum(n, np.uint64(32)) if clamp else n & np.uint64(31)
        v = (hi << np.uint64(32)) | lo
        if left:
            r = ((v << n) >> np.uint64(32)) & np.uint64(0xFFFFFFFF)
        else:
            r = (v >> n) & np.uint64(0xFFFFFFFF)
        d(st, r.astype(np.uint32), m)
    return _op(f)


# ---------------------------------------------------------------------------- mov / selp / setp


def build_mov(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    dst, src = ops[0], ops[1]
    bits = bits_of_type(ty)
    if isinstance(dst, ir.Vector) and ctx.ins.has(f"v{len(dst.elements)}"):  # mov.v4.u32 %v, {a, b, c, d}
        if not isinstance(src, ir.Vector):
            return _mov_vector_unpack(ctx, dst, src, ty)
        srcs = src.elements
        if len(srcs) != len(dst.elements):
            raise ctx.error(f"{ctx.ins.mnemonic} needs a source vector of {len(dst.elements)} elements")
        moves = [(ctx.write(e, ty), ctx.read(s, ty)) for e, s in zip(dst.elements, srcs, strict=True)]

        def mov_vector(st, m):
            values = [r(st) for _, r in moves]  # all read before any is written (mov.v2 %v, {%v.y, %v.x})
            for (w, _), v in zip(moves, values, strict=True):
                w(st, v, m)
        return _op(mov_vector)
    if isinstance(src, ir.Vector):  # pack
        n = len(src.elements)
        eb = bits // n
        parts = [ctx.read(e, "." + "b" + str(eb)) for e in src.elements]
        d = ctx.write(dst, ty)
        dt = _U[bits]

        def pack(st, m):
            r = dt(0)
            for i, p in enumerate(parts):
                r = r | (np.asarray(p(st)).astype(dt) << dt(i * eb))
            d(st, r, m)
        return _op(pack)
    if isinstance(dst, ir.Vector):  # unpack
        n = len(dst.elements)
        eb = bits // n
        a = ctx.read(src, ty)
        ws = [ctx.write(e, ".b" + str(eb)) for e in dst.elements]
        sdt = _U[eb]
        dt = _U[bits]

        def unpack(st, m):
            v = np.asarray(a(st))
            for i, w in enumerate(ws):
                w(st, (v >> dt(i * eb)).astype(sdt), m)
        return _op(unpack)
    d, a = ctx.write(dst, ty), ctx.read(src, ty)
    return _op(lambda st, m: d(st, a(st), m))


def _mov_vector_unpack(ctx, dst, src, ty):
    """mov.v4.u32 %v, %r1: the scalar's bits split into one field per element, low field first, each
    zero-extended (ptxas 13.0: PRMT byte extracts, also for .s32)."""
    bits = bits_of_type(ty)
    n = len(dst.elements)
    eb = bits // n
    a = ctx.read(src, ty)
    ws = [ctx.write(e, ty) for e in dst.elements]
    dt = _U[bits]
    field = dt((1 << eb) - 1)

    def unpack(st, m):
        v = np.asarray(a(st)).astype(dt, copy=False)
        for i, w in enumerate(ws):
            w(st, (v >> dt(i * eb)) & field, m)
    return _op(unpack)


def build_selp(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    c = ctx.read(ops[3], ".pred")
    dt = _U[bits_of_type(ty)]
    # (the ignores: numpy's stubs give where(c, x, y) with values of type Any the overload of where(c))
    return _op(lambda st, m: d(st, np.where(c(st), a(st), b(st))  # type: ignore[attr-defined]
                               .astype(dt, copy=False), m))


def build_slct(ctx: Ctx) -> Op:
    ts = ctx.ins.types
    ty, cty = ts[0], ts[-1]
    ops = ctx.ins.operands
    d, a, b, c = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty), ctx.read(ops[3], cty)
    dt = _U[bits_of_type(ty)]
    if cty == ".f32":
        return _op(lambda st, m: d(st, np.where(np.asarray(c(st)).view(np.float32) >= 0, a(st), b(st))  # type: ignore[attr-defined]
                                   .astype(dt), m))
    return _op(lambda st, m: d(st, np.where(np.asarray(c(st)).view(np.int32) >= 0, a(st), b(st))  # type: ignore[attr-defined]
                               .astype(dt), m))


_INT_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal,
}
_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def compare_fn(ctx: Ctx, cmp: str, ty: str) -> Callable[[Value, Value], Value]:
    """fn(a_bits, b_bits) -> bool array for setp/set."""
    if ty in FLOATS:
        return ops_float.compare_fn(ctx, cmp, ty)
    fn = _INT_CMP.get(cmp)
    if fn is None:
        raise ctx.error(f"comparison .{cmp} is not valid for {ty}")
    if is_signed(ty) and cmp not in ("lo", "ls", "hi", "hs", "eq", "ne"):
        sd = _S[bits_of_type(ty)]
        return lambda x, y: fn(np.asarray(x).view(sd), np.asarray(y).view(sd))
    return fn


def build_setp(ctx: Ctx) -> Op:
    ins = ctx.ins
    ty = _ty(ctx)
    cmp = next(s for s in ins.suffixes if s in _INT_CMP or s in ops_float.FLOAT_CMPS)
    boolop = next((_BOOL[s] for s in ins.suffixes if s in _BOOL), None)
    ops = ins.operands
    if isinstance(ops[0], ir.PredPair):
        p = ctx.write(ops[0].first, ".pred")
        q = ctx.write(ops[0].second, ".pred") if not isinstance(ops[0].second, ir.Sink) else None
    else:
        p, q = ctx.write(ops[0], ".pred"), None
    a, b = ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    c = ctx.read(ops[3], ".pred") if boolop is not None else None
    if ty.endswith("x2"):  # packed halves: p is the low-half result, q the high-half one
        bname = next((s for s in ins.suffixes if s in _BOOL), None)
        ftz = ins.has("ftz")

        def fx2(st, m):
            r1, r2 = sem_cmp.setp(*bc(a(st), b(st)), cmp, ty[1:], ftz=ftz, bool_op=bname,
                                  c=None if c is None else c(st))
            p(st, np.asarray(r1, bool), m)
            if q is not None:
                q(st, np.asarray(r2, bool), m)
        return _op(fx2)
    fn = compare_fn(ctx, cmp, ty)

    if c is None and q is None:
        return _op(lambda st, m: p(st, fn(a(st), b(st)), m))

    def f(st, m):
        t = fn(a(st), b(st))
        if c is not None:
            cv = c(st)
            r1 = boolop(t, cv)
            r2 = boolop(np.logical_not(t), cv)
        else:
            r1, r2 = t, np.logical_not(t)
        p(st, r1, m)
        if q is not None:
            q(st, r2, m)
    return _op(f)


def build_set(ctx: Ctx) -> Op:
    """set.cmp.dtype.stype d, a, b[, {and|or|xor} c]: all ones (or 1.0f) when true."""
    ins = ctx.ins
    dty, sty = ins.types[0], ins.types[-1]
    cmp = next(s for s in ins.suffixes if s in _INT_CMP or s in ops_float.FLOAT_CMPS)
    boolop = next((_BOOL[s] for s in ins.suffixes if s in _BOOL), None)
    ops = ins.operands
    d, a, b = ctx.write(ops[0], dty), ctx.read(ops[1], sty), ctx.read(ops[2], sty)
    c = ctx.read(ops[3], ".pred") if boolop is not None else None
    dt = _U[bits_of_type(dty)]
    if sty.endswith("x2") or dty in (".f16", ".bf16", ".f16x2", ".bf16x2") or sty in (".f16", ".bf16"):
        bname = next((s for s in ins.suffixes if s in _BOOL), None)
        ftz = ins.has("ftz")
        return _op(lambda st, m: d(st, np.asarray(sem_cmp.set_(*bc(a(st), b(st)), cmp, dty[1:], sty[1:], ftz=ftz,
                                                               bool_op=bname, c=None if c is None else c(st)))
                                   .astype(dt), m))
    fn = compare_fn(ctx, cmp, sty)
    one = np.float32(1.0).view(np.uint32) if dty == ".f32" else dt(~dt(0))

    def f(st, m):
        t = fn(a(st), b(st))
        if c is not None:
            t = boolop(t, c(st))
        d(st, np.where(t, one, dt(0)).astype(dt), m)
    return _op(f)


def build_dp(ctx: Ctx) -> Op:
    """dp4a.atype.btype / dp2a.{lo,hi}.atype.btype d, a, b, c."""
    ins = ctx.ins
    ts = ins.types
    at, bt = (ts[0], ts[1]) if len(ts) >= 2 else (".s32", ".s32")
    ops = ins.operands
    d = ctx.write(ops[0], ".b32")
    a, b, c = ctx.read(ops[1], ".b32"), ctx.read(ops[2], ".b32"), ctx.read(ops[3], ".b32")
    sem = _sem()
    if ins.opcode == "dp4a":
        return _op(lambda st, m: d(st, np.asarray(sem.dp4a(*bc(a(st), b(st), c(st)), at[1:], bt[1:]))
                                   .astype(np.uint32), m))
    mode = "hi" if ins.has("hi") else "lo"
    return _op(lambda st, m: d(st, np.asarray(sem.dp2a(*bc(a(st), b(st), c(st)), at[1:], bt[1:], mode=mode))
                               .astype(np.uint32), m))


def build_sad(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ops = ctx.ins.operands
    d = ctx.write(ops[0], ty)
    a, b, c = (ctx.read(o, ty) for o in ops[1:4])
    sem = _sem()
    dt = _U[bits_of_type(ty)]
    return _op(lambda st, m: d(st, np.asarray(sem.sad(*bc(a(st), b(st), c(st)), ty[1:])).astype(dt, copy=False), m))


def _cluster_split(ctx, a_read, ty):
    """(reader of the 32-bit shared::cluster address, window added back) for mapa / getctarank."""
    generic = not ctx.ins.has("shared::cluster")
    win = np.uint64(SHARED_WINDOW if generic else 0)

    def off(st):
        return (np.asarray(a_read(st)).astype(np.uint64) - win).astype(np.int64)
    return off, win


def build_mapa(ctx: Ctx) -> Op:
    """mapa(.shared::cluster): the same offset in CTA rank r's shared memory, r in the address's rank bits
    (memory.py's Hopper layout)."""
    ty = _ty(ctx, ".u32")
    ops = ctx.ins.operands
    d, a, r = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ".u32")
    off, win = _cluster_split(ctx, a, ty)
    dt = np.uint32 if ty.endswith("32") else np.uint64

    def f(st, m):
        rank = np.asarray(r(st)).astype(np.int64)
        enc = (off(st) & CLUSTER_OFF_MASK) | (rank << CLUSTER_RANK_SHIFT)
        d(st, (enc.astype(np.uint64) + win).astype(dt), m)
    return _op(f)


def build_getctarank(ctx: Ctx) -> Op:
    """getctarank(.shared::cluster): the CTA rank whose shared memory a shared::cluster address names."""
    ty = _ty(ctx, ".u32")
    ops = ctx.ins.operands
    d, a = ctx.write(ops[0], ".u32"), ctx.read(ops[1], ty)
    off, _ = _cluster_split(ctx, a, ty)
    return _op(lambda st, m: d(st, (off(st) >> CLUSTER_RANK_SHIFT).astype(np.uint32), m))


BUILDERS = {
    "dp4a": build_dp, "dp2a": build_dp, "sad": build_sad, "mapa": build_mapa, "getctarank": build_getctarank,
    "add": build_add, "sub": build_sub, "addc": build_carry, "subc": build_carry,
    "mul": build_mul, "mad": build_mad, "madc": build_mad,
    "min": build_simple_int("min"), "max": build_simple_int("max"), "abs": build_simple_int("abs"),
    "neg": build_simple_int("neg"), "div": build_simple_int("div"), "rem": build_simple_int("rem"),
    "mul24": build_simple_int("mul24"), "mad24": build_simple_int("mad24"),
    "and": build_logic("and"), "or": build_logic("or"), "xor": build_logic("xor"), "not": build_not,
    "cnot": build_cnot, "shl": build_shift, "shr": build_shift,
    "popc": _int_unary_sem("popc"), "clz": _int_unary_sem("clz"), "brev": _int_unary_sem("brev"),
    "bfind": _int_unary_sem("bfind"),
    "fns": build_fns, "bmsk": build_bmsk_szext, "szext": build_bmsk_szext,
    "bfe": build_bfe, "bfi": build_bfi, "prmt": build_prmt, "lop3": build_lop3, "shf": build_shf,
    "mov": build_mov, "selp": build_selp, "slct": build_slct, "setp": build_setp, "set": build_set,
}
