"""Directed roundings in hardware where the host has them: AVX-512's embedded rounding control.

add/sub/mul/fma .f32 and .f64 in .rz/.rm/.rp are IEEE 754 operations rounded once in the given direction, which
is what an AVX-512 instruction with a static rounding mode ({rz,rd,ru}-sae) computes: one instruction per 16
(f32) or 8 (f64) lanes instead of the exact float64 steps of lower_round.py (two_sum, round to odd, a step by
the error's sign), which stay the portable path (`PORTABLE` forces it; the suite runs both against the
interpreter). MXCSR's flush-to-zero and denormals-are-zero bits are off in a Python process, as every native
float operation here assumes; .ftz flushing is done around the call by the caller, NaNs made canonical after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import jit
from ptxforge.emu.native.lower import F32, F64, I32

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv

PORTABLE = False  # True: always the exact float64 steps (lower_round.py), as on a host without AVX-512
# the instruction's rounding operand: _MM_FROUND_TO_{NEG_INF,POS_INF,ZERO} | _MM_FROUND_NO_EXC
ROUNDING = {"rm": 1 | 8, "rp": 2 | 8, "rz": 3 | 8}
INTRINSIC = {"add": "add", "mul": "mul", "fma": "vfmadd"}


def available() -> bool:
    """Whether this host's code may use embedded rounding (AVX-512F) and `PORTABLE` does not forbid it."""
    return not PORTABLE and jit.host_feature("avx512f")


def rounded(env: WarpEnv, op: str, fs: list[L.Value], rnd: str) -> L.Value | None:
    """`op` ("add", "mul" or "fma") of the warp vectors `fs` (float or double) rounded in `rnd` by AVX-512
    instructions, a register's lanes at a time; None where this host cannot (the caller's portable path)."""
    if not available() or rnd not in ROUNDING:
        return None
    b = env.b
    elem = fs[0].type.element
    lanes = fs[0].type.count
    per = 16 if elem == F32 else 8
    if elem not in (F32, F64) or lanes % per:
        return None
    part = L.VectorType(elem, per)
    fn = env.module_intrinsic(f"llvm.x86.avx512.{INTRINSIC[op]}.{'ps' if elem == F32 else 'pd'}.512", part,
                              [part] * len(fs) + [I32])
    mode = L.Constant(I32, ROUNDING[rnd])
    pieces = []
    for lo in range(0, lanes, per):
        idx = L.Constant(L.VectorType(I32, per), list(range(lo, lo + per)))
        args = [b.shuffle_vector(f, f, idx) for f in fs]
        pieces.append(b.call(fn, [*args, mode]))
    while len(pieces) > 1:  # (pairs joined into vectors twice as long, up to the warp's)
        n = pieces[0].type.count
        both = L.Constant(L.VectorType(I32, 2 * n), list(range(2 * n)))
        pieces = [b.shuffle_vector(pieces[i], pieces[i + 1], both) for i in range(0, len(pieces), 2)]
    return pieces[0]
