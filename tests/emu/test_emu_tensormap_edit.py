"""Tensor maps edited on the device: every tensormap.replace field, published with tensormap.cp_fenceproxy
and acquired with fence.proxy.tensormap::generic before a TMA load, as CUTLASS's and DeepGEMM's grouped
GEMMs do. An edited map must load exactly what a map built on the host with the same values loads; a bad
combination fails at the instruction that uses the map, with the host builder's message."""

import re

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import tensormap as TM
from ptxforge.emu.errors import EmulatorError
from ptxforge.runtime import tensor_map
from ptxforge.runtime import to_device as _to_device

rng = np.random.default_rng(11)


def to_device(array):
    return _to_device(array, device="emu")


def _kernel_src(edits: str, rank: int, coords: tuple[int, ...], box_bytes: int, after: str = "") -> str:
    """A warp: thread 0 copies the map parameter to shared memory and applies `edits` ({map} is the shared
    map); the warp publishes it to the global slot (%rd1) with tensormap.cp_fenceproxy; thread 0 runs `after`,
    acquires the map and TMA-loads the box at `coords` through the slot; the warp copies the box's bytes out."""
    copy_in = "".join(f"    ld.param.v4.u32 {{%r1, %r2, %r3, %r4}}, [k_param_0+{16 * i}];\n"
                      f"    st.shared.v4.u32 [smap+{16 * i}], {{%r1, %r2, %r3, %r4}};\n" for i in range(8))
    cs = ", ".join(str(c) for c in coords)
    return f"""
.version 8.3
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 k_param_0[128], .param .u64 k_param_1, .param .u64 k_param_2)
{{
    .shared .align 128 .b8 smap[128];
    .shared .align 1024 .b8 box[{box_bytes}];
    .shared .align 8 .b64 bar;
    .reg .pred %p<3>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [k_param_1];
    ld.param.u64 %rd2, [k_param_2];
    mov.u32 %r0, %tid.x;
    setp.eq.u32 %p2, %r0, 0;
    @!%p2 bra EDITED;
{copy_in}{edits.format(map="smap")}EDITED:
    bar.warp.sync -1;
    tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap], 128;
    @!%p2 bra LOADED;
{after}    fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], {box_bytes};
    cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [box], [%rd1, {{{cs}}}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], 0;
    @!%p1 bra WAIT;
LOADED:
    bar.sync 0;
    mov.u32 %r5, %r0;
LOOP:
    shl.b32 %r6, %r5, 2;
    mov.u32 %r7, box;
    add.s32 %r7, %r7, %r6;
    ld.shared.u32 %r8, [%r7];
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
    add.s32 %r5, %r5, 32;
    setp.lt.u32 %p1, %r5, {box_bytes // 4};
    @%p1 bra LOOP;
    ret;
}}
"""


def _launch(src: str, tmap: np.ndarray, box_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(the box's bytes, the published map's bytes)."""
    slot = to_device(np.zeros(128 + 64, np.uint8))
    at = -slot.address % 64
    out = np.zeros(box_bytes, np.uint8)
    pf.parse(src, filename="edit.ptx").kernel("k").launch(
        grid=(1,), block=(32,), args=[tmap, np.uint64(slot.address + at), out],
        options={"watchdog_s": 60, "sanitize": True})
    return out, slot.to_host()[at:at + 128]


def _line_of(src: str, needle: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), start=1) if needle in line)


# A 2-d f32 map over one buffer, edited into a 3-d f16 map with element strides, a 128B swizzle and NaN fill;
# the box at (-8, 1, 2) hangs over the tensor's low edge in dimension 0 and its high edge in dimension 2.
_DIMS3, _BOX3, _ESTR3 = (40, 6, 3), (64, 4, 2), (1, 2, 1)
_EDITS = """    tensormap.replace.tile.rank.shared::cta.b1024.b32 [{{map}}], 2;
    tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [{{map}}], 6;
    tensormap.replace.tile.global_address.shared::cta.b1024.b64 [{{map}}], {addr};
    mov.u32 %r9, 40;
    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [{{map}}], 0, %r9;
    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [{{map}}], 1, 6;
    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [{{map}}], 2, 3;
    mov.u64 %rd5, 128;
    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [{{map}}], 0, %rd5;
    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [{{map}}], 1, 768;
    mov.u32 %r10, 64;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [{{map}}], 0, %r10;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [{{map}}], 1, 4;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [{{map}}], 2, 2;
    tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [{{map}}], 1, 2;
    tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [{{map}}], 2, 1;
    tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [{{map}}], 0;
    tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{{map}}], 3;
    tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [{{map}}], 1;
