"""mma.sync on the native tier: m16n8k16 and m16n8k8 with .f16/.bf16 inputs and .f32 accumulators, bit for
bit as `semantics.mma.mma_sync` (its fitted tensor-core summation, `dot_tensor_core`).

The warp's fragments are decoded exactly to float64 and scattered into the full A, B and C matrices on the
stack (the lane and slot of each element from `semantics.mma.fragment_coords`); each D slot then gathers, for
its 32 lanes, the row of A and the column of B it needs and sums them as the tensor cores do: the products
are exact; with the accumulator they are aligned to the largest exponent (a product's is the sum of its
factors' exponents, each at least -126), truncated to multiples of 2**(largest - 25), summed exactly and
rounded toward zero to f32. An element with an infinite or NaN input takes IEEE's float64 sum instead
(`_dot_rn`: its result is an infinity or a NaN whatever the order). Other shapes and types: NotNative.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I1, I16, I32, I64, NotNative, V, counted_loop, read, write
from ptxforge.emu.native.lower_half import decode
from ptxforge.emu.native.warp import splat
from ptxforge.emu.semantics import formats
from ptxforge.emu.semantics import mma as S

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

SHAPES = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}
INPUTS = {".f16": formats.F16, ".bf16": formats.BF16}


def mma_sync(ins: ir.Instruction, env: WarpEnv) -> None:
    """mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c."""
    shape = next((s for s in ins.suffixes if s in SHAPES), None)
    ts = ins.types
    if shape is None or not ins.has("sync", "row", "col") or len(ts) != 4 or ts[0] != ".f32" or ts[3] != ".f32" \
            or ts[1] != ts[2] or ts[1] not in INPUTS or ins.has("satfinite") or ins.guard is not None:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    m, n, k = SHAPES[shape]
    fmt = INPUTS[ts[1]]
    b = env.b
    d_op, a_op, b_op, c_op = ins.operands[:4]
    amat = _matrix(env, a_op, shape, "a", ts[1], m, k, fmt)
    bmat = _matrix(env, b_op, shape, "b", ts[2], k, n, fmt)
    cmat = _matrix(env, c_op, shape, "c", ".f32", m, n, None)
    dmat = b.ptrtoint(_alloca(env, m * n), I64)
    # D = A @ B + C, 32 elements (a quarter of D) per pass of a loop, k products per element in inner loops
    state = {name: _alloca(env, 32) for name in ("top", "fin", "total", "ieee", "scale")}

    def vec(name: str, t: L.Type) -> L.Value:
        return b.bitcast(state[name], V(t).as_pointer())

    def chunk(it: L.Value) -> None:
        idx = b.add(splat(b, b.mul(it, L.Constant(I64, 32))), L.Constant(V(I64), list(range(32))))
        row, col = b.udiv(idx, R.c(I64, n)), b.urem(idx, R.c(I64, n))
        c = _gather_at(env, cmat, idx)
        b.store(_exponent(b, c), vec("top", I64))
        b.store(b.zext(_finite(b, c), V(I64)), vec("fin", I64))

        def pass1(kk: L.Value) -> None:
            x, y = _operands(env, amat, bmat, row, col, kk, n, k)
            fin = b.and_(b.load(vec("fin", I64)), b.zext(b.and_(_finite(b, x), _finite(b, y)), V(I64)))
            b.store(fin, vec("fin", I64))
            s = b.add(_exponent(b, x), _exponent(b, y))
            top = b.load(vec("top", I64))
            b.store(b.select(b.icmp_signed(">", s, top), s, top), vec("top", I64))
        counted_loop(env.b, env.gen.fn, k, pass1, f"pc{env.pc}_mma")
        top = b.load(vec("top", I64))
        # scale = 2**(25 - top) (1 when every term is zero), built from its exponent bits
        sc = b.select(b.icmp_signed("<", top, R.c(I64, -10000)), R.c(I64, 0), b.sub(R.c(I64, S.TC_BITS), top))
        scale = b.bitcast(b.shl(b.add(sc, R.c(I64, 1023)), R.c(I64, 52)), V(F64))
        x0, y0 = _operands(env, amat, bmat, row, col, L.Constant(I64, 0), n, k)
        p0 = b.fmul(x0, y0)
        b.store(_trunc(env, b.fmul(p0, scale)), vec("total", F64))  # (from the first term: a sum of zeros
        b.store(b.fadd(c, p0), vec("ieee", F64))  # keeps -0 only when every term is -0, as numpy's sum)

        def pass2(kk1: L.Value) -> None:
            kk = b.add(kk1, L.Constant(I64, 1))
            x, y = _operands(env, amat, bmat, row, col, kk, n, k)
            p = b.fmul(x, y)
            b.store(b.fadd(b.load(vec("total", F64)), _trunc(env, b.fmul(p, scale))), vec("total", F64))
            b.store(b.fadd(b.load(vec("ieee", F64)), p), vec("ieee", F64))
        counted_loop(env.b, env.gen.fn, k - 1, pass2, f"pc{env.pc}_mma")
        total = b.fadd(b.load(vec("total", F64)), _trunc(env, b.fmul(c, scale)))
        model = R.canon32(b, R.f64_to_f32(b, b.fdiv(total, scale), "rz"))
        exact = R.canon32(b, b.bitcast(b.fptrunc(b.load(vec("ieee", F64)), V(F32)), V(I32)))
        fin = b.icmp_unsigned("!=", b.load(vec("fin", I64)), R.c(I64, 0))
        dp = b.inttoptr(b.add(dmat, b.mul(it, L.Constant(I64, 32 * 8))), V(I64).as_pointer())
        b.store(b.zext(b.select(fin, model, exact), V(I64)), dp)
    counted_loop(env.b, env.gen.fn, m * n // 32, chunk, f"pc{env.pc}_mma")
    rows, cols = S.fragment_coords(shape, "d", "f32")
    for slot, reg in enumerate(_elements(d_op)):
        got = _gather_at(env, dmat, L.Constant(V(I64), [int(t) for t in rows[:, slot] * n + cols[:, slot]]))
        write(env, reg, b.trunc(b.bitcast(got, V(I64)), V(I32)))


def _operands(env: WarpEnv, amat: L.Value, bmat: L.Value, row: L.Value, col: L.Value, kk: L.Value, n: int,
              k: int) -> tuple[L.Value, L.Value]:
    """A[row, kk] and B[kk, col] per lane."""
    b = env.b
    kv = splat(b, kk)
    x = _gather_at(env, amat, b.add(b.mul(row, R.c(I64, k)), kv))
    y = _gather_at(env, bmat, b.add(b.mul(kv, R.c(I64, n)), col))
    return x, y


def _gather_at(env: WarpEnv, base: L.Value, idx: L.Value) -> L.Value:
    """base[idx] per lane (float64 elements; `base` an address)."""
    b = env.b
    ptrs = b.inttoptr(b.add(splat(b, base), b.mul(idx, R.c(I64, 8))), V(F64.as_pointer()))
    gather = env.module_intrinsic("llvm.masked.gather.v32f64.v32p0", V(F64),
                                  [V(F64.as_pointer()), I32, V(I1), V(F64)])
    return b.call(gather, [ptrs, L.Constant(I32, 8), R.c(I1, 1), L.Constant(V(F64), 0.0)])


def _elements(o: object) -> list:
    return list(getattr(o, "elements", [o]))


def _matrix(env: WarpEnv, o: object, shape: str, operand: str, ty: str, rows_n: int, cols_n: int,
            fmt: formats.FloatFormat | None) -> L.Value:
    """A stack array of float64 [rows_n * cols_n]: operand `o`'s fragments decoded and put in place."""
    b = env.b
    rows, cols = S.fragment_coords(shape, operand, ty)
    per = 2 if fmt is not None else 1
    arr = _alloca(env, rows_n * cols_n)
    base = b.ptrtoint(arr, I64)
    scatter = env.module_intrinsic("llvm.masked.scatter.v32f64.v32p0", L.VoidType(),
                                   [V(F64), V(F64.as_pointer()), I32, V(I1)])
    for j, reg in enumerate(_elements(o)):
        x = read(env, reg, ".b32")
        for h in range(per):
            slot = j * per + h
            if fmt is not None:
                half = b.trunc(b.lshr(x, R.c(I32, 16 * h)), V(I16))
                v = decode(b, half, fmt)
            else:
                v = b.fpext(b.bitcast(x, V(F32)), V(F64))
            off = (rows[:, slot] * cols_n + cols[:, slot]).astype(np.int64) * 8
            ptrs = b.inttoptr(b.add(splat(b, base), L.Constant(V(I64), [int(t) for t in off])),
                              V(F64.as_pointer()))
            b.call(scatter, [v, ptrs, L.Constant(I32, 8), R.c(I1, 1)])
    return base


