"""ex2 / lg2 / sin / cos / tanh .approx on the native tier, bit for bit as the interpreter (`semantics.approx`).

.f32 (ex2, lg2, sin, cos; .ftz too): the interpreter evaluates numpy's float64 function of the input and rounds
once to f32. numpy's float64 exp2, log2, sin and cos are the C library's on the machines this was measured on
(x86-64 glibc, numpy 2.4, no AVX-512): the native tier calls the same C functions (LLVM's llvm.exp2 / log2 /
sin / cos on float64 become calls to them) and rounds the same way. Where numpy's function and the C library's
disagree on a probe set of inputs (another numpy build, another C library), the instruction stays on the
interpreter (NotNative says so). numpy's float64 tanh is its own SIMD code, not the C library's: tanh.approx.f32
stays on the interpreter.
.f16 / .bf16 / .f16x2 / .bf16x2 (ex2, tanh): a 65536-entry table of the interpreter's own results.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I16, I32, NotNative, V, read, write
from ptxforge.emu.semantics import approx

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

LIBM = {"ex2": "exp2", "lg2": "log2", "sin": "sin", "cos": "cos"}  # PTX op -> the C (and LLVM) function
NUMPY = {"ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos}
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
    elif ty == ".f32" and op in LIBM:
        if not numpy_is_libm(op):
            raise NotNative(f"{ins.mnemonic}: numpy's float64 {LIBM[op]} (the interpreter's) is not the C "
                            "library's on this machine")
        _f32(ins, env, op, ftz)
    else:
        raise NotNative(f"{ins.mnemonic}: the interpreter evaluates it with numpy's float64 {op}, which the "
                        "native tier cannot reproduce bit for bit")


def _flush32(b: L.IRBuilder, x: L.Value) -> L.Value:
    return R.ftz32(b, x)


def _f32(ins: ir.Instruction, env: WarpEnv, op: str, ftz: bool) -> None:
    """approx._f32: the (flushed) input to float64, the C function, rounded to nearest f32, NaN canonical,
    the result flushed."""
    b = env.b
    x = read(env, ins.operands[1], ".f32")
    if ftz:
        x = _flush32(b, x)
    f = b.fpext(b.bitcast(x, V(F32)), V(F64))
    fn = env.module_intrinsic(f"llvm.{LIBM[op]}.v32f64", V(F64), [V(F64)])
    r = R.canon32(b, b.bitcast(b.fptrunc(b.call(fn, [f]), V(F32)), V(I32)))
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


def _probe_inputs() -> np.ndarray:
    """f32 inputs (as float64) the check below compares on: edge values, every power of two, random bits."""
    rng = np.random.default_rng(2029)
    bits = np.concatenate([
        np.array([0, 1, 0x007FFFFF, 0x00800000, 0x3F800000, 0x3F800001, 0x3F7FFFFF, 0x7F7FFFFF, 0x42FE0000,
                  0x43000000, 0xC3150000, 0xC3160000, 0x40490FDB, 0x3FC90FDB, 0x4B800000, 0x7F800000],
                 np.uint32),
        (np.arange(1, 255, dtype=np.uint32) << 23),
        rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)])
    bits = np.concatenate([bits, bits | np.uint32(1 << 31)])
    with np.errstate(invalid="ignore"):  # (signaling NaN bits among the random ones)
        x = bits.view(np.float32).astype(np.float64)
    return x[np.isfinite(x)]


@functools.cache
def numpy_is_libm(op: str) -> bool:
    """numpy's float64 function for `op` gives the C library's bits on the probe inputs."""
    name = ctypes.util.find_library("m")
    if name is None:
        return False
    fn = getattr(ctypes.CDLL(name), LIBM[op])
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    x = _probe_inputs()
    with np.errstate(all="ignore"):
        want = NUMPY[op](x)
    got = np.array([fn(float(v)) for v in x])
    same = (want.view(np.uint64) == got.view(np.uint64)) | (np.isnan(want) & np.isnan(got))
    return bool(same.all())