"""


def test_edited_map_loads_what_the_host_built_map_loads():
    """Two launches of one kernel: a host-built 2-d f32 map edited on the device (rank, elemtype, address,
    dims, strides, box, element strides, interleave, swizzle, fill), and a map built on the host with the
    edited values, unedited. The boxes (swizzled, NaN-filled, strided) and the published maps agree."""
    x = rng.standard_normal((3, 6, 64)).astype(np.float16)  # rows of 128 bytes, 40 elements used
    buf = to_device(x)
    old = to_device(np.zeros((4, 16), np.float32))
    template = tensor_map(old, np.float32, (16, 4), (64,), (8, 2))
    want_map = tensor_map(buf, np.float16, _DIMS3, (128, 768), _BOX3, _ESTR3, swizzle="128B", oob_fill="nan")
    box_bytes = 64 * 2 * 2 * 2
    coords = (-8, 1, 2)
    edited = _kernel_src(_EDITS.format(addr=buf.address), 3, coords, box_bytes)
    plain = _kernel_src("", 3, coords, box_bytes)
    got, published = _launch(edited, template, box_bytes)
    want, _ = _launch(plain, want_map, box_bytes)
    np.testing.assert_array_equal(got, want)
    assert TM.decode(published) == TM.decode(want_map)
    # and the box is what the values say: unswizzle, then compare with numpy (NaN outside the tensor)
    span = np.arange(box_bytes // 2, dtype=np.int64) * 2
    vals = got.view(np.uint16)[TM.swizzle_offsets(span, 128) // 2].reshape(2, 2, 64)
    ref = np.full((2, 2, 64), 0x7FFF, np.uint16)
    for k in range(2):
        for j in range(2):
            z, y = 2 + k, 1 + 2 * j
            if z < 3:
                ref[k, j, 8:48] = x[z, y, :40].view(np.uint16)
    np.testing.assert_array_equal(vals, ref)


def test_edited_map_in_global_memory_and_generic_address():
    """tensormap.replace on the map in global memory (.global) and through a generic address."""
    x = rng.standard_normal((8, 32)).astype(np.float32)
    buf = to_device(x)
    template = tensor_map(buf, np.float32, (32, 8), (128,), (8, 2))
    want_map = tensor_map(buf, np.float32, (32, 8), (128,), (16, 4), (1, 2))
    after = """    tensormap.replace.tile.box_dim.global.b1024.b32 [%rd1], 0, 16;
    cvta.global.u64 %rd6, %rd1;
    tensormap.replace.tile.box_dim.b1024.b32 [%rd6], 1, 4;
    tensormap.replace.tile.element_stride.global.b1024.b32 [%rd1], 1, 2;
    fence.proxy.tensormap::generic.release.gpu;
"""
    got, _ = _launch(_kernel_src("", 2, (8, 3), 128, after), template, 128)
    want, _ = _launch(_kernel_src("", 2, (8, 3), 128), want_map, 128)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got.view(np.float32).reshape(2, 16), x[[3, 5], 8:24])


@pytest.mark.parametrize("code, etype", list(enumerate(TM.REPLACE_ELEMTYPES)))
def test_elemtype_codes_are_the_ptx_isas(code, etype):
    """.elemtype's new_val is the PTX ISA's code (0 .u8 ... 12 .tf32.ftz), not the driver's enum."""
    esize = TM.ELEMENT_SIZES[etype]
    raw = TM.encode(1 << 20, 4, (32, 4), (256,), (16, 2), None, etype=".f32")
    edited = TM.replace(raw, "elemtype", 0, code)
    host = TM.encode(1 << 20, esize, (32, 4), (256,), (16, 2), None, etype=etype)
    assert TM.decode(edited) == TM.decode(host)


