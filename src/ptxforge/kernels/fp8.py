# mypy: disable-error-code="valid-type"
# (kernel parameters are annotated with PTX types, `u32` and `ptr(f32)`: DSL values, not Python types)
"""FP8 (E4M3) quantization kernels in DeepSeek's formats, with their numpy references.

- `per_token_quant`: activations, one scale per row and 128 columns ("1x128"). amax = max |x| over the
  group, clamped below at 1e-4; sf = amax / 448 (FP32) or, with `round_scale`, sf rounded up to a power of
  two (`ceil_to_ue8m0`: the exponent byte plus one when the mantissa is non-zero, kept in [1, 254]);
  q = e4m3(x * (1 / sf)), round-to-nearest-even, saturating. This is DeepGEMM's `per_token_cast_to_fp8`
  formula (DeepEP's test helper multiplies by 448 / amax instead, which can differ in the last bit).
  With `round_scale` the kernel also writes each scale's UE8M0 byte; four consecutive bytes of a row read
  as one little-endian int32 are DeepGEMM's packed scale format.
- `dequant`: bf16(f32(q) * sf), from FP32 scales or UE8M0 bytes (DeepEP's `per_token_cast_back`).
- `block_quant`: weights, one scale per 128x128 block, the same formula.

One warp per 128-element group (each lane 4 values, amax by butterfly shuffles) for the per-token kernels;
one 128-thread block per 128x128 tile (each thread one row, amax through shared memory) for blocks.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

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
    e4m3x2,
    f16,
    f16x2,
    f32,
    if_,
    kernel,
    ld,
    mad,
    max_,
    min_,
    mul,
    ntid,
    pack,
    ptr,
    range_,
    rcp,
    reg,
    shared,
    shfl_xor,
    st,
    syncthreads,
    tid,
    u8,
    u32,
    unpack,
)

GROUP = 128
FP8_MAX = 448.0
AMAX_MIN = 1e-4
UE8M0_MIN, UE8M0_MAX = 1, 254  # exponent bytes a scale may take (2^-126 .. 2^127)


def _warp_amax(v):
    amax = max_(max_(abs_(v[0]), abs_(v[1])), max_(abs_(v[2]), abs_(v[3])))
    for mask in (16, 8, 4, 2, 1):
        max_(amax, shfl_xor(amax, mask), out=amax)
    return amax


def _scale_of(amax, round_scale: bool):
    """(sf, exponent-bits register or None) from a group's amax, as DeepGEMM computes it."""
    max_(amax, AMAX_MIN, out=amax)
    sf = div(amax, FP8_MAX)
    if not round_scale:
        return sf, None
    bits = and_(bitcast(sf, u32) + 0x7FFFFF, 0x7F800000)  # a non-zero mantissa carries into the exponent
    bits = max_(min_(bits, UE8M0_MAX << 23), UE8M0_MIN << 23)
    return bitcast(bits, f32), bits


def _quant4(v, inv):
    q = [mul(vi, inv) for vi in v]
    return pack(cvt_pack(q[0], q[1], "e4m3x2"), cvt_pack(q[2], q[3], "e4m3x2")).view(u32)


@kernel(arch="sm_90a")
def per_token_quant(x: ptr(bf16, align=8), y: ptr(e4m3, align=4), scales: ptr(f32), ue8m0: ptr(u8), groups: u32,
                    round_scale: bool = False) -> None:
    g = mad(ctaid.x, ntid.x >> 5, tid.x >> 5)  # group index: row * (H / 128) + column group
    lane = tid.x & 31
    with if_(g < groups):
        first = mad(g, GROUP, lane << 2)
        w0, w1 = ld(x[first].cast(u32), v=2)
        v = [cvt(h, f32) for h in unpack(w0, type=bf16) + unpack(w1, type=bf16)]
        sf, bits = _scale_of(_warp_amax(v), round_scale)
        st(y[first].cast(u32), _quant4(v, rcp(sf)))
        with if_(lane == 0):
            st(scales[g], sf)
            if round_scale:
                st(ue8m0[g], cvt(bits >> 23, u8))


per_token_quant_pow2 = per_token_quant.specialize(round_scale=True)


@kernel(arch="sm_90a")
def dequant(q: ptr(e4m3, align=4), scales: ptr(f32), ue8m0: ptr(u8), out: ptr(bf16, align=8), groups: u32,
            from_ue8m0: bool = False) -> None:
    g = mad(ctaid.x, ntid.x >> 5, tid.x >> 5)
    lane = tid.x & 31
    with if_(g < groups):
        first = mad(g, GROUP, lane << 2)
        if from_ue8m0:
            sf = bitcast(cvt(ld(ue8m0[g]), u32) << 23, f32)
        else:
            sf = ld(scales[g])
        w = ld(q[first].cast(u32))
        v = []
        for pair in unpack(w, type=e4m3x2):
            for h in unpack(cvt(pair, f16x2).view(u32), type=f16):
                v.append(mul(cvt(h, f32), sf))
        lo = pack(cvt(v[0], bf16), cvt(v[1], bf16)).view(u32)
        hi = pack(cvt(v[2], bf16), cvt(v[3], bf16)).view(u32)
        st(out[first].cast(u32), (lo, hi))


