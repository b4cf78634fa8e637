"""Fast paths give the exact paths' results: fma.rn.f32 in float64 against the bit-exact semantics (random,
special and double-rounding operands), whole-wave loads and stores at consecutive addresses (ramps) against
the gathering path, including the faults, and shuffles whose offset is uniform over the active lanes only."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import memory, ramps
from ptxforge.emu.errors import MemoryFault
from ptxforge.emu.launch import EmuDevice
from ptxforge.emu.ops_float import fma_rn_f32
from ptxforge.emu.semantics import floating

H = ".version 8.5\n.target sm_90\n.address_size 64\n"
rng = np.random.default_rng(18)


def exact_fma(x, y, z):
    with np.errstate(all="ignore"):
        return np.asarray(floating.fma(*np.broadcast_arrays(x, y, z), "f32", rnd="rn")).astype(np.uint32)


def fast_fma(x, y, z):
    with np.errstate(all="ignore"):
        return np.broadcast_to(fma_rn_f32(x, y, z, floating.fma), np.broadcast_shapes(*map(np.shape, (x, y, z))))


def bits(n):
    return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)


SPECIAL = np.array([
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00800000,  # subnormals
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x3F7FFFFE, 0x33800000, 0x33800001, 0xB3800000,  # near 1, 2^-24
    0x34000000, 0x4B800000, 0x4B000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0x1F800000, 0x5F800000,  # big, tiny
    0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001, 0x40400000, 0x3EAAAAAB, 0x0D800000,  # inf, nan
], np.uint32)


def test_fma_fast_path_matches_the_exact_path_on_random_bits_and_values():
    for _ in range(8):
        x, y, z = bits(1 << 14), bits(1 << 14), bits(1 << 14)
        np.testing.assert_array_equal(fast_fma(x, y, z), exact_fma(x, y, z))
        u = [rng.standard_normal(1 << 14).astype(np.float32).view(np.uint32) for _ in range(3)]
        np.testing.assert_array_equal(fast_fma(*u), exact_fma(*u))
        small = [rng.integers(-64, 64, 1 << 14).astype(np.float32).view(np.uint32) for _ in range(3)]  # exact sums
        np.testing.assert_array_equal(fast_fma(*small), exact_fma(*small))


def test_fma_fast_path_matches_on_every_triple_of_special_values():
    x, y, z = (g.reshape(-1) for g in np.meshgrid(SPECIAL, SPECIAL, SPECIAL, indexing="ij"))
    np.testing.assert_array_equal(fast_fma(x, y, z), exact_fma(x, y, z))


def test_fma_fast_path_avoids_double_rounding():
    # x*y = 2^-24 - 2^-70: x*y + z is just below the midpoint of 1+2^-23 and 1+2^-22, and float64 rounds it onto
    # that midpoint; rounding the float64 sum to float32 would give the even neighbour 0x3F800002
    x, y, z = np.uint32(0x33800001), np.uint32(0x3F7FFFFE), np.uint32(0x3F800001)
    naive = np.float32(np.float64(x.view(np.float32)) * np.float64(y.view(np.float32)) + np.float64(z.view(np.float32)))
    assert naive.view(np.uint32) == 0x3F800002
    lanes = np.full(4096, x)
    assert (fast_fma(lanes, y, z) == 0x3F800001).all()
    assert int(exact_fma(x, y, z)) == 0x3F800001
    # the same near subnormal results: the fast path must not round twice on the coarser grid either
    xs, ys = bits(1 << 14) & np.uint32(0x807FFFFF), bits(1 << 14) | np.uint32(0x3F800000)
    zs = bits(1 << 14) & np.uint32(0x80FFFFFF)
    np.testing.assert_array_equal(fast_fma(xs, ys, zs), exact_fma(xs, ys, zs))


def test_fma_fast_path_with_uniform_operands():
    x = bits(4096)
    for y, z in ((np.uint32(0x3FC00000), bits(4096)), (bits(4096), np.uint32(0x7F800000)),
                 (np.uint32(0x00000001), np.uint32(0x80000000))):
        np.testing.assert_array_equal(fast_fma(x, y, z), exact_fma(x, y, z))
        np.testing.assert_array_equal(fast_fma(y, z, x), exact_fma(y, z, x))


class _State:
    """A stand-in for the lane state: ramps keep their table in the object's __dict__."""