# (edit lines, the rule the use breaks): each map is valid until the TMA load reads it
_USE_ERRORS = [
    ("    tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{map}], 1;\n"
     "    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [{map}], 0, 16;\n",
     r"with swizzle '32B' the inner box .* = 64 bytes\) must be at most 32 bytes"),
    ("    tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [{map}], 6;\n",
     r"box_dims\[0\] \* element size = 8 bytes must be a multiple of 16"),
    ("    tensormap.replace.tile.rank.shared::cta.b1024.b32 [{map}], 2;\n",
     r"box_dims\[2\] = 0 is outside 1..256"),
    ("    tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [{map}], 2;\n"
     "    tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [{map}], 1;\n",
     r"oob_fill 'nan' needs a floating-point element type, not .u32"),
    ("    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [{map}], 0, 16;\n",
     r"dimension 1 stride 16 bytes is smaller than dimension 0 spans"),
    ("    tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [{map}], 1;\n",
     r"interleave layout 16B is not modelled"),
]


def _faults_at(edits: str, at: str, msg: str) -> None:
    """The kernel with `edits` faults at the first line holding `at`, with a message matching `msg`."""
    buf = to_device(np.zeros((4, 16), np.float32))
    src = _kernel_src(edits, 2, (0, 0), 32)
    line = _line_of(src, at)
    with pytest.raises(EmulatorError, match=rf"edit\.ptx:{line}:.*{msg}"):
        _launch(src, tensor_map(buf, np.float32, (16, 4), (64,), (4, 2)), 32)


@pytest.mark.parametrize("edits, msg", _USE_ERRORS)
def test_bad_combination_faults_at_the_use(edits, msg):
    _faults_at(edits, "cp.async.bulk.tensor", rf"tensor map at 0x[0-9a-f]+: {msg}")


_VALUE_ERRORS = [
    ("    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [{map}], 0, 300;\n",
     r"tensormap.replace.box_dim ord 0: new_val 300 is outside 1..256"),
    ("    tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [{map}], 1, 9;\n",
     r"element_stride ord 1: new_val 9 is outside 1..8"),
    ("    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [{map}], 0, 40;\n",
     r"global_stride ord 0: new_val 40 is not a multiple of 16 below 2\*\*40"),
    ("    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [{map}], 4, 64;\n",
     r"global_stride ord 4: ord 4 is outside 0..3 \(the byte stride of dimension ord \+ 1"),
    ("    tensormap.replace.tile.rank.shared::cta.b1024.b32 [{map}], 5;\n",
     r"rank: new_val 5 is outside 0..4 \(the field holds rank - 1"),
    ("    mov.u64 %rd5, 8;\n    tensormap.replace.tile.global_address.shared::cta.b1024.b64 [{map}], %rd5;\n",
     r"global_address: new_val 8 is not 16-byte aligned"),
    ("    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [{map}], 0, 0;\n",
     r"global_dim ord 0: new_val 0 is outside 1..2\*\*32 - 1"),
    ("    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap+16], 0, 8;\n",
     r"tensor map address 0x[0-9a-f]+ is not 64-byte aligned"),
]


@pytest.mark.parametrize("edits, msg", _VALUE_ERRORS)
def test_value_that_is_never_valid_faults_at_the_replace(edits, msg):
    _faults_at(edits, "tensormap.replace", msg)


@pytest.mark.parametrize("field, ordinal, value, msg", [
    ("elemtype", 0, 13, r"\.b4x16, a packed sub-byte type\) is not modelled"),
    ("elemtype", 0, 16, "is no element type code"),
    ("swizzle_mode", 0, 5, r"is not one of 0 \(none\), 1 \(32B\), 2 \(64B\), 3 \(128B\), 4 \(96B\)"),
    ("fill_mode", 0, 2, r"is not one of 0 \(zero\), 1 \(nan\)"),
    ("swizzle_atomicity", 0, 4, "is not one of 0 \\(16B\\)"),
    ("box_dim", 5, 8, "ord 5 is outside 0..4"),
])
def test_replace_codes_outside_the_table(field, ordinal, value, msg):
    """Immediate codes the PTX ISA's table leaves out (ptxas refuses most of them already)."""
    raw = TM.encode(1 << 20, 4, (64, 4), (256,), (16, 2), None, etype=".f32")
    with pytest.raises(ValueError, match=msg):
        TM.replace(raw, field, ordinal, value)


