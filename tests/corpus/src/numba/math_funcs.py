"""numba-cuda math library calls (libdevice): exp, log1p, sin, cos, sqrt, atan2, erf, pow, tanh; both the
precise and the fastmath variants; plus integer intrinsics (popc, clz, brev, ffs)."""

import math

from numba import cuda, float32, uint32


def math_mix(x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        a = x[i]
        b = y[i]
        out[i, 0] = math.exp(a) + math.log1p(abs(b))
        out[i, 1] = math.sin(a) * math.cos(b)
        out[i, 2] = math.sqrt(abs(a)) + math.atan2(a, b)
        out[i, 3] = math.erf(a) - math.pow(abs(b), float32(0.75))
        out[i, 4] = math.tanh(a) + math.floor(b) + math.copysign(float32(1.0), a)


def int_intrinsics(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i, 0] = cuda.popc(v)
        out[i, 1] = cuda.clz(v)
        out[i, 2] = cuda.brev(v)
        out[i, 3] = cuda.ffs(v)


_SIG = (float32[:], float32[:], float32[:, ::1])

CORPUS = [
    dict(name="math_mix_f32", fn=math_mix, sig=_SIG),
    dict(name="math_mix_f32_fastmath", fn=math_mix, sig=_SIG, fastmath=True),
    dict(name="int_intrinsics_u32", fn=int_intrinsics, sig=(uint32[:], uint32[:, ::1])),
]
