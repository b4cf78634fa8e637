"""ex2 / lg2 / sin / cos / tanh .approx on the native tier, bit for bit as the interpreter (`semantics.approx`).

.f32 (.ftz too): the interpreter evaluates the C library's float64 function of the input (`approx.c_library`)
and rounds once to f32; the native tier calls the same C functions (LLVM's llvm.sin / cos / tanh on float64
become calls to them) and rounds the same way; ex2 and lg2 are vector code that rounds as the C library's exp2
and log2 do, calling them only where that is not certain (lower_libm.py).
.f16 / .bf16 / .f16x2 / .bf16x2 (ex2, tanh): a 65536-entry table of the interpreter's own results.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I16, I32, NotNative, V, read, write
from ptxforge.emu.native.lower_libm import libm_f32
from ptxforge.emu.semantics import approx

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

HALVES = {".f16": "f16", ".bf16": "bf16", ".f16x2": "f16", ".bf16x2": "bf16"}


def transcendental(ins: ir.Instruction, env: WarpEnv) -> None:
    """ex2, lg2, sin, cos, tanh .approx{.ftz} (see the module docstring)."""
    op = ins.opcode
    ty = ins.types[-1] if ins.types else ""
    mods = [m[1:] for m in ins.modifiers]
    if any(m not in ("approx", "ftz") for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    ftz = "ftz" in mods
    if ty in HALVES and op in ("ex2", "tanh"):
        _half(ins, env, op, ty, ftz)
    elif ty == ".f32" and op in approx.LIBM:
        _f32(ins, env, op, ftz)
    else:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")


def _flush32(b: L.IRBuilder, x: L.Value) -> L.Value:
    return R.ftz32(b, x)


def _f32(ins: ir.Instruction, env: WarpEnv, op: str, ftz: bool) -> None:
    """approx._f32: the (flushed) input to float64, the C library's function, rounded to nearest f32, NaN canonical,
    the result flushed."""
    b = env.b
    x = read(env, ins.operands[1], ".f32")
    if ftz:
        x = _flush32(b, x)
    if op in ("ex2", "lg2"):
        y = libm_f32(env, approx.LIBM[op], b.bitcast(x, V(F32)))
    else:
        fn = env.module_intrinsic(f"llvm.{approx.LIBM[op]}.v32f64", V(F64), [V(F64)])
        y = b.fptrunc(b.call(fn, [b.fpext(b.bitcast(x, V(F32)), V(F64))]), V(F32))
    r = R.canon32(b, b.bitcast(y, V(I32)))
    write(env, ins.operands[0], _flush32(b, r) if ftz else r)


def _half(ins: ir.Instruction, env: WarpEnv, op: str, ty: str, ftz: bool) -> None:
    """A table of approx.approx over every 16-bit input, looked up per half."""
    table = _table(op, HALVES[ty], ftz)
    key = f"approx_{op}_{HALVES[ty]}_{int(ftz)}"
    b = env.b
    if ty.endswith("x2"):
        x = read(env, ins.operands[1], ".b32")
        lo = R.table_lookup(env, key, table, b.trunc(x, V(I16)))
        hi = R.table_lookup(env, key, table, b.trunc(b.lshr(x, R.c(I32, 16)), V(I16)))
        write(env, ins.operands[0], b.or_(b.zext(lo, V(I32)), b.shl(b.zext(hi, V(I32)), R.c(I32, 16))))
        return
    x = read(env, ins.operands[1], ".b16")
    write(env, ins.operands[0], R.table_lookup(env, key, table, x))


@functools.cache
def _table(op: str, ty: str, ftz: bool) -> np.ndarray:
    return np.asarray(approx.approx(op, np.arange(1 << 16, dtype=np.uint16), ty, ftz), np.uint16)
