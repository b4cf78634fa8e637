"""DeepSeek's FP8 1x128 activation quantization: x (bf16, [M, K]) -> y (E4M3, [M, K]) plus one f32 scale
per row and 128-column group, scale = amax / 448, y = x / scale (saturated to +-448, RNE).

One warp per group: each lane loads 4 bf16 values (8 bytes), the warp reduces |x| with butterfly
shuffles, and each lane stores its 4 E4M3 bytes as one 32-bit word. With `pow2_scale=True` the scale
is rounded up to a power of two (as DeepSeek-V3's UE8M0 scale format), so y = x * 2^-e exactly.
"""

from ptxforge.dsl import (
    abs_,
    and_,
    bf16,
    bitcast,
    ctaid,
    cvt,
    cvt_pack,
    div,
    e4m3,
    f32,
    if_,
    kernel,
    ld,
    mad,
    max_,
    ntid,
    pack,
    ptr,
    shfl_xor,
    st,
    tid,
    u32,
    unpack,
)

ARCHS = ("sm_89", "sm_90a")
GROUP = 128
FP8_MAX = 448.0
AMAX_MIN = 1e-4  # DeepGEMM's clamp: an all-zero group gets a tiny scale instead of 0


@kernel(arch="sm_90a")
def act_quant(x: ptr(bf16, align=8), y: ptr(e4m3, align=4), scales: ptr(f32), groups: u32, pow2_scale=False):
    g = mad(ctaid.x, ntid.x >> 5, tid.x >> 5)  # group index over all rows: row * (K / 128) + group
    lane = tid.x & 31
    with if_(g < groups):
        first = mad(g, GROUP, lane << 2)  # this lane's first element
        w0, w1 = ld(x[first].cast(u32), v=2)  # 4 bf16 values in two 32-bit words
        h = unpack(w0, type=bf16) + unpack(w1, type=bf16)
        v = [cvt(hv, f32) for hv in h]
        amax = max_(max_(abs_(v[0]), abs_(v[1])), max_(abs_(v[2]), abs_(v[3])))
        for mask in (16, 8, 4, 2, 1):
            max_(amax, shfl_xor(amax, mask), out=amax)
        max_(amax, AMAX_MIN, out=amax)
        scale = div(amax, FP8_MAX)
        if pow2_scale:  # round the scale up to a power of two: carry a non-zero mantissa into the exponent
            scale = bitcast(and_(bitcast(scale, u32) + 0x7FFFFF, 0x7F800000), f32)
        q = [div(vi, scale) for vi in v]
        lo, hi = cvt_pack(q[0], q[1], "e4m3x2"), cvt_pack(q[2], q[3], "e4m3x2")
        st(y[first].cast(u32), pack(lo, hi).view(u32))
        with if_(lane == 0):
            st(scales[g], scale)


act_quant_pow2 = act_quant.specialize(pow2_scale=True)


def reference(x, pow2_scale=False):
    """numpy: (y as uint8 E4M3 bytes, scales) for x of shape [M, K] (K a multiple of 128)."""
    import ml_dtypes
    import numpy as np

    xf = x.astype(np.float32).reshape(x.shape[0], -1, GROUP)
    amax = np.maximum(np.abs(xf).max(-1), np.float32(AMAX_MIN)).astype(np.float32)
    scale = (amax / np.float32(FP8_MAX)).astype(np.float32)
    if pow2_scale:
        scale = np.exp2(np.ceil(np.log2(scale))).astype(np.float32)
    q = np.clip(xf / scale[..., None], -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q.reshape(x.shape).view(np.uint8), scale


if __name__ == "__main__":
    import ml_dtypes
    import numpy as np

    M, K = 4, 512
    x = (np.random.randn(M, K) * 3).astype(ml_dtypes.bfloat16)
    y, s = np.zeros((M, K), ml_dtypes.float8_e4m3fn), np.zeros((M, K // GROUP), np.float32)
    groups = M * K // GROUP
    act_quant.launch(grid=((groups + 3) // 4,), block=(128,), args=[x, y, s, np.uint32(groups)], device="emu")
    ry, rs = reference(x)
    print("scales equal:", np.array_equal(s, rs), " bytes equal:", np.array_equal(y.view(np.uint8), ry))