def test_ramp_detection_is_exact():
    st = _State()
    v = (np.arange(4096, dtype=np.uint64) * 4 + np.uint64(0x7F00_0000_0100))
    assert ramps.find(st, v) == (0x7F00_0000_0100, 4)
    assert ramps.find(st, v, 8) is None
    w = v.copy()
    w[[100, 101]] = w[[101, 100]]  # the ends and the step still fit: only the full comparison tells
    assert ramps.find(st, w) is None
    assert ramps.known(st, w) is False
    assert ramps.find(st, v[::-1].copy()) is None  # descending
    assert ramps.find(st, np.arange(4096, dtype=np.int64)) is None  # signed arrays are not addresses
    assert ramps.find(st, np.arange(16, dtype=np.uint32)) is None  # too small to bother
    assert ramps.affine((0, 1), 4, 8, 4096, 64) == (8, 4)
    assert ramps.affine((0, 1), 4, 0, 1 << 31, 32) is None  # would wrap in 32 bits
    assert ramps.affine((100, 4), 1, -200, 4096, 64) is None  # negative start


VADD = H + """.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n, .param .u32 off)
{
.reg .b32 %r<8>;
.reg .f32 %f<4>;
.reg .b64 %rd<12>;
.reg .pred %p<2>;
ld.param.u64 %rd1, [a];
ld.param.u64 %rd2, [b];
ld.param.u64 %rd3, [c];
ld.param.u32 %r2, [n];
ld.param.u32 %r6, [off];
mov.u32 %r3, %ctaid.x;
mov.u32 %r4, %ntid.x;
mov.u32 %r5, %tid.x;
mad.lo.s32 %r1, %r3, %r4, %r5;
setp.ge.s32 %p1, %r1, %r2;
@%p1 bra DONE;
add.s32 %r7, %r1, %r6;
mul.wide.s32 %rd5, %r7, 4;
add.s64 %rd6, %rd1, %rd5;
add.s64 %rd7, %rd2, %rd5;
add.s64 %rd8, %rd3, %rd5;
ld.global.f32 %f1, [%rd6];
ld.global.f32 %f2, [%rd7+-4];
add.f32 %f3, %f1, %f2;
st.global.f32 [%rd8], %f3;
DONE:
ret;
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_consecutive_loads_and_stores_match_the_gathering_path(sanitize, monkeypatch):
    runs = []
    real = memory.run_start
    monkeypatch.setattr(memory, "run_start", lambda *a, **kw: runs.append(real(*a, **kw)) or runs[-1])
    n = 1 << 13
    a, b = rng.random(n + 8, np.float32), rng.random(n + 8, np.float32)
    c = np.zeros(n + 8, np.float32)
    k = pf.parse(VADD).kernel("vadd")
    k.launch(grid=n // 256, block=256, args=[a, b, c, np.int32(n), np.int32(1)], device="emu",
             options={"sanitize": sanitize})
    np.testing.assert_array_equal(c[1:n + 1], a[1:n + 1] + b[:n])
    assert (c[0] == 0) and (c[n + 1:] == 0).all()
    # two loads and a store took the slice path, unless the sanitizer watches (then all gather)
    assert len(runs) == 3 and all((r is None) == sanitize for r in runs)


def test_a_consecutive_run_past_the_end_still_faults_naming_the_thread():
    n = 1 << 13
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    k = pf.parse(VADD).kernel("vadd")
    with pytest.raises(MemoryFault, match=r"out-of-bounds global access of 4 bytes .* past the end"):
        k.launch(grid=n // 256, block=256, args=[a, b, c, np.int32(n), np.int32(3)], device="emu",
                 emu_device_=EmuDevice())


def test_a_consecutive_run_needs_an_aligned_start():
    n = 1 << 13
    dev = EmuDevice()
    a, b, c = (np.ones(n + 4, np.float32) for _ in range(3))
    k = pf.parse(VADD.replace("[%rd7+-4]", "[%rd7+-2]")).kernel("vadd")
    with pytest.raises(MemoryFault, match="misaligned"):
        k.launch(grid=n // 256, block=256, args=[a, b, c, np.int32(n), np.int32(1)], device="emu", emu_device_=dev)


SHFL = H + """.visible .entry k(.param .u64 out)
{
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
.reg .pred %p<3>;
ld.param.u64 %rd1, [out];
mov.u32 %r1, %tid.x;
shr.u32 %r2, %r1, 5;
and.b32 %r6, %r2, 1;
setp.eq.u32 %p1, %r6, 0;
mov.u32 %r5, 31;
@%p1 bra EVEN;
mov.u32 %r3, 3;
shfl.sync.down.b32 %r4, %r1, %r3, %r5, -1;
bra DONE;
EVEN:
mov.u32 %r3, 1;
shfl.sync.down.b32 %r4, %r1, %r3, %r5, -1;
DONE:
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r4;
ret;
}
"""


def test_shuffle_offsets_set_under_divergence():
    """Odd and even warps shuffle by 3 and by 1: each shfl runs with the offset register holding one value on
    its active lanes and another elsewhere."""
    out = np.zeros(256, np.uint32)
    pf.parse(SHFL).kernel("k").launch(grid=1, block=256, args=[out], device="emu")
    lane = np.arange(256) % 32
    delta = np.where((np.arange(256) // 32) % 2 == 1, 3, 1)
    want = np.where(lane + delta <= 31, np.arange(256) + delta, np.arange(256))
    np.testing.assert_array_equal(out, want.astype(np.uint32))


SHARED = H + """.visible .entry k(.param .u64 out, .param .u32 scale)
{
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
.shared .align 4 .b8 buf[1024];
ld.param.u64 %rd1, [out];
ld.param.u32 %r6, [scale];
mov.u32 %r1, %tid.x;
mul.lo.u32 %r2, %r1, %r6;
mov.u32 %r3, buf;
add.s32 %r4, %r3, %r2;
st.shared.u32 [%r4], %r1;
bar.sync 0;
xor.b32 %r5, %r1, 1;
mul.lo.u32 %r5, %r5, %r6;
add.s32 %r5, %r3, %r5;
ld.shared.u32 %r7, [%r5];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r7;
ret;
}
"""


def test_whole_wave_shared_accesses_match_and_still_fault():
    k = pf.parse(SHARED).kernel("k")
    out = np.zeros(8 * 256, np.uint32)
    k.launch(grid=8, block=256, args=[out, np.uint32(4)], device="emu")
    np.testing.assert_array_equal(out[:256], (np.arange(256) ^ 1).astype(np.uint32))  # every block: out[tid]
    assert not out[256:].any()
    with pytest.raises(MemoryFault, match="out-of-bounds shared access of 4 bytes"):
        k.launch(grid=8, block=256, args=[out, np.uint32(8)], device="emu")  # lanes 128.. leave the 1 KiB window
    with pytest.raises(MemoryFault, match="misaligned shared access"):
        k.launch(grid=8, block=256, args=[out, np.uint32(2)], device="emu")


def test_a_scaled_index_is_a_ramp_only_while_its_signed_values_do():
    from ptxforge.emu.ops_alu import _ramp_wide

    x = np.arange(4096, dtype=np.uint32) + np.uint32(0x7FFFF800)  # crosses 2^31: negative as .s32
    assert _ramp_wide(_State(), x, 4, signed=True) is None
    assert _ramp_wide(_State(), x, 4, signed=False) == (0x7FFFF800 * 4, 4)
    assert _ramp_wide(_State(), x - np.uint32(0x800), 4, signed=True) == ((0x7FFFF800 - 0x800) * 4, 4)
    assert _ramp_wide(_State(), x, -4 & 0xFFFFFFFF, signed=False) is not None  # an unsigned factor is positive
    assert _ramp_wide(_State(), x, 0, signed=False) is None


def _directed_fma_every_lane(x, y, z, rnd):
    """The directed fma as computed before its fast path: the exact error on every lane, rounded to odd."""
    from ptxforge.emu.semantics.formats import F32, encode, round_to_odd, two_sum

    with np.errstate(all="ignore"):
        p = x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)
        c = z.view(np.float32).astype(np.float64)
        s, e = two_sum(p, c)
        v = round_to_odd(s, e)
        if rnd == "rm":
            zr = v == 0
            v = np.where(zr, np.where(np.signbit(p) | np.signbit(c), -0.0, 0.0), v)
        r = encode(v, F32, rnd).astype(np.uint32)
    nan = (r & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, np.uint32(0x7FFFFFFF), r)


@pytest.mark.parametrize("rnd", ["rz", "rm", "rp"])
def test_directed_fma_fast_path_matches_the_exact_error_on_every_lane(rnd):
    x, y, z = (g.reshape(-1) for g in np.meshgrid(SPECIAL, SPECIAL, SPECIAL, indexing="ij"))
    cases = [(x, y, z), (bits(1 << 14), bits(1 << 14), bits(1 << 14)),
             tuple(rng.standard_normal(1 << 14).astype(np.float32).view(np.uint32) for _ in range(3)),
             tuple(rng.integers(-64, 64, 1 << 14).astype(np.float32).view(np.uint32) for _ in range(3)),
             (np.full(4, 0x33800001, np.uint32), np.full(4, 0x3F7FFFFE, np.uint32), np.full(4, 0x3F800001, np.uint32))]
    for a, b, c in cases:
        with np.errstate(all="ignore"):
            got = np.asarray(floating.fma(a, b, c, "f32", rnd=rnd)).astype(np.uint32)
        np.testing.assert_array_equal(got, _directed_fma_every_lane(a, b, c, rnd))


def test_directed_fma_of_a_sum_that_float64_rounds_onto_a_float32_value():
    # x*y + z = 1 - 2^-70: float64 gives exactly 1.0, a float32 value; toward zero or -inf the answer is below it
    x, y, z = np.uint32(0x33800001), np.uint32(0x3F7FFFFE), np.uint32(0x3F7FFFFF)
    want = {"rz": 0x3F7FFFFF, "rm": 0x3F7FFFFF, "rp": 0x3F800000, "rn": 0x3F800000}
    for rnd, bits_ in want.items():
        assert int(np.asarray(floating.fma(np.full(8, x), y, z, "f32", rnd=rnd)).astype(np.uint32)[0]) == bits_, rnd


SHFL_ALL = H + """.visible .entry k(.param .u64 out, .param .u32 b, .param .u32 c)
{
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
.reg .pred %p<2>;
ld.param.u64 %rd1, [out];
ld.param.u32 %r2, [b];
ld.param.u32 %r3, [c];
mov.u32 %r1, %tid.x;
mov.u32 %r4, %ctaid.x;
mad.lo.u32 %r1, %r4, 1024, %r1;
mul.lo.u32 %r5, %r1, 2654435761;
shfl.sync.MODE.b32 %r6|%p1, %r5, %r2, %r3, -1;
selp.u32 %r7, 1, 0, %p1;
mul.wide.u32 %rd2, %r1, 8;
add.s64 %rd3, %rd1, %rd2;
st.global.v2.u32 [%rd3], {%r6, %r7};
ret;
}
"""


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
def test_whole_warp_shuffles_match_the_per_lane_rule(mode):
    """Large whole-warp waves take `ops_warp._gather_rows` (a shifted copy instead of a gather) when every
    warp moves its lanes the same way; each mode, offset and clamp gives the manual's per-lane rule."""
    k = pf.parse(SHFL_ALL.replace("MODE", mode)).kernel("k")
    n = 4 * 1024
    gid = np.arange(n, dtype=np.uint64)
    val = (gid * 2654435761 % 2**32).astype(np.uint32)
    lane, base = gid.astype(np.int64) % 32, gid.astype(np.int64) // 32 * 32
    for b in (0, 1, 2, 5, 16, 31):
        for c in (0x1F, 0x0, 0x07, 0x181F, 0x1C03):
            out = np.zeros((n, 2), np.uint32)
            k.launch(grid=4, block=1024, args=[out, np.uint32(b), np.uint32(c)], device="emu")
            seg, clamp = (c >> 8) & 31, c & 31
            max_lane = (lane & seg) | (clamp & ~seg)
            j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": (lane & seg) | (b & ~seg)}[mode]
            ok = j >= max_lane if mode == "up" else j <= max_lane
            want = val[base + np.where(ok, j, lane)]
            np.testing.assert_array_equal(out[:, 0], want, err_msg=f"{mode} b={b} c={c:#x}")
            np.testing.assert_array_equal(out[:, 1], ok.astype(np.uint32), err_msg=f"{mode} b={b} c={c:#x}")


