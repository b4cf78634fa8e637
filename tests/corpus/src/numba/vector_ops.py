"""numba-cuda elementwise kernels: vector add (f32), a clipped saxpy (f64) and a 2D add (i32)."""

from numba import cuda, float32, float64, int32


def vector_add(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


def saxpy_clip(a, x, y, out, lo, hi):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        v = a * x[i] + y[i]
        out[i] = min(max(v, lo), hi)
        i += stride


def add_2d(x, y, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] + y[i, j]


CORPUS = [
    dict(name="vector_add_f32", fn=vector_add, sig=(float32[:], float32[:], float32[:])),
    dict(name="saxpy_clip_f64", fn=saxpy_clip,
         sig=(float64, float64[:], float64[:], float64[:], float64, float64)),
    dict(name="add_2d_i32", fn=add_2d, sig=(int32[:, ::1], int32[:, ::1], int32[:, ::1])),
]