def test_modelled_only_at_the_use():
    """Codes the table has but the emulator does not model (96B swizzle, sm_103a; swizzle atomicity other
    than 16B, sm_100a) are written, and the use says so."""
    raw = TM.encode(1 << 20, 4, (64, 4), (256,), (16, 2), None, etype=".f32")
    with pytest.raises(ValueError, match=re.escape("swizzle mode 4 (96B, sm_103a) is not modelled")):
        TM.decode(TM.replace(raw, "swizzle_mode", 0, 4))
    with pytest.raises(ValueError, match=re.escape("swizzle atomicity 32B + 8B flip is not modelled")):
        TM.decode(TM.replace(raw, "swizzle_atomicity", 0, 2))
    im2col = TM.encode_im2col(1 << 20, 4, (4, 8, 2), (16, 128), (0,), (0,), 4, 8)
    with pytest.raises(ValueError, match="im2col map; tensormap.replace edits .tile maps"):
        TM.replace(im2col, "box_dim", 0, 8)


@pytest.mark.parametrize("line, msg", [
    ("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1+16], [smap], 128;",
     r"tensormap.cp_fenceproxy destination 0x[0-9a-f]+ is not 64-byte aligned"),
    ("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap+16], 128;",
     r"tensor map address 0x[0-9a-f]+ is not 64-byte aligned"),
])
def test_cp_fenceproxy_faults(line, msg):
    buf = to_device(np.zeros((4, 16), np.float32))
    src = _kernel_src("", 2, (0, 0), 32).replace(
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap], 128;",
        line)
    where = _line_of(src, "tensormap.cp_fenceproxy")
    with pytest.raises(EmulatorError, match=rf"edit\.ptx:{where}:.*{msg}"):
        _launch(src, tensor_map(buf, np.float32, (16, 4), (64,), (4, 2)), 32)


def _two_warp_src(sync: str) -> str:
    """Thread 0 edits the shared map; warp 1 publishes it with tensormap.cp_fenceproxy after `sync`; thread 0
    then acquires and loads through it."""
    copy_in = "".join(f"    ld.param.v4.u32 {{%r1, %r2, %r3, %r4}}, [k_param_0+{16 * i}];\n"
                      f"    st.shared.v4.u32 [smap+{16 * i}], {{%r1, %r2, %r3, %r4}};\n" for i in range(8))
    return f"""
.version 8.3
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 k_param_0[128], .param .u64 k_param_1, .param .u64 k_param_2)
{{
    .shared .align 128 .b8 smap[128];
    .shared .align 128 .b8 box[64];
    .shared .align 8 .b64 bar;
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [k_param_1];
    ld.param.u64 %rd2, [k_param_2];
    mov.u32 %r0, %tid.x;
    setp.eq.u32 %p2, %r0, 0;
    setp.ge.u32 %p3, %r0, 32;
    @!%p2 bra EDITED;
{copy_in}    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap], 0, 16;
EDITED:
{sync}    @!%p3 bra PUBLISHED;
    tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap], 128;
PUBLISHED:
    bar.sync 0;
    @!%p2 bra DONE;
    fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 64;
    cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [box], [%rd1, {{0}}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [bar], 0;
    @!%p1 bra WAIT;
    ld.shared.v4.u32 {{%r1, %r2, %r3, %r4}}, [box+48];
    st.global.v4.u32 [%rd2], {{%r1, %r2, %r3, %r4}};
DONE:
    ret;
}}
"""


def test_publishing_from_another_warp_is_ordered_by_the_barrier():
    """The sanitizer sees tensormap.cp_fenceproxy's read of the shared map: after a bar.sync the documented
    pattern is clean (and the edit reaches the load); without one, thread 0's edit and warp 1's copy race."""
    x = np.arange(32, dtype=np.uint32)
    buf = to_device(x)
    tmap = tensor_map(buf, np.uint32, (32,), (), (8,))
    slot = to_device(np.zeros(128 + 64, np.uint8))
    at = -slot.address % 64
    out = np.zeros(4, np.uint32)
    args = [tmap, np.uint64(slot.address + at), out]
    k = pf.parse(_two_warp_src("    bar.sync 0;\n"), filename="edit.ptx").kernel("k")
    k.launch(grid=(1,), block=(64,), args=args, options={"watchdog_s": 60, "sanitize": True})
    np.testing.assert_array_equal(out, x[12:16])  # the 16-wide box's last 16 bytes: only the edited map has them
    racy = pf.parse(_two_warp_src(""), filename="edit.ptx").kernel("k")
    with pytest.raises(EmulatorError, match=r"(?s)Race \(write-read\) on __shared__ memory.*edit\.ptx:\d+: "
                                            r"tensormap\.cp_fenceproxy.*tensormap\.replace\.tile\.box_dim"):
        racy.launch(grid=(1,), block=(64,), args=args, options={"watchdog_s": 60, "sanitize": True})