GID = H + """.visible .entry k(.param .u64 out, .param .u32 n)
{
.reg .b32 %r<8>;
.reg .b64 %rd<4>;
.reg .pred %p<2>;
ld.param.u64 %rd1, [out];
ld.param.u32 %r6, [n];
mov.u32 %r1, %ctaid.x;
mov.u32 %r2, %ntid.x;
mov.u32 %r3, %tid.x;
mad.lo.s32 %r4, ORDER, %r3;
setp.ge.u32 %p1, %r4, %r6;
@%p1 bra DONE;
mul.wide.u32 %rd2, %r4, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r4;
DONE:
ret;
}
"""


@pytest.mark.parametrize("order", ["%r1, %r2", "%r2, %r1"])
@pytest.mark.parametrize("grid, block, fast", [(40, 256, True), (3000, 128, True), (12, 96, True), (6, 96, False),
                                               (5, 40, False), ((4, 2), 64, False), (2, (32, 2), False)])
def test_global_thread_index_is_a_ramp_when_blocks_are_consecutive(monkeypatch, order, grid, block, fast):
    """`mad.lo %ctaid.x, %ntid.x, %tid.x` over a wave of whole consecutive 1-D blocks is made from the cached
    iota and tagged (ramps.global_index); padding lanes, a 2-D grid or a 2-D block take the arithmetic."""
    hits = []
    orig = ramps.global_index

    def spy(*a):
        r = orig(*a)
        hits.append(r is not None)
        return r
    monkeypatch.setattr(ramps, "global_index", spy)
    k = pf.parse(GID.replace("ORDER", order)).kernel("k")
    g = np.prod(grid) if isinstance(grid, tuple) else grid
    b = np.prod(block) if isinstance(block, tuple) else block
    total = int(g * b)
    out = np.zeros(total + 7, np.uint32)
    k.launch(grid=grid, block=block, args=[out, np.uint32(total - 5)], device="emu")
    gx = grid[0] if isinstance(grid, tuple) else grid
    bx = block[0] if isinstance(block, tuple) else block
    # lane (ctaid.x, tid.x) of every thread: the index the kernel computes, stored at that index when in range
    idx = (np.arange(gx)[:, None] * bx + np.arange(bx)[None, :]).reshape(-1)
    want = np.zeros_like(out)
    keep = idx[idx < total - 5]
    want[keep] = keep
    np.testing.assert_array_equal(out, want)
    assert any(hits) == fast and (all(hits) or not fast)


