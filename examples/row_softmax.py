"""Row softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)), one warp per row.

Each lane strides over the row (lane, lane + 32, ...); the row maximum and the sum are reduced across
the warp with butterfly shuffles, so every lane ends up with both. exp(t) is ex2.approx(t * log2(e)).
"""

from ptxforge.dsl import (
    add,
    ctaid,
    div,
    ex2,
    f32,
    if_,
    kernel,
    ld,
    mad,
    max_,
    ntid,
    ptr,
    range_,
    reg,
    shfl_xor,
    st,
    tid,
    u32,
)

ARCHS = ("sm_80", "sm_90a")
LOG2E = 1.4426950408889634


def warp_allreduce(v, combine):
    """combine(v, other lane's v) over the warp; every lane gets the result."""
    for mask in (16, 8, 4, 2, 1):
        combine(v, shfl_xor(v, mask))
    return v


@kernel(arch="sm_80")
def softmax(x: ptr(f32), y: ptr(f32), rows: u32, cols: u32):
    lane = tid.x & 31
    row = mad(ctaid.x, ntid.x >> 5, tid.x >> 5)
    with if_(row < rows):
        base = row * cols
        xr, yr = x + base, y + base  # this row of x and of y
        m = reg.f32(float("-inf"))
        for c in range_(lane, cols, 32):
            max_(m, ld(xr[c]), out=m)
        warp_allreduce(m, lambda a, b: max_(a, b, out=a))
        s = reg.f32(0.0)
        for c in range_(lane, cols, 32):
            e = ex2((ld(xr[c]) - m) * LOG2E)
            st(yr[c], e)
            s += e
        warp_allreduce(s, lambda a, b: add(a, b, out=a))
        for c in range_(lane, cols, 32):
            st(yr[c], div(ld(yr[c]), s))


if __name__ == "__main__":
    import numpy as np

    x = np.random.randn(5, 70).astype(np.float32)
    y = np.zeros_like(x)
    softmax.launch(grid=(2,), block=(128,), args=[x, y, np.uint32(5), np.uint32(70)], device="emu")
    e = np.exp(x - x.max(1, keepdims=True))
    print("max error:", np.abs(y - e / e.sum(1, keepdims=True)).max())