dequant_ue8m0 = dequant.specialize(from_ue8m0=True)


@kernel(arch="sm_90a")
def block_quant(x: ptr(bf16, align=8), y: ptr(e4m3, align=4), scales: ptr(f32), cols: u32,
                round_scale: bool = False) -> None:
    """One 128x128 tile per block (grid = (cols / 128, rows / 128)), thread t owns the tile's row t."""
    t = tid.x
    row = mad(ctaid.y, GROUP, t)
    first = mad(row, cols, ctaid.x * GROUP)
    amax = reg.f32(0.0)
    for c in range_(0, GROUP, 4):
        w0, w1 = ld(x[first + c].cast(u32), v=2)
        v = [cvt(h, f32) for h in unpack(w0, type=bf16) + unpack(w1, type=bf16)]
        max_(amax, max_(max_(abs_(v[0]), abs_(v[1])), max_(abs_(v[2]), abs_(v[3]))), out=amax)
    for mask in (16, 8, 4, 2, 1):
        max_(amax, shfl_xor(amax, mask), out=amax)
    part = shared(f32, (4,), name="warp_amax")
    with if_((t & 31) == 0):
        st(part[t >> 5], amax)
    syncthreads()
    amax = max_(max_(ld(part[0]), ld(part[1])), max_(ld(part[2]), ld(part[3])))
    sf, _ = _scale_of(amax, round_scale)
    inv = rcp(sf)
    for c in range_(0, GROUP, 4):
        w0, w1 = ld(x[first + c].cast(u32), v=2)
        v = [cvt(h, f32) for h in unpack(w0, type=bf16) + unpack(w1, type=bf16)]
        st(y[first + c].cast(u32), _quant4(v, inv))
    with if_(t == 0):
        st(scales[mad(ctaid.y, cols >> 7, ctaid.x)], sf)


block_quant_pow2 = block_quant.specialize(round_scale=True)


# --------------------------------------------------------------------------- numpy references

def ceil_to_ue8m0_bits(sf: np.ndarray) -> np.ndarray:
    """The UE8M0 exponent byte of each positive f32 scale rounded up to a power of two."""
    bits = np.asarray(sf, np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int64) + ((bits & 0x7FFFFF) != 0)
    return np.clip(exp, UE8M0_MIN, UE8M0_MAX).astype(np.uint8)


def ue8m0_to_f32(e: np.ndarray) -> np.ndarray:
    """2^(e - 127) as f32 for UE8M0 exponent bytes."""
    return (np.asarray(e, np.uint8).astype(np.uint32) << 23).view(np.float32)


def pack_ue8m0(e: np.ndarray) -> np.ndarray:
    """DeepGEMM's packing: 4 consecutive exponent bytes of a row as one little-endian int32."""
    e = np.ascontiguousarray(e, np.uint8)
    if e.shape[-1] % 4:
        raise ValueError(f"pack_ue8m0: the last dimension ({e.shape[-1]}) must be a multiple of 4")
    return e.view("<i4")


def unpack_ue8m0(packed: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(packed, "<i4").view(np.uint8)


def _scale_ref(amax: np.ndarray, round_scale: bool):
    amax = np.maximum(amax.astype(np.float32), np.float32(AMAX_MIN))
    sf = (amax / np.float32(FP8_MAX)).astype(np.float32)
    if round_scale:
        e = ceil_to_ue8m0_bits(sf)
        return ue8m0_to_f32(e), e
    return sf, None


def _e4m3(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def per_token_quant_ref(x: np.ndarray, round_scale: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(q as E4M3 bytes [T, H], f32 scales [T, H/128], UE8M0 bytes [T, H/128] or None); H % 128 == 0."""
    xf = np.asarray(x).astype(np.float32).reshape(x.shape[0], -1, GROUP)
    sf, e = _scale_ref(np.abs(xf).max(-1), round_scale)
    inv = (np.float32(1) / sf).astype(np.float32)
    q = _e4m3((xf * inv[..., None]).astype(np.float32))
    return q.reshape(x.shape), sf, e


def dequant_ref(q: np.ndarray, sf: np.ndarray) -> np.ndarray:
    """bf16(f32(q) * sf) for E4M3 bytes q [T, H] and f32 scales [T, H/128]."""
    qf = np.asarray(q, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(q.shape[0], -1, GROUP)
    with np.errstate(over="ignore"):  # power-of-two scales can exceed f32 at bf16's top, as on a GPU
        back = (qf * sf.astype(np.float32)[..., None]).astype(np.float32)
    return back.astype(ml_dtypes.bfloat16).reshape(q.shape)


def block_quant_ref(w: np.ndarray, round_scale: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(q bytes [M, N], f32 scales [M/128, N/128]) for M, N multiples of 128."""
    m, n = w.shape
    wf = np.asarray(w).astype(np.float32).reshape(m // GROUP, GROUP, n // GROUP, GROUP)
    sf, _ = _scale_ref(np.abs(wf).max(axis=(1, 3)), round_scale)
    inv = (np.float32(1) / sf).astype(np.float32)
    q = _e4m3((wf * inv[:, None, :, None]).astype(np.float32))
    return q.reshape(m, n), sf
