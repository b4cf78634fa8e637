"""TMA multicast across a cluster and TMA tensor reductions on the emulator (corpus
tma_multicast_reduce_sm90.cu), with maps from ptxforge.runtime.tensor_map, checked against numpy."""

import re

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu import tensormap as TM
from ptxforge.emu.errors import EmulatorError, MemoryFault
from ptxforge.runtime import tensor_map, tensor_map_im2col
from ptxforge.runtime import to_device as _to_device

rng = np.random.default_rng(23)
NAME = "tma_multicast_reduce_sm90"


def to_device(array):
    return _to_device(array, device="emu")


@pytest.mark.parametrize("flavor, n, sanitize", [("sm_90a.O3", 2, False), ("sm_90a.O3", 4, True),
                                                 ("sm_90a.G", 4, False)])
def test_tensor_multicast_shares_a_band_across_the_cluster(flavor, n, sanitize):
    """Each CTA loads one 8-row slice and multicasts it: every CTA ends up with the cluster's whole band,
    completed on its own mbarrier by its peers' copies (some land before its own expect_tx)."""
    m = corpus_module(NAME, flavor)
    k = 2  # clusters
    H = 8 * n * k - 5  # the last slice runs past the tensor: those rows read as zero
    x = rng.integers(-1000, 1000, (H, 32)).astype(np.float32)
    tmap = tensor_map(to_device(x), np.float32, (32, H), (32 * 4,), (32, 8))
    out = np.full((n * k, 2048), -1, np.float32)
    m.kernel("tma_multicast_band").launch(grid=(n * k,), block=(128,), args=[tmap, out], cluster=(n, 1, 1),
                                          options={"sanitize": sanitize, "watchdog_s": 60})
    padded = np.zeros((8 * n * k, 32), np.float32)
    padded[:H] = x
    for b in range(n * k):
        rank, cid = b % n, b // n
        want = padded[8 * n * cid: 8 * n * (cid + 1)].reshape(-1) * (rank + 1)
        np.testing.assert_array_equal(out[b, : 256 * n], want)
        assert (out[b, 256 * n:] == -1).all()


@pytest.mark.parametrize("mask, sanitize", [(0b1010, True), (0b0111, False), (0b1000, False)])
def test_bulk_multicast_reaches_exactly_the_masked_ctas(mask, sanitize):
    """Rank 0 multicasts 4 KB to the CTAs of ctaMask (itself included or not); the others see nothing."""
    m = corpus_module(NAME, "sm_90a.O3")
    n, k = 4, 2
    inp = rng.standard_normal(1024 * k).astype(np.float32)
    out = np.full((n * k, 1024), -5, np.float32)
    m.kernel("bulk_multicast_mask").launch(grid=(n * k,), block=(128,), args=[inp, out, np.uint32(mask)],
                                           cluster=(n, 1, 1), options={"sanitize": sanitize, "watchdog_s": 60})
    for b in range(n * k):
        rank, cid = b % n, b // n
        if mask >> rank & 1:
            np.testing.assert_array_equal(out[b], inp[1024 * cid: 1024 * (cid + 1)] + np.float32(rank))
        else:
            assert (out[b] == -5).all()


def test_multicast_mask_outside_the_cluster_is_a_fault():
    m = corpus_module(NAME, "sm_90a.O3")
    inp, out = np.zeros(2048, np.float32), np.zeros(8 * 1024, np.float32)
    with pytest.raises(MemoryFault, match=r"ctaMask 0x0010 names CTA rank 4, outside this cluster of 4"):
        m.kernel("bulk_multicast_mask").launch(grid=(8,), block=(128,), args=[inp, out, np.uint32(0x10)],
                                               cluster=(4, 1, 1), options={"watchdog_s": 60})


# ------------------------------------------------------------------------------------------ reductions

W, H, BOX = 32, 8, (16, 4)  # the tensor is H x W elements, the box 4 rows of 16
# Block b reduces at (X0 + b DX, Y0 + b DY): overlapping boxes, the last one partly past the right and bottom
# edges. x * element size stays a multiple of 16 bytes for every element type, as a shared::cta -> global
# tensor copy needs on a GPU. BEFORE: boxes that start before the tensor (negative coordinates) as well.
K, X0, Y0, DX, DY = 4, 0, 0, 8, 2
BEFORE = dict(x0=-8, y0=-1)