RAMP_USES = H + """.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d)
{
.reg .b32 %r<12>;
.reg .f32 %f<8>;
.reg .b64 %rd<16>;
.reg .pred %p<4>;
ld.param.u64 %rd1, [a];
ld.param.u64 %rd2, [b];
ld.param.u64 %rd3, [c];
ld.param.u64 %rd4, [d];
mov.u32 %r3, %ctaid.x;
mov.u32 %r4, %ntid.x;
mov.u32 %r5, %tid.x;
mad.lo.s32 %r1, %r3, %r4, %r5;
mul.wide.u32 %rd5, %r1, 4;
add.s64 %rd6, %rd1, %rd5;
ld.global.f32 %f1, [%rd6];
ld.global.u8 %r6, [%rd6+1];
mul.wide.u32 %rd10, %r1, 8;
add.s64 %rd9, %rd2, %rd10;
ld.global.v2.f32 {%f2, %f3}, [%rd9];
shr.u32 %r8, %r5, 5;
and.b32 %r8, %r8, 1;
setp.eq.u32 %p2, %r8, 0;
@%p2 bra ALT;
add.s64 %rd11, %rd3, %rd5;
bra JOIN;
ALT:
add.s64 %rd11, %rd4, %rd5;
JOIN:
add.f32 %f4, %f1, %f2;
add.f32 %f4, %f4, %f3;
cvt.rn.f32.u32 %f5, %r6;
add.f32 %f4, %f4, %f5;
st.global.f32 [%rd11], %f4;
ret;
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_addresses_kept_as_ramps_read_like_arrays_everywhere_else(sanitize, monkeypatch):
    """Address registers only adds and ld/st use are kept as `ramps.Ramp` rules (never made into arrays for
    a slice); a byte load at a ramp of step 4, a vector load, masked adds under divergence and the sanitizer
    read them as the arrays they stand for."""
    made = []
    orig = ramps.Ramp.__init__

    def spy(self, tag, n, *dtype):
        made.append(tag)
        orig(self, tag, n, *dtype)
    monkeypatch.setattr(ramps.Ramp, "__init__", spy)
    n = 64 * 256
    a = rng.random(n, np.float32)
    b = rng.random(2 * n, np.float32)
    c, d = np.zeros(n, np.float32), np.zeros(n, np.float32)
    k = pf.parse(RAMP_USES).kernel("k")
    k.launch(grid=64, block=256, args=[a, b, c, d], device="emu", options={"sanitize": sanitize})
    byte1 = a.view(np.uint8).reshape(n, 4)[:, 1].astype(np.float32)
    want = ((a + b[0::2]) + b[1::2]) + byte1
    odd = (np.arange(n) // 32) % 2 == 1
    np.testing.assert_array_equal(c[odd], want[odd])
    np.testing.assert_array_equal(d[~odd], want[~odd])
    assert not c[~odd].any() and not d[odd].any()
    assert len(made) >= 3  # %rd5, %rd6, %rd10, %rd9 (the adds under divergence are masked: arrays)


def test_only_registers_used_by_adds_and_addresses_may_hold_ramps():
    k = pf.parse(RAMP_USES).kernel("k")
    layout, _ = EmuDevice().image(k.module).compiled(k.function)
    scope = layout.placed[0].scope
    names = {n for n, v in scope.items() if isinstance(v, tuple) and v[1] in ramps.ramp_only(layout)}
    assert names == {"%rd5", "%rd6", "%rd9", "%rd10", "%rd11"}  # not %rd1..4 (ld.param, a parameter's base)
