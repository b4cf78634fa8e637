"""Vector add in the DSL: c[i] = a[i] + b[i] for i < n (one thread per element)."""

from ptxforge.dsl import ctaid, f32, if_, kernel, ld, mad, ntid, ptr, st, tid, u32

ARCHS = ("sm_80", "sm_90a")


@kernel(arch="sm_80")
def vadd(a: ptr(f32), b: ptr(f32), c: ptr(f32), n: u32):
    i = mad(ctaid.x, ntid.x, tid.x)
    with if_(i < n):
        st(c[i], ld(a[i]) + ld(b[i]))


if __name__ == "__main__":
    import numpy as np

    n = 1000
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    vadd.launch(grid=((n + 255) // 256,), block=(256,), args=[a, b, c, np.uint32(n)], device="emu")
    print(vadd.ptx())
    print("max error:", np.abs(c - (a + b)).max())
