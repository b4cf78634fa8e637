"""TMA tensor copies (cp.async.bulk.tensor) on the emulator, with maps from ptxforge.runtime.tensor_map."""

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu import tensormap as TM
from ptxforge.emu.errors import EmulatorError, MemoryFault
from ptxforge.runtime import tensor_map
from ptxforge.runtime import to_device as _to_device

rng = np.random.default_rng(7)


def to_device(array):
    """Emulator memory, also on a machine with a GPU: these maps use the emulator's own layout."""
    return _to_device(array, device="emu")


def _map2d(buf, rows, cols, box=(32, 32), **kw):
    """A map over a row-major float32 [rows][cols] buffer (dims innermost first: cols, rows)."""
    return tensor_map(buf, np.float32, (cols, rows), (cols * 4,), box, **kw)


def test_transpose_2d_with_partial_boxes():
    """70 x 100 is not a multiple of the 32 x 32 box: edge loads are zero-filled, edge stores clipped (to
    16-byte pieces in dimension 0, as an H200 does: a 70-float row gets 72 written)."""
    m = corpus_module("tma_bulk_sm90", "sm_90a.O3")
    H, W = 70, 100  # W * 4 = 400 bytes, a multiple of 16 as TMA requires
    x = rng.standard_normal((H, W)).astype(np.float32)
    src = to_device(x)
    sentinel = np.float32(-7.5)
    dst = to_device(np.full((W + 4, H + 6), sentinel, np.float32))  # padded rows: stores must stay inside
    in_map = _map2d(src, H, W)
    out_map = tensor_map(dst, np.float32, (H, W), ((H + 6) * 4,), (32, 32))
    m.kernel("tma_transpose_2d").launch(grid=(-(-W // 32), -(-H // 32)), block=(256,), args=[in_map, out_map],
                                        options={"watchdog_s": 60, "sanitize": True})
    out = dst.to_host()
    np.testing.assert_array_equal(out[:W, :H], x.T)
    assert (out[:W, H:H + 2] == 0).all()  # the rest of the last 16-byte piece: the zero-filled load
    assert (out[:W, H + 2:] == sentinel).all() and (out[W:] == sentinel).all()  # out-of-bounds box parts


def test_load_3d_sum_boxes():
    m = corpus_module("tma_bulk_sm90", "sm_90a.O3")
    D = 10  # the last box (depth 8..11) runs two planes past the tensor: they read as zero
    x = rng.integers(-20, 20, (D, 8, 16)).astype(np.float32)  # integers: every summation order is exact
    buf = to_device(x)
    tmap = tensor_map(buf, np.float32, (16, 8, D), (16 * 4, 8 * 16 * 4), (16, 8, 4))
    nb = -(-D // 4)
    out = np.zeros(nb, np.float32)
    m.kernel("tma_load_3d_sum").launch(grid=(nb,), block=(128,), args=[tmap, out],
                                       options={"watchdog_s": 60, "sanitize": True})
    want = [x[4 * b: 4 * b + 4].sum() for b in range(nb)]
    np.testing.assert_array_equal(out, np.asarray(want, np.float32))


def _run_box_kernel(tmap, shape_out, coords, rank, box_bytes, store_map=None):
    """A hand-written kernel: TMA-load one box at `coords` into shared memory, copy it out word by word;
    optionally store the box back with a second map (shared -> global)."""
    cs = ", ".join(str(c) for c in coords)
    nwords = box_bytes // 4
    store = "" if store_map is None else f"""
    mov.b64 %rd4, k_param_2;
    cvta.param.u64 %rd5, %rd4;
    cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [%rd5, {{{cs}}}], [box];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;"""
    src = f"""
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 k_param_0[128], .param .u64 k_param_1,
                  .param .align 64 .b8 k_param_2[128])
{{
    .shared .align 1024 .b8 box[{box_bytes}];
    .shared .align 8 .b64 bar;
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    mov.b64 %rd1, k_param_0;
    cvta.param.u64 %rd2, %rd1;
    prefetch.tensormap [%rd2];
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], {box_bytes};
    cp.async.bulk.prefetch.tensor.{rank}d.L2.global.tile [%rd2, {{{cs}}}];
    cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [box], [%rd2, {{{cs}}}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], 0;
    @!%p1 bra WAIT;
    ld.param.u64 %rd3, [k_param_1];
    mov.u32 %r1, 0;
    mov.u32 %r4, box;
LOOP:
    shl.b32 %r2, %r1, 2;
    add.s32 %r5, %r4, %r2;
    ld.shared.u32 %r3, [%r5];
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd3, %rd6;
    st.global.u32 [%rd7], %r3;
    add.s32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, {nwords};
    @%p1 bra LOOP;{store}
    ret;
}}
"""
    mod = pf.parse(src, filename="tma_box.ptx")
    out = np.zeros(shape_out, np.uint32)
    args = [tmap, out, store_map if store_map is not None else np.zeros(128, np.uint8)]
    mod.kernel("k").launch(grid=(1,), block=(1,), args=args, options={"watchdog_s": 30})
    return out


def _ref_box(x, coords, box, estrides=None):
    """numpy reference of a TMA load: x indexed [d_{r-1}]...[d_0], coords/box innermost first."""
    r = len(box)
    est = estrides or (1,) * r
    idx = [coords[i] + np.arange(-(-box[i] // est[i])) * est[i] for i in range(r)]
    out = np.zeros([len(i) for i in reversed(idx)], x.dtype)
    grids = np.meshgrid(*reversed(idx), indexing="ij")
    ok = np.ones(out.shape, bool)
    for k, g in enumerate(grids):
        ok &= (g >= 0) & (g < x.shape[k])
    sel = tuple(np.clip(g, 0, x.shape[k] - 1) for k, g in enumerate(grids))
    out[ok] = x[sel][ok]
    return out


def test_negative_coords_element_strides_and_1d_5d():
    x = rng.integers(1, 1 << 30, (6, 24)).astype(np.uint32)
    buf = to_device(x)
    tm = tensor_map(buf, np.uint32, (24, 6), (96,), (8, 4))
    got = _run_box_kernel(tm, 32, (-3, -2), 2, 128)
    np.testing.assert_array_equal(got.reshape(4, 8), _ref_box(x, (-3, -2), (8, 4)))
    tm = tensor_map(buf, np.uint32, (24, 6), (96,), (8, 5), element_strides=(2, 3))
    got = _run_box_kernel(tm, 8, (17, 1), 2, 32)
    np.testing.assert_array_equal(got.reshape(2, 4), _ref_box(x, (17, 1), (8, 5), (2, 3)))
    y = np.arange(40, dtype=np.uint32) + 1
    got = _run_box_kernel(tensor_map(to_device(y), np.uint32, (40,), (), (16,)), 16, (32,), 1, 64)
    np.testing.assert_array_equal(got, _ref_box(y, (32,), (16,)))
    z = rng.integers(1, 1000, (3, 2, 3, 2, 8)).astype(np.uint32)
    dims = (8, 2, 3, 2, 3)
    strides = tuple(int(s) for s in z.strides[::-1][1:])
    got = _run_box_kernel(tensor_map(to_device(z), np.uint32, dims, strides, (4, 2, 2, 1, 2)), 32,
                          (4, 0, 2, 1, 1), 5, 128)
    np.testing.assert_array_equal(got.reshape(2, 1, 2, 2, 4), _ref_box(z, (4, 0, 2, 1, 1), (4, 2, 2, 1, 2)))


def test_store_box_must_start_on_16_bytes():
    """A tile store (shared::cta -> global) whose box starts at u32 coordinate -3 (byte -12 of the row) is refused,
    as a GPU stops it with an illegal instruction; the load from the same coordinates is fine, and a store
    starting at -4 (byte -16) writes the in-bounds part of its box."""
    x = rng.integers(1, 1 << 30, (6, 24)).astype(np.uint32)
    tm = tensor_map(to_device(x), np.uint32, (24, 6), (96,), (8, 4))
    dst = to_device(np.zeros((6, 24), np.uint32))
    back = tensor_map(dst, np.uint32, (24, 6), (96,), (8, 4))
    with pytest.raises(MemoryFault, match=r"^tma_box\.ptx:\d+: cp\.async\.bulk\.tensor\.2d\.global\.shared::cta.*: "
                                          r"cp\.async\.bulk\.tensor shared::cta -> global: the box starts at "
                                          r"dimension-0 coordinate -3, byte -12 of a row of \.u32 elements .*"
                                          r"CUDA_ERROR_ILLEGAL_INSTRUCTION.*multiple of 4 elements"):
        _run_box_kernel(tm, 32, (-3, -2), 2, 128, store_map=back)
    got = _run_box_kernel(tm, 32, (-4, -2), 2, 128, store_map=back)
    np.testing.assert_array_equal(got.reshape(4, 8), _ref_box(x, (-4, -2), (8, 4)))
    want = np.zeros_like(x)
    want[:2, :4] = x[:2, :4]
    np.testing.assert_array_equal(dst.to_host(), want)


def test_swizzle_128b_and_store_roundtrip():
    x = rng.integers(1, 1 << 30, (16, 32)).astype(np.uint32)  # 128-byte rows
    buf = to_device(x)
    tm = tensor_map(buf, np.uint32, (32, 16), (128,), (32, 8), swizzle="128B")
    dst = to_device(np.zeros((16, 32), np.uint32))
    back = tensor_map(dst, np.uint32, (32, 16), (128,), (32, 8), swizzle="128B")
    got = _run_box_kernel(tm, 256, (0, 8), 2, 1024, store_map=back)
    box = x[8:16].reshape(8, 8, 4)  # row r, 16-byte chunk c lands at chunk c ^ (r % 8)
    want = np.empty_like(box)
    for r in range(8):
        for c in range(8):
            want[r, c ^ r] = box[r, c]
    np.testing.assert_array_equal(got.reshape(8, 8, 4), want)
    out = dst.to_host()  # the store unswizzles: the box lands where it came from
    np.testing.assert_array_equal(out[8:], x[8:])
    assert (out[:8] == 0).all()


def test_bad_map_is_a_clear_launch_error():
    x = to_device(np.zeros((4, 8), np.float32))
    bogus = np.zeros(128, np.uint8)
    with pytest.raises(EmulatorError, match="not a ptxforge tensor map"):
        _run_box_kernel(bogus, 32, (0, 0), 2, 128)
    del x


def test_size_one_dimension_may_have_stride_zero():
    """cuTensorMapEncodeTiled asks of each stride only a multiple of 16 below 2**40, and a dimension of size 1
    never applies its stride: DeepGEMM's sm90_fp8_mqa_logits encodes its KV-scales map as dims (N, 1) with
    stride 0 and runs so on H800s. A 0 stride of a longer dimension is still refused."""
    x = rng.standard_normal(64).astype(np.float32)
    buf = to_device(x)
    tmap = tensor_map(buf, np.float32, (64, 1), (0,), (32, 1))
    out = _run_box_kernel(tmap, 32, (32, 0), 2, 128)
    np.testing.assert_array_equal(out.view(np.float32), x[32:])
    with pytest.raises(ValueError, match="0 only for a dimension of size 1"):
        tensor_map(buf, np.float32, (16, 4), (0,), (16, 1))


def test_strides_may_come_in_any_order():
    """A [B][H][R] tensor mapped as (R, B, H), so that one box is B rows of one head: the outer strides
    decrease (H*R*4, then R*4), which the driver accepts (DeepGEMM's bhr,hdr->bhd einsum and FP8 batched
    GEMM map their operands so). Rows overlap only if a stride, taken by size, is below the span under it."""
    B, H, R = 6, 3, 16
    x = rng.standard_normal((B, H, R)).astype(np.float32)
    buf = to_device(x)
    tmap = tensor_map(buf, np.float32, (R, B, H), (H * R * 4, R * 4), (16, 4, 1))
    out = _run_box_kernel(tmap, 64, (0, 1, 2), 3, 256)
    np.testing.assert_array_equal(out.view(np.float32).reshape(4, 16), x[1:5, 2, :])
    with pytest.raises(ValueError, match="dimension 2 stride 48 bytes is smaller than dimension 0 spans"):
        tensor_map(buf, np.float32, (R, B, H), (H * R * 4, 48), (16, 4, 1))


@pytest.mark.parametrize("kwargs, msg", [
    (dict(global_dims=(), global_strides_bytes=()), "rank 1..5"),
    (dict(global_dims=(8, 4, 2, 2, 2, 2), global_strides_bytes=(32,) * 5), "rank 1..5"),
    (dict(global_dims=(0, 4)), r"global_dims\[0\] = 0"),
    (dict(global_strides_bytes=(20,)), "multiple of 16"),
    (dict(global_strides_bytes=(32, 64)), "rank - 1 = 1"),
    (dict(global_strides_bytes=(16,)), "rows would overlap"),
    (dict(box_dims=(8, 300)), r"box_dims\[1\] = 300 is outside 1..256"),
    (dict(box_dims=(8,)), "box_dims needs 2"),
    (dict(box_dims=(2, 2)), "multiple of 16"),
    (dict(element_strides=(1, 9)), r"element_strides\[1\] = 9"),
    (dict(swizzle="256B"), "swizzle must be one of"),
    (dict(box_dims=(8, 2), global_strides_bytes=(64,), swizzle="32B", dtype=np.float64), "at most 32 bytes"),
    (dict(oob_fill="inf"), "oob_fill must be one of"),
    (dict(dtype=np.int32, oob_fill="nan"), "oob_fill 'nan' needs a floating-point element type, not .s32"),
    (dict(global_dims=(8, 64)), "spans 2048 bytes but the buffer holds 128"),
    (dict(global_dims=(8, 2.5)), "must hold integers"),
])
def test_tensor_map_errors(kwargs, msg):
    buf = to_device(np.zeros((4, 8), np.float32))
    args = dict(dtype=np.float32, global_dims=(8, 4), global_strides_bytes=(32,), box_dims=(8, 4))
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        tensor_map(buf, **args)


def test_tensor_map_layout_and_argument_checks():
    buf = to_device(np.zeros((4, 8), np.float32))
    raw = tensor_map(buf, np.float32, (8, 4), (32,), (8, 2), element_strides=(1, 2))
    assert raw.dtype == np.uint8 and raw.shape == (128,)
    assert raw[:4].view("<u4")[0] == TM.MAGIC and raw[16:24].view("<u8")[0] == buf.address
    tm = TM.decode(raw)
    assert (tm.dims, tm.strides, tm.box, tm.estrides, tm.esize) == ((8, 4), (4, 32), (8, 2), (1, 2), 4)
    assert tm.box_bytes == 8 * 1 * 4
    with pytest.raises(ValueError, match="not a host numpy array"):
        tensor_map(np.zeros(8, np.float32), np.float32, (8,), (), (8,))
    with pytest.raises(ValueError, match="16-byte aligned"):
        tensor_map(buf.address + 4, np.float32, (8,), (), (8,))


def _one_instruction_kernel(body: str):
    src = f"""
.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{{
    .shared .align 128 .b8 box[128];
    .shared .align 8 .b64 bar;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_param_0];
    {body}
    ret;
}}
"""
    return pf.parse(src, filename="tma_one.ptx").kernel("k")


def test_map_in_global_memory():
    """The map operand may point at global memory (a map copied there), not only at a kernel parameter."""
    x = np.arange(64, dtype=np.uint32).reshape(4, 16)
    buf = to_device(x)
    raw = tensor_map(buf, np.uint32, (16, 4), (64,), (8, 2))
    dst = to_device(np.zeros((4, 16), np.uint32))
    back = tensor_map(dst, np.uint32, (16, 4), (64,), (8, 2))
    k = _one_instruction_kernel("""
    .reg .pred %p1;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 64;
    cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [box], [%rd1, {8, 1}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], 0;
    @!%p1 bra WAIT;
    ld.param.u64 %rd2, [k_param_0];
    add.s64 %rd2, %rd2, 256;
    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd2, {0, 2}], [box];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;""")
    both = to_device(np.concatenate([raw, np.zeros(128, np.uint8), back]))  # maps at +0 and +256
    k.launch(grid=(1,), block=(1,), args=[both])
    out = dst.to_host()
    np.testing.assert_array_equal(out[2:4, 0:8], x[1:3, 8:16])
    assert (out[:2] == 0).all() and (out[:, 8:] == 0).all()


@pytest.mark.parametrize("ins, msg", [
    ("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.im2col_no_offs.bulk_group [%rd1, {0, 0, 0}], [box];",
     "im2col_no_offs"),
    ("cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
     "[box], [%rd1, {0, 0, 0}], [bar];", r"\.im2col needs \{im2colOffsets\} \(1 of them\) after \[mbar\]"),
    ("cp.async.bulk.tensor.3d.global.shared::cta.im2col_no_offs.bulk_group [%rd1, {0, 0, 0}], [box];",
     "im2col_no_offs"),
])
def test_unsupported_tensor_variants_say_so(ins, msg):
    k = _one_instruction_kernel(ins)
    with pytest.raises(EmulatorError, match=msg):
        k.launch(grid=(1,), block=(1,), args=[np.zeros(32, np.uint32)])


def _replace_kernel(space: str, field_lines: str) -> str:
    """One thread: copy the map parameter to `space` (shared, or the global slot itself), edit it with
    tensormap.replace, publish it to the global slot (fence.proxy.tensormap), TMA-load an 8 x 2 float box at
    (16, 1) through the slot and copy the box out."""
    copy_in = "".join(f"    ld.param.v4.u32 {{%r1, %r2, %r3, %r4}}, [k_param_0+{16 * i}];\n"
                      f"    st.{'shared' if space == 'shared::cta' else 'global'}.v4.u32 "
                      f"[{'smap' if space == 'shared::cta' else '%rd1'}+{16 * i}], {{%r1, %r2, %r3, %r4}};\n"
                      for i in range(8))
    target = "smap" if space == "shared::cta" else "%rd1"
    publish = "".join(f"    ld.shared.v4.u32 {{%r1, %r2, %r3, %r4}}, [smap+{16 * i}];\n"
                      f"    st.global.v4.u32 [%rd1+{16 * i}], {{%r1, %r2, %r3, %r4}};\n"
                      for i in range(8)) if space == "shared::cta" else ""
    return f"""
.version 8.3
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 k_param_0[128], .param .u64 k_param_1, .param .u64 k_param_2,
                  .param .u64 k_param_3)
{{
    .shared .align 128 .b8 smap[128];
    .shared .align 1024 .b8 box[64];
    .shared .align 8 .b64 bar;
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [k_param_1];
    ld.param.u64 %rd2, [k_param_2];
{copy_in}{field_lines.format(map=target)}{publish}    fence.proxy.tensormap::generic.release.gpu;
    fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 64;
    mov.u32 %r5, 16;
    mov.u32 %r6, 1;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [box], [%rd1, {{%r5, %r6}}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], 0;
    @!%p1 bra WAIT;
    ld.param.u64 %rd3, [k_param_3];
    mov.u32 %r7, 0;
LOOP:
    shl.b32 %r8, %r7, 2;
    mov.u32 %r9, box;
    add.s32 %r9, %r9, %r8;
    ld.shared.u32 %r10, [%r9];
    mul.wide.u32 %rd4, %r7, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %r10;
    add.s32 %r7, %r7, 1;
    setp.lt.u32 %p1, %r7, 16;
    @%p1 bra LOOP;
    ret;
}}
"""


_RETARGET = """    tensormap.replace.tile.global_address.{sp}.b1024.b64 [{{map}}], %rd2;
    mov.u32 %r11, 24;
    tensormap.replace.tile.global_dim.{sp}.b1024.b32 [{{map}}], 0, %r11;
    mov.u64 %rd6, 96;
    tensormap.replace.tile.global_stride.{sp}.b1024.b64 [{{map}}], 0, %rd6;
"""


@pytest.mark.parametrize("space", ["shared::cta", "global"])
def test_tensormap_replace_retargets_a_map_in_device_memory(space):
    """DeepGEMM's k-grouped FP8 GEMM (and CUTLASS's grouped GEMMs) copy a map parameter to shared memory,
    point it at the next group's tensor with tensormap.replace (address, inner size, row stride) and publish
    it to global memory for TMA. The box at (16, 1) lies outside the old 16-wide tensor, inside the new
    24-wide one with 96-byte rows."""
    old = to_device(np.zeros((4, 16), np.float32))
    y = rng.standard_normal((4, 24)).astype(np.float32)
    new = to_device(y)
    tmap = tensor_map(old, np.float32, (16, 4), (64,), (8, 2))
    slot = to_device(np.zeros(128 + 64, np.uint8))  # the published map: 64-byte aligned inside
    at = -slot.address % 64
    out = np.zeros(16, np.float32)
    src = _replace_kernel(space, _RETARGET.format(sp=space))
    pf.parse(src, filename="replace.ptx").kernel("k").launch(
        grid=(1,), block=(1,), args=[tmap, np.uint64(slot.address + at), np.uint64(new.address), out],
        options={"watchdog_s": 30, "sanitize": True})
    np.testing.assert_array_equal(out.reshape(2, 8), y[1:3, 16:24])
    tm = TM.decode(slot.to_host()[at:at + 128])
    assert (tm.address, tm.dims, tm.strides) == (new.address, (24, 4), (4, 96))


@pytest.mark.parametrize("lines, msg", [
    ("    mov.u64 %rd6, 40;\n    tensormap.replace.tile.global_stride.global.b1024.b64 [{map}], 0, %rd6;\n",
     "new_val 40 is not a multiple of 16"),
    ("    mov.u32 %r11, 0;\n    tensormap.replace.tile.global_dim.global.b1024.b32 [{map}], 1, %r11;\n",
     r"global_dim ord 1: new_val 0 is outside 1..2\*\*32 - 1"),
])
def test_tensormap_replace_errors(lines, msg):
    buf = to_device(np.zeros((4, 16), np.float32))
    slot = to_device(np.zeros(128 + 64, np.uint8))
    at = -slot.address % 64
    src = _replace_kernel("global", lines)
    with pytest.raises(EmulatorError, match=msg):
        pf.parse(src, filename="replace.ptx").kernel("k").launch(
            grid=(1,), block=(1,), args=[tensor_map(buf, np.float32, (16, 4), (64,), (8, 2)),
                                         np.uint64(slot.address + at), np.uint64(buf.address),
                                         np.zeros(16, np.float32)],
            options={"watchdog_s": 30})
