"""Floating-point instructions and cvt: plumbing to `ptxforge.emu.semantics` (the bit-exact reference).

Only f32/f64 add/sub/mul with .rn and no .ftz/.sat take an inline numpy path (IEEE round-to-nearest is
exactly numpy's); their NaN results are made canonical (0x7fffffff) as the hardware does. Compiled for
reference mode (`ctx.reference`) every form goes to the semantics functions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, overload

import numpy as np

from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.operands import bits_of_type, is_signed
from ptxforge.ptx.isa import FAMILIES, modifier_slot

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from ptxforge.emu.operands import Ctx, Value

_U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_S = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_F = {32: np.float32, 64: np.float64}
_CANON = {32: np.uint32(0x7FFFFFFF), 64: np.uint64(0x7FFFFFFFFFFFFFFF)}
# the modifier groups builders pick from, read from the ISA table (no dots): a rounding any float family lists
# ('rn' ... 'rna', 'rs'), cvt's rounding to an integer, setp/set's comparisons on floats, testp's classes
ROUNDINGS = frozenset().union(*(modifier_slot(f, "rnd") for f, spec in FAMILIES.items()
                                if any(name == "rnd" for name, _ in spec.slots)))
IROUND = modifier_slot("cvt", "irnd")
FLOAT_CMPS = modifier_slot("setp", "cmp_float")
TESTP_CLASSES = modifier_slot("testp", "class")
HALF = {".f16", ".bf16", ".f16x2", ".bf16x2"}


def sem(name: str) -> ModuleType:
    """A semantics module by name (imported lazily; it is written alongside the emulator)."""
    return importlib.import_module(f"ptxforge.emu.semantics.{name}")


def _op(fn):
    return Op(NORMAL, fn=fn)


def _ty(ctx):
    ts = ctx.ins.types
    return ts[-1] if ts else ".f32"


def _rnd(ctx, default="rn"):
    return next((s for s in ctx.ins.suffixes if s in ROUNDINGS), default)


@overload
def bc(x: Value, y: Value, /) -> tuple[Value, Value]: ...
@overload
def bc(x: Value, y: Value, z: Value, /) -> tuple[Value, Value, Value]: ...
@overload
def bc(*xs: Value) -> tuple[Value, ...]: ...
def bc(*xs: Value) -> tuple[Value, ...]:
    """Arguments broadcast to one shape (the semantics functions expect equal shapes)."""
    if all(np.ndim(x) == 0 for x in xs) or all(np.shape(x) == np.shape(xs[0]) for x in xs):
        return xs
    return np.broadcast_arrays(*xs)


def _finish(r, bits):
    """Canonicalise NaN results (hardware returns 0x7fffffff; an f64 NaN from NaN inputs keeps a payload,
    see semantics.floating, which `build_arith` defers to then)."""
    f = np.asarray(r)
    if f.ndim and f.size and not np.isnan(f.min()):  # the minimum is NaN if any lane is: one read pass
        return f.view(_U[bits])
    nan = np.isnan(f)
    b = f.view(_U[bits])
    if nan.any():
        b = np.where(nan, _CANON[bits], b)
    return b


def build_arith(ctx: Ctx, name: str) -> Op:
    """add/sub/mul on float types."""
    ty = _ty(ctx)
    ins = ctx.ins
    ops = ins.operands
    d, a, b = ctx.write(ops[0], ty), ctx.read(ops[1], ty), ctx.read(ops[2], ty)
    rnd = _rnd(ctx)
    ftz, sat = ins.has("ftz"), ins.has("sat")
    bits = bits_of_type(ty)
    if ty in (".f32", ".f64") and rnd == "rn" and not ftz and not sat and not ins.has("approx") and \
            not ctx.reference:
        fdt, udt = _F[bits], _U[bits]
        npfn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name]
        exact = getattr(sem("floating"), name)

        def fast(st, m):
            x, y = a(st), b(st)
            r = npfn(np.asarray(x).view(fdt), np.asarray(y).view(fdt))
            if bits == 64 and np.isnan(np.min(r)):  # f64 NaNs keep an input's payload: the semantics' rule
                r = np.asarray(exact(*bc(x, y), "f64", rnd="rn")).astype(udt, copy=False)
                d(st, r, m)
                return
            d(st, _finish(r, bits).astype(udt, copy=False), m)
        return _op(fast)
    kw = {"rnd": rnd, "ftz": ftz, "sat": sat}
    if ty in HALF:
        fn = getattr(sem("half"), name)
        kw["relu"] = ins.has("relu")
    else:
        fn = getattr(sem("floating"), name)
    dt = _U[bits]
    t = ty[1:]
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), t, **kw)).astype(dt, copy=False), m))


def build_fma(ctx: Ctx) -> Op:
    ty = _ty(ctx)
    ins = ctx.ins
    ops = ins.operands
    d = ctx.write(ops[0], ty)
    a, b, c = (ctx.read(o, ty) for o in ops[1:4])
    kw = {"rnd": _rnd(ctx), "ftz": ins.has("ftz"), "sat": ins.has("sat")}
    if ty in HALF:
        fn = sem("half").fma
        kw["relu"] = ins.has("relu")
    else:
        fn = sem("floating").fma
    dt = _U[bits_of_type(ty)]
    t = ty[1:]
    if ty == ".f32" and kw == {"rnd": "rn", "ftz": False, "sat": False} and not ctx.reference:
        return _op(lambda st, m: d(st, fma_rn_f32(a(st), b(st), c(st), fn), m))
    return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st), c(st)), t, **kw)).astype(dt, copy=False), m))


_LOW28 = np.uint64((1 << 28) - 1)


def fma_rn_f32(x: Value, y: Value, z: Value, exact: Callable[..., Value]) -> Value:
    """fma.rn.f32 on raw bits, bit-identical to `exact` (semantics.floating.fma) and faster on whole arrays.

    x * y is exact in float64 (24 + 24 significand bits); s = fl64(x*y + z) rounded to float32 is the correctly
    rounded result unless s is inexact and lies on a float32 rounding boundary (double rounding). Such an s has
    its 28 low significand bits zero (a boundary of the coarser subnormal grid too), as have 0, inf and NaN:
    only the lanes whose s does go to `exact`, typically none."""
    if type(x) is np.ndarray and type(y) is np.ndarray and type(z) is np.ndarray and x.ndim == 1 and \
            x.shape == y.shape == z.shape and x.itemsize == y.itemsize == z.itemsize == 4:
        xs, ys, zs = x, y, z  # three lane arrays, the usual case: no further tests
    else:
        xs, ys, zs = np.asarray(x), np.asarray(y), np.asarray(z)
        arr = next((v for v in (xs, ys, zs) if v.ndim == 1), None)
        if arr is None or any(v.ndim not in (0, 1) or (v.ndim and v.shape != arr.shape) or v.dtype.itemsize != 4
                              for v in (xs, ys, zs)):
            return np.asarray(exact(*bc(x, y, z), "f32", rnd="rn")).astype(np.uint32, copy=False)
    if xs.ndim or ys.ndim:
        first, other = (xs, ys) if xs.ndim else (ys, xs)
        s = first.view(np.float32).astype(np.float64)
        np.multiply(s, other.view(np.float32), out=s)  # exact: float32 operands widened
        np.add(s, zs.view(np.float32), out=s)
    else:  # a uniform product
        s = zs.view(np.float32).astype(np.float64)
        np.add(s, np.float64(xs.view(np.float32)) * np.float64(ys.view(np.float32)), out=s)
    r = s.astype(np.float32).view(np.uint32)
    low = np.bitwise_and(s.view(np.uint64), _LOW28, out=s.view(np.uint64))  # s is ours and no longer needed
    if np.count_nonzero(low) != low.size:  # cheaper than `not low.all()`
        lanes = np.flatnonzero(low == 0)
        pick = [v if v.ndim == 0 else v[lanes] for v in (xs, ys, zs)]
        r[lanes] = np.asarray(exact(*bc(*pick), "f32", rnd="rn")).astype(np.uint32, copy=False)
    return r


_APPROX = {"ex2", "lg2", "sin", "cos", "tanh", "rsqrt"}


def build_named(ctx: Ctx, name: str) -> Op:
    """div, rcp, sqrt, rsqrt, ex2, lg2, sin, cos, tanh, abs, neg, min, max, copysign on floats."""
    ty = _ty(ctx)
    ins = ctx.ins
    ops = ins.operands
    t = ty[1:]
    bits = bits_of_type(ty)
    dt = _U[bits]
    ftz = ins.has("ftz")
    d = ctx.write(ops[0], ty)
    srcs = [ctx.read(o, ty) for o in ops[1:]]
    if name in ("min", "max"):
        mod = sem("half") if ty in HALF else sem("float_misc")
        fn = getattr(mod, name)
        kw = {"ftz": ftz, "NaN": ins.has("NaN"), "xorsign_abs": ins.has("xorsign"),
              "relu": ins.has("relu")}
        if ty in HALF:
            a, b = srcs[0], srcs[1]
            return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), t, **kw)).astype(dt, copy=False), m))
        if len(srcs) == 3:
            a, b, c = srcs
            return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st), c(st)), ty=t, **kw))
                                       .astype(dt, copy=False), m))
        a, b = srcs
        return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), ty=t, **kw)).astype(dt, copy=False), m))
    if name in ("abs", "neg"):
        mod = sem("half") if ty in HALF else sem("float_misc")
        fn = getattr(mod, name)
        a = srcs[0]
        return _op(lambda st, m: d(st, np.asarray(fn(a(st), t, ftz=ftz)).astype(dt, copy=False), m))
    if name == "copysign":
        fn = sem("float_misc").copysign
        a, b = srcs
        return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), t)).astype(dt, copy=False), m))
    if name in ("div", "rcp", "sqrt"):
        fn = getattr(sem("floating"), name)
        rnd = "approx" if ins.has("approx") else "full" if ins.has("full") else _rnd(ctx)
        if name == "div":
            a, b = srcs
            return _op(lambda st, m: d(st, np.asarray(fn(*bc(a(st), b(st)), t, rnd=rnd, ftz=ftz))
                                       .astype(dt, copy=False), m))
        a = srcs[0]
        return _op(lambda st, m: d(st, np.asarray(fn(a(st), t, rnd=rnd, ftz=ftz)).astype(dt, copy=False), m))
    if name in _APPROX:
        mod = _approx_module()
        fn = getattr(mod, name, None)
        if fn is None:
            raise ctx.error(f"{name} is not available in the semantics modules yet")
        a = srcs[0]
        return _op(lambda st, m: d(st, np.asarray(fn(a(st), t, ftz=ftz)).astype(dt, copy=False), m))
    raise ctx.error(f"{name}.{t} is not supported")


def _approx_module():
    return sem("approx")


def compare_fn(ctx: Ctx, cmp: str, ty: str) -> Callable[[Value, Value], Value]:
    ftz = ctx.ins.has("ftz")
    if ty in (".f32", ".f64") and not ftz:
        fdt = _F[bits_of_type(ty)]
        base = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}
        if cmp in ("eq", "lt", "le", "gt", "ge"):
            f = base[cmp]
            return lambda x, y: f(np.asarray(x).view(fdt), np.asarray(y).view(fdt))
    c = sem("compare")
    t = ty[1:]
    return lambda x, y: c.compare(x, y, cmp, t, ftz=ftz)


def build_testp(ctx: Ctx) -> Op:
    ins = ctx.ins
    ty = _ty(ctx)
    op = next(s for s in ins.suffixes if s in TESTP_CLASSES)
    d, a = ctx.write(ins.operands[0], ".pred"), ctx.read(ins.operands[1], ty)
    fn = sem("float_misc").testp
    return _op(lambda st, m: d(st, np.asarray(fn(a(st), op, ty[1:])).astype(bool), m))


# ---------------------------------------------------------------------------- cvt


def build_cvt(ctx: Ctx) -> Op:
    ins = ctx.ins
    ts = ins.types
    if len(ts) < 2:
        raise ctx.error("cvt needs a destination and a source type")
    dty, sty = ts[0], ts[1]
    rnd = next((s for s in ins.suffixes if s in ROUNDINGS or s in IROUND), None)
    ftz, sat, relu = ins.has("ftz"), ins.has("sat"), ins.has("relu")
    satfinite = ins.has("satfinite")
    ops = ins.operands
    d = ctx.write(ops[0], dty)
    srcs = [ctx.read(o, sty) for o in ops[1:]]
    a = srcs[0]
    if ins.has("pack"):
        pack = sem("convert").cvt_pack
        cty = ts[0]
        b = srcs[1]
        c = srcs[2] if len(srcs) > 2 else None
        d = ctx.write(ops[0], ".b32")  # the packed result fills a 32-bit register, whatever convertType is
        return _op(lambda st, m: d(st, np.asarray(pack(a(st), b(st), cty[1:], None if c is None else c(st)))
                                   .astype(np.uint32), m))
    fast = None if ctx.reference else _fast_cvt(dty, sty, rnd, ftz, sat or satfinite or relu)
    if fast is not None:
        return _op(lambda st, m: d(st, fast(a(st)), m))
    conv = sem("convert").cvt
    dt = _U[bits_of_type(dty)]
    kw = dict(dst=dty, src=sty, rnd=rnd, sat=sat, relu=relu, ftz=ftz, satfinite=satfinite)
    if len(srcs) >= 2:  # packed forms: cvt.rn.f16x2.f32 d, a, b (and rbits for .rs)
        b = srcs[1]
        if len(srcs) == 3:
            rb = srcs[2]
            return _op(lambda st, m: d(st, np.asarray(_conv2(conv, a(st), b(st), rb(st), kw))
                                       .astype(dt, copy=False), m))
        return _op(lambda st, m: d(st, np.asarray(_conv2(conv, a(st), b(st), None, kw)).astype(dt, copy=False), m))
    return _op(lambda st, m: d(st, np.asarray(conv(a(st), **kw)).astype(dt, copy=False), m))


def _conv2(conv, a, b, rb, kw):
    """A two-source (packed) cvt with its sources broadcast to one shape."""
    if rb is None:
        a, b = bc(a, b)
        return conv(a, b=b, **kw)
    a, b, rb = bc(a, b, rb)
    return conv(a, b=b, rbits=rb, **kw)


# cvt's roundings to an integer as numpy functions, keyed by the table's values (tests/emu/test_emu_registry.py)
IROUND_NUMPY = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_INTS = {".u8", ".u16", ".u32", ".u64", ".s8", ".s16", ".s32", ".s64", ".b8", ".b16", ".b32", ".b64"}


def _fast_cvt(dty, sty, rnd, ftz, sat):
    """Exact numpy conversions for the common forms; None when semantics must decide."""
    if ftz or sat:
        return None
    db, sb = bits_of_type(dty), bits_of_type(sty)
    if dty in _INTS and sty in _INTS and rnd is None:
        signed = is_signed(sty)
        ddt, sdt = _U[db], _U[sb]
        if db <= sb or not signed:
            return lambda v: np.asarray(v).astype(sdt, copy=False).astype(ddt)
        ss, ds = _S[sb], _S[db]
        return lambda v: np.asarray(v).astype(sdt, copy=False).view(ss).astype(ds).view(ddt)
    if dty == ".f32" and sty in _INTS and sb <= 32 and rnd in ("rn", None):
        src = _S[sb] if is_signed(sty) else _U[sb]
        return lambda v: np.asarray(np.asarray(v).view(src).astype(np.float32)).view(np.uint32)
    if dty == ".f64" and sty in _INTS and sb <= 32:
        src = _S[sb] if is_signed(sty) else _U[sb]
        return lambda v: np.asarray(np.asarray(v).view(src).astype(np.float64)).view(np.uint64)
    if dty == ".f64" and sty == ".f32":
        return lambda v: np.asarray(np.asarray(v).view(np.float32).astype(np.float64)).view(np.uint64)
    if dty == ".f32" and sty == ".f64" and rnd == "rn":
        def f(v):
            r = np.asarray(v).view(np.float64).astype(np.float32)
            return _finish(r, 32)
        return f
    if dty in _INTS and sty == ".f32" and rnd in IROUND:  # (NaN from .f64 gives MININT: semantics)
        fdt = _F[sb]
        op = IROUND_NUMPY[rnd]
        signed = is_signed(dty)
        lo = -(2 ** (db - 1)) if signed else 0
        hi = 2 ** (db - 1) - 1 if signed else 2 ** db - 1
        if db == 64:
            return None  # saturation at 2**63 is not exact in float64: leave to semantics

        def fi(v):
            x = op(np.asarray(v).view(fdt).astype(np.float64))
            x = np.where(np.isnan(x), 0.0, np.clip(x, lo, hi))
            r = x.astype(np.int64)
            return r.astype(_S[db] if signed else _U[db]).view(_U[db])
        return fi
    return None


BUILDERS = {
    "fma": build_fma, "testp": build_testp, "cvt": build_cvt,
    "rcp": lambda ctx: build_named(ctx, "rcp"), "sqrt": lambda ctx: build_named(ctx, "sqrt"),
    "rsqrt": lambda ctx: build_named(ctx, "rsqrt"), "ex2": lambda ctx: build_named(ctx, "ex2"),
    "lg2": lambda ctx: build_named(ctx, "lg2"), "sin": lambda ctx: build_named(ctx, "sin"),
    "cos": lambda ctx: build_named(ctx, "cos"), "tanh": lambda ctx: build_named(ctx, "tanh"),
    "copysign": lambda ctx: build_named(ctx, "copysign"),
}