def _alloca(env: WarpEnv, n: int) -> L.Value:
    """A float64 array in the function's entry block (one per mma, reused by every warp and pass)."""
    gen = env.gen
    b = env.b
    here = b.block
    entry = gen.fn.entry_basic_block
    b.position_at_start(entry)
    arr = b.alloca(L.ArrayType(F64, n))
    arr.align = 64
    b.position_at_end(here)
    return arr


def _exponent(b: L.IRBuilder, x: L.Value) -> L.Value:
    """mma._exponent16 of float64 `x` as <32 x i64>: floor(log2|x|), at least -126; zero -> -16000."""
    bits = b.bitcast(x, V(I64))
    e = b.sub(b.and_(b.lshr(bits, R.c(I64, 52)), R.c(I64, 0x7FF)), R.c(I64, 1023))
    e = b.select(b.icmp_signed("<", e, R.c(I64, -126)), R.c(I64, -126), e)
    zero = b.fcmp_ordered("==", x, L.Constant(V(F64), 0.0))
    return b.select(zero, R.c(I64, -16000), e)


def _finite(b: L.IRBuilder, x: L.Value) -> L.Value:
    return b.fcmp_ordered("<", R._fabs(b, x), L.Constant(V(F64), float("inf")))


def _trunc(env: WarpEnv, x: L.Value) -> L.Value:
    """np.trunc: toward zero to an integral value (the sign of a zero kept)."""
    return env.b.call(env.module_intrinsic("llvm.trunc.v32f64", V(F64), [V(F64)]), [x])