REDUCE_CASES = [("add", t) for t in ("float32", "float16", "bfloat16", "int32", "uint32", "uint64")] + \
    [(op, t) for op in ("min", "max") for t in ("int32", "uint32", "uint64", "int64", "float16", "bfloat16")] + \
    [("inc", "uint32"), ("dec", "uint32")] + \
    [(op, t) for op in ("and", "or", "xor") for t in ("uint32", "uint64")]


def _dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _values(op, dt, shape):
    if dt.kind == "f" or dt == ml_dtypes.bfloat16:  # small integers: every order of additions is exact
        return rng.integers(-40, 40, shape).astype(np.float32).astype(dt)
    if op in ("inc", "dec"):
        return rng.integers(0, 6, shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def _apply(op, t, s):
    """numpy reference of one element-wise reduction step t <- t op s."""
    if op == "add":
        return (t.astype(np.float32) + s.astype(np.float32)).astype(t.dtype) if t.dtype.kind == "f" or \
            t.dtype == ml_dtypes.bfloat16 else t + s
    if op in ("min", "max"):
        return (np.minimum if op == "min" else np.maximum)(t, s)
    if op == "inc":
        return np.where(t >= s, 0, t + 1).astype(t.dtype)
    if op == "dec":
        return np.where((t == 0) | (t > s), s, t - 1).astype(t.dtype)
    return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](t, s)


def _reference(op, init, src, x0=X0, y0=Y0, dx=DX, dy=DY):
    out = init.copy()
    for b in range(K):
        x, y = x0 + b * dx, y0 + b * dy
        for r in range(BOX[1]):
            for c in range(BOX[0]):
                if 0 <= y + r < H and 0 <= x + c < W:
                    out[y + r, x + c] = _apply(op, out[y + r: y + r + 1, x + c], src[b, r, c: c + 1])[0]
    return out


def _u32(v):
    """An int kernel argument: nvcc declares it .u32, so a negative value travels as its bits."""
    return np.uint32(v & 0xFFFFFFFF)


def _run_reduce(op, dt, init, src, sanitize=False, flavor="sm_90a.O3", x0=X0, y0=Y0, dx=DX, dy=DY):
    m = corpus_module(NAME, flavor)
    buf = to_device(init)
    tmap = tensor_map(buf, dt, (W, H), (W * dt.itemsize,), BOX)
    nbytes = BOX[0] * BOX[1] * dt.itemsize
    args = [tmap, src.view(np.uint8).reshape(-1)] + [_u32(v) for v in (nbytes, x0, y0, dx, dy)]
    m.kernel(f"tma_reduce_{op}").launch(grid=(K,), block=(128,), args=args,
                                        options={"sanitize": sanitize, "watchdog_s": 60})
    return buf.to_host()


@pytest.mark.parametrize("op, type_name", REDUCE_CASES)
def test_tensor_reduce_matches_numpy(op, type_name):
    dt = _dtype(type_name)
    init = _values(op, dt, (H, W))
    src = _values(op, dt, (K, BOX[1], BOX[0]))
    got = _run_reduce(op, dt, init, src)
    want = _reference(op, init, src)
    u = f"u{dt.itemsize}"
    assert (want.view(u) != init.view(u)).any()  # the reduction changes the tensor
    np.testing.assert_array_equal(got.view(u), want.view(u))


@pytest.mark.parametrize("op, type_name", [("add", "float32"), ("min", "int64")])
def test_tensor_reduce_boxes_starting_before_the_tensor(op, type_name):
    """Negative coordinates (x = -8 is 16-byte aligned for every type): the elements before the tensor are skipped."""
    dt = _dtype(type_name)
    init = _values(op, dt, (H, W))
    src = _values(op, dt, (K, BOX[1], BOX[0]))
    got = _run_reduce(op, dt, init, src, **BEFORE)
    u = f"u{dt.itemsize}"
    np.testing.assert_array_equal(got.view(u), _reference(op, init, src, **BEFORE).view(u))


@pytest.mark.parametrize("flavor", ["sm_90a.O3", "sm_90a.G"])
def test_tensor_reduce_add_from_many_blocks_under_the_sanitizer(flavor):
    """Overlapping boxes from blocks running together are atomics: no race report, exact f32 sums."""
    dt = np.dtype(np.float32)
    init = _values("add", dt, (H, W))
    src = _values("add", dt, (K, BOX[1], BOX[0]))
    got = _run_reduce("add", dt, init, src, sanitize=True, flavor=flavor)
    np.testing.assert_array_equal(got, _reference("add", init, src))


@pytest.mark.parametrize("op, type_name, allowed", [
    ("add", "int64", ".u32, .s32, .u64, .f32, .f16, .bf16"),
    ("min", "float32", ".u32, .s32, .u64, .s64, .f16, .bf16"),
    ("inc", "int32", ".u32"),
    ("xor", "float64", ".u32, .s32, .u64, .s64"),
])
def test_tensor_reduce_rejects_types_the_isa_forbids(op, type_name, allowed):
    dt = np.dtype(type_name)
    init = np.zeros((H, W), dt)
    src = np.zeros((K, BOX[1], BOX[0]), dt)
    ptx_type = TM.element_type(dt)
    with pytest.raises(MemoryFault, match=rf"\.{op} is not defined on \{ptx_type} elements .*allows "
                                          rf"\.{op} on {allowed.replace('.', chr(92) + '.')}"):
        _run_reduce(op, dt, init, src)


@pytest.mark.parametrize("op, type_name, x0, dx, ptx_type", [
    ("add", "float32", -5, 7, ".f32"),  # the geometry the H200 stopped with an illegal instruction
    ("max", "float16", 4, 8, ".f16"),  # every box starts 8 bytes into a 16-byte piece
    ("xor", "uint64", 1, 0, ".u64"),
])
def test_tensor_reduce_box_must_start_on_16_bytes(op, type_name, x0, dx, ptx_type):
    """A reduction box whose dimension-0 start is not a multiple of 16 bytes is refused, as a GPU refuses it:
    naming the PTX line, the operation, the coordinate and the map's element type."""
    dt = _dtype(type_name)
    init = np.zeros((H, W), dt)
    src = np.zeros((K, BOX[1], BOX[0]), dt)
    with pytest.raises(MemoryFault) as ei:
        _run_reduce(op, dt, init, src, x0=x0, dx=dx)
    msg = str(ei.value)
    assert msg.startswith(f"{NAME}.sm_90a.O3.ptx:"), msg
    got = re.search(rf"cp\.reduce\.async\.bulk\.tensor \.{op}: the box starts at dimension-0 coordinate (-?\d+), "
                    rf"byte (-?\d+) of a row of \{ptx_type} elements", msg)
    assert got, msg
    x, offset = int(got[1]), int(got[2])
    assert x in {x0 + b * dx for b in range(K)} and offset == x * dt.itemsize and offset % 16
    assert "CUDA_ERROR_ILLEGAL_INSTRUCTION" in msg and f"multiple of {16 // dt.itemsize} elements" in msg
    assert ei.value.kind == "misaligned"


def test_tensor_map_records_the_element_type():
    buf = to_device(np.zeros((4, 8), np.float32))
    for dtype, name, code in [(np.float32, ".f32", 8), (ml_dtypes.bfloat16, ".bf16", 10), (np.int64, ".s64", 6),
                              (np.uint8, ".u8", 1), (ml_dtypes.float8_e4m3fn, ".u8", 1)]:
        esize = np.dtype(dtype).itemsize
        raw = tensor_map(buf, dtype, (4, 4), (32,), (16 // esize, 2))
        assert raw[9] == code and TM.decode(raw).etype == name
    raw = TM.encode(buf.address, 4, (8, 4), (32,), (8, 2), None)  # an older map: no type recorded
    assert raw[9] == 0 and TM.decode(raw).etype is None
    with pytest.raises(ValueError, match="does not fit 4-byte elements"):
        TM.encode(buf.address, 4, (8, 4), (32,), (8, 2), None, etype=".f16")


def test_tensor_reduce_with_an_untyped_map_says_how_to_fix_it():
    m = corpus_module(NAME, "sm_90a.O3")
    buf = to_device(np.zeros((H, W), np.float32))
    raw = TM.encode(buf.address, 4, (W, H), (W * 4,), BOX, None)
    src = np.zeros(K * 64, np.float32)
    with pytest.raises(MemoryFault, match="does not record its element type"):
        m.kernel("tma_reduce_add").launch(grid=(1,), block=(32,), args=[raw, src, _u32(256), _u32(0), _u32(0),
                                                                       _u32(0), _u32(0)])


HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def test_complete_tx_before_expect_tx_completes_the_phase():
    """The tx-count may go negative (bytes before their expect-tx) and the phase still completes once."""
    k = pf.parse(HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [out];
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.complete_tx.shared::cta.b64 [bar], 64;
    mbarrier.test_wait.parity.shared::cta.b64 %p1, [bar], 0;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 64;
    mbarrier.test_wait.parity.shared::cta.b64 %p2, [bar], 0;
    selp.u64 %rd2, 1, 0, %p1;
    selp.u64 %rd3, 1, 0, %p2;
    st.global.v2.u64 [%rd1], {%rd2, %rd3};
    ret;
}
""", filename="tx.ptx").kernel("k")
    out = np.full(2, 7, np.uint64)
    k.launch(grid=(1,), block=(1,), args=[out])
    np.testing.assert_array_equal(out, [0, 1])  # not complete after the bytes alone; complete after the arrive


def test_cta_group_is_reported_unsupported():
    k = pf.parse(HEAD.replace("8.0", "8.6").replace("sm_90a", "sm_100a") + """
.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<2>;
    .shared .align 128 .b8 box[128];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [p];
    cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2
        [box], [%rd1, {0}], [bar];
    ret;
}
""", filename="cg.ptx").kernel("k")
    with pytest.raises(EmulatorError, match="cta_group"):
        k.launch(grid=(1,), block=(1,), args=[np.zeros(32, np.uint32)])


# Rank 0 multicasts one 16-float box into both CTAs of a 2-CTA cluster; after a cluster barrier each CTA
# reads element 3 of its copy, waiting on its own mbarrier first only when `wait` is set.
RACY = HEAD + """
.visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 out, .param .u32 wait)
{
    .reg .pred %p<4>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    .shared .align 128 .b8 box[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r2, %ctaid.x;
    ld.param.u32 %r3, [wait];
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 64;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    setp.ne.u32 %p1, %r1, 0;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    mov.u16 %rs1, 3;
    @!%p1 cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
        [box], [%rd2, {0}], [bar], %rs1;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra READ;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
READ:
    ld.shared.f32 %r4, [box+12];
    ld.param.u64 %rd3, [out];
    mul.wide.u32 %rd4, %r2, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.f32 [%rd5], %r4;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    ret;
}
"""


@pytest.mark.parametrize("wait", [1, 0])
def test_sanitizer_on_multicast_destinations(wait):
    """Waiting on its own mbarrier makes a peer's multicast visible (no report); reading it after only a
    cluster barrier is a use before completion, reported for the reading CTA."""
    x = np.arange(16, dtype=np.float32) + 1
    tmap = tensor_map(to_device(x), np.float32, (16,), (), (16,))
    k = pf.parse(RACY, filename="mc.ptx").kernel("k")
    out = np.zeros(2, np.float32)
    if wait:
        k.launch(grid=(2,), block=(1,), args=[tmap, out, np.uint32(1)], cluster=(2, 1, 1), options={"sanitize": True})
        np.testing.assert_array_equal(out, [4, 4])
        return
    with pytest.raises(pf.SanitizerError) as ei:
        k.launch(grid=(2,), block=(1,), args=[tmap, out, np.uint32(0)], cluster=(2, 1, 1), options={"sanitize": True})
    kinds = {r.kind for r in ei.value.reports}
    assert kinds == {"async-before-wait"}, ei.value


# ------------------------------------------------------------------------------------------ im2col

def _conv_patches(x, OH, OW, s, blocks):
    """numpy im2col of a 3x3 convolution with padding 1 and stride s over NHWC `x`, as tma_im2col_conv3x3
    lays it out: [block][tap 3r + q][pixel i][channel], zero for padding and past the last image."""
    N, H, W, C = x.shape
    xp = np.zeros((N + 1, H + 2, W + 2, C), x.dtype)  # one zero image past the end, a zero border
    xp[:N, 1:-1, 1:-1] = x
    p = np.arange(blocks * 32)
    n, oh, ow = np.minimum(p // (OH * OW), N), p // OW % OH, p % OW
    out = np.empty((blocks * 32, 9, C), x.dtype)
    for r in range(3):
        for q in range(3):
            out[:, 3 * r + q] = xp[n, oh * s + r, ow * s + q]
    return out.reshape(blocks, 32, 9, C).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("shape, s, sanitize", [((2, 7, 9), 1, True), ((1, 10, 12), 2, False)])
def test_im2col_gathers_convolution_patches(shape, s, sanitize):
    """Pixels run through the bounding box W first, then H, then the next image; offsets pick the tap."""
    m = corpus_module(NAME, "sm_90a.O3")
    N, H, W = shape
    C = 16
    x = rng.integers(-99, 99, (N, H, W, C)).astype(np.float32)
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    blocks = -(-N * OH * OW // 32)
    tmap = tensor_map_im2col(to_device(x), np.float32, (C, W, H, N), (C * 4, W * C * 4, H * W * C * 4),
                             (-1, -1), (-1, -1), C, 32, element_strides=(1, s, s, 1))
    out = np.full((blocks, 9, 32, C), np.nan, np.float32)
    m.kernel("tma_im2col_conv3x3").launch(grid=(blocks,), block=(128,),
                                          args=[tmap, out, np.uint32(OH), np.uint32(OW), np.uint32(s)],
                                          options={"sanitize": sanitize, "watchdog_s": 60})
    np.testing.assert_array_equal(out, _conv_patches(x, OH, OW, s, blocks))


def test_im2col_map_layout_and_errors():
    buf = to_device(np.zeros((2, 4, 4, 16), np.float32))
    args = (np.float32, (16, 4, 4, 2), (64, 256, 1024))
    raw = tensor_map_im2col(buf, *args, (-1, -2), (3, -1), 16, 64, element_strides=(1, 2, 1, 1))
    tm = TM.decode(raw)
    assert raw[10] == 1 and tm.im2col == TM.Im2col(16, 64, (-1, -2), (3, -1)) and tm.box_bytes == 16 * 64 * 4
    assert tm.estrides == (1, 2, 1, 1) and tm.etype == ".f32"
    for kw, msg in [(dict(lower=(-129, 0)), r"lower_corner\[0\] = -129 is outside the 8-bit"),
                    (dict(upper=(0,)), "rank - 2 = 2 entries"), (dict(cpp=2), "multiple of 16"),
                    (dict(ppc=1025), "outside 1..1024"), (dict(cpp=257), "outside 1..256")]:
        a = dict(lower=(-1, -1), upper=(-1, -1), cpp=16, ppc=32) | kw
        with pytest.raises(ValueError, match=msg):
            tensor_map_im2col(buf, *args, a["lower"], a["upper"], a["cpp"], a["ppc"])
    with pytest.raises(ValueError, match="rank 3..5"):
        tensor_map_im2col(buf, np.float32, (16, 32), (64,), (), (), 16, 32)


def test_im2col_filter_base_outside_the_bounding_box_is_a_fault():
    m = corpus_module(NAME, "sm_90a.O3")
    x = np.zeros((1, 4, 4, 16), np.float32)
    tmap = tensor_map_im2col(to_device(x), np.float32, (16, 4, 4, 1), (64, 256, 1024), (0, 0), (-2, -2), 16, 32)
    out = np.zeros(9 * 32 * 16, np.float32)  # block 0 puts the base at (-1, -1): outside [0, 1]
    with pytest.raises(MemoryFault, match=r"filter base coordinate 1 = -1 is outside the bounding box \[0, 1\]"):
        m.kernel("tma_im2col_conv3x3").launch(grid=(1,), block=(128,),
                                              args=[tmap, out, np.uint32(2), np.uint32(2), np.uint32(1)])


@pytest.mark.parametrize("flavor, n, sanitize", [("sm_90a.O3", 4, True), ("sm_90a.G", 2, False)])
def test_bulk_copy_and_reduce_into_other_ctas(flavor, n, sanitize):
    """shared::cta -> shared::cluster bulk copy to the next rank and bulk add into rank 0, each completing
    on the destination CTA's mbarrier."""
    m = corpus_module(NAME, flavor)
    k = 2
    inp = rng.integers(0, 1 << 32, (n * k, 256), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((n * k, 512), np.uint32)
    m.kernel("dsmem_bulk_ring").launch(grid=(n * k,), block=(128,), args=[inp, out], cluster=(n, 1, 1),
                                       options={"sanitize": sanitize, "watchdog_s": 60})
    for b in range(n * k):
        rank, first = b % n, b - b % n
        np.testing.assert_array_equal(out[b, :256], inp[first + (rank - 1) % n])
        total = inp[first: first + n].sum(0, dtype=np.uint32) if rank == 0 else np.zeros(256, np.uint32)
        np.testing.assert_array_equal(out[b, 256:], total)
