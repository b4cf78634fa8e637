"""Blackwell tensor memory and tcgen05 (sm_100a) on the emulator: the corpus kernels of tcgen05_sm100a.cu,
hand-written kernels for the descriptor fields they do not use, and the tensor-memory errors."""

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu import MemoryFault
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.sanitizer import Sanitizer
from ptxforge.emu.semantics.formats import F32
from ptxforge.emu.semantics.mma import _dot_rn

rng = np.random.default_rng(100)


def _corpus():
    return corpus_module("tcgen05_sm100a", "sm_100a.O3")


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _rounding_model(A, Bt):
    """D codes of the emulator's mma rounding model (exact A @ B, one round to f32)."""
    A, Bt = np.asarray(A, np.float64), np.asarray(Bt, np.float64)
    return _dot_rn(A, Bt.T, np.zeros((A.shape[0], Bt.shape[0])), F32).astype(np.uint32)


# ---------------------------------------------------------------------------- corpus kernels


@pytest.mark.parametrize("seed", [None, 5])
def test_store_load_round_trip(seed):
    """tcgen05.st then tcgen05.ld of 8 columns per thread, each warp in its own 32 lanes (also with the
    sanitizer placing the warps on shuffled lanes: the lane rule follows the thread's warp, not its slot)."""
    x = rng.integers(-2**31, 2**31 - 1, 128 * 8, dtype=np.int64).astype(np.int32)
    out = np.zeros_like(x)
    san = True if seed is None else Sanitizer(shuffle_seed=seed)
    _corpus().kernel("tmem_store_load").launch(grid=(1,), block=(128,), args=[x, out], options={"sanitize": san})
    np.testing.assert_array_equal(out, x + np.int32(1))


def test_mma_f16():
    """kind::f16, M=128 N=16 K=16: D = A @ Bt^T with f32 accumulation, read back lane by lane."""
    A = rng.standard_normal((128, 16)).astype(np.float16)
    Bt = rng.standard_normal((16, 16)).astype(np.float16)
    D = np.zeros((128, 16), np.float32)
    _corpus().kernel("tcgen05_mma_f16_m128n16k16").launch(grid=(1,), block=(128,), args=[A, Bt, D],
                                                          options={"sanitize": True})
    ref = A.astype(np.float64) @ Bt.astype(np.float64).T
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_bits(D), _rounding_model(A, Bt))


def test_mma_e4m3():
    """kind::f8f6f4 with e4m3 A and B: M=128 N=16 K=32."""
    A = rng.standard_normal((128, 32)).astype(ml_dtypes.float8_e4m3fn)
    Bt = rng.standard_normal((16, 32)).astype(ml_dtypes.float8_e4m3fn)
    D = np.zeros((128, 16), np.float32)
    _corpus().kernel("tcgen05_mma_e4m3_m128n16k32").launch(
        grid=(1,), block=(128,), args=[A.view(np.uint8), Bt.view(np.uint8), D], options={"sanitize": True})
    ref = A.astype(np.float64) @ Bt.astype(np.float64).T
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_bits(D), _rounding_model(A, Bt))


# ---------------------------------------------------------------------------- hand-written kernels

HEAD = """.version 9.0
.target sm_100a
.address_size 64
"""

# One CTA of 128 threads: warp 0 allocates 32 columns (unless ALLOC is empty), everyone runs BODY with the
# base address in %r4 and this thread's warp's lane offset in %r5, then warp 0 deallocates (DEALLOC).
FRAME = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 4 .b32 base;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    shl.b32 %r5, %r2, 21;
    setp.ne.u32 %p1, %r2, 0;
    mov.u32 %r3, base;
    @%p1 bra SKIP;
    @ALLOC@
SKIP:
    bar.sync 0;
    ld.shared.u32 %r4, [base];
    @BODY@
    bar.sync 0;
    @%p1 bra DONE;
    @DEALLOC@
DONE:
    ret;
}
"""
ALLOC32 = "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 32;"
DEALLOC32 = "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;"


def _frame(body, alloc=ALLOC32, dealloc=DEALLOC32, blocks=1, **kw):
    text = FRAME.replace("@ALLOC@", alloc).replace("@BODY@", body).replace("@DEALLOC@", dealloc)
    out = np.zeros(blocks * 128 * 8, np.uint32)
    pf.parse(text, filename="k.ptx").kernel("k").launch(grid=(blocks,), block=(128,), args=[out], options=kw)
    return out


def test_blocks_have_their_own_tensor_memory():
    """Each CTA stores ctaid * 1000 + tid to its own lane, and reads it back after a barrier."""
    body = """
    add.u32 %r6, %r4, %r5;
    mov.u32 %r7, %ctaid.x;
    mad.lo.u32 %r8, %r7, 1000, %r1;
    tcgen05.st.sync.aligned.32x32b.x1.b32 [%r6], {%r8};
    tcgen05.wait::st.sync.aligned;
    bar.sync 0;
    tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r9}, [%r6];
    tcgen05.wait::ld.sync.aligned;
    mad.lo.u32 %r10, %r7, 128, %r1;
    mul.wide.u32 %rd2, %r10, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r9;
    """
    out = _frame(body, blocks=3, num_sms=1)
    b, t = np.divmod(np.arange(3 * 128), 128)
    np.testing.assert_array_equal(out[: 3 * 128], b * 1000 + t)


def test_pack_unpack_16b():
    """st .x2.unpack::16b spreads two registers' halves over four columns; ld .x2.pack::16b joins them again,
    and a plain ld .x4 sees each half in the low 16 bits of its column."""
    body = """
    add.u32 %r6, %r4, %r5;
    mad.lo.u32 %r8, %r1, 65537, 196608;
    xor.b32 %r12, %r8, -1;
    tcgen05.st.sync.aligned.32x32b.x2.unpack::16b.b32 [%r6], {%r8, %r12};
    tcgen05.wait::st.sync.aligned;
    tcgen05.ld.sync.aligned.32x32b.x2.pack::16b.b32 {%r9, %r13}, [%r6];
    tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r10, %r11, %r14, %r15}, [%r6];
    tcgen05.wait::ld.sync.aligned;
    mul.wide.u32 %rd2, %r1, 24;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r9, %r13};
    st.global.v2.u32 [%rd3+8], {%r10, %r11};
    st.global.v2.u32 [%rd3+16], {%r14, %r15};
    """
    out = _frame(body)[: 128 * 6].reshape(128, 6)
    t = np.arange(128, dtype=np.uint32)
    v = t * 65537 + 196608  # low half t, high half t + 3
    w = ~v
    np.testing.assert_array_equal(out[:, :2], np.stack([v, w], 1))
    np.testing.assert_array_equal(out[:, 2:], np.stack([v & 0xFFFF, v >> 16, w & 0xFFFF, w >> 16], 1))


# A single tcgen05.mma (or two, the second accumulating when `acc` != 0) of A[128][32 bytes] by
# Bt[N=32][32 bytes], both K-major without swizzling (LBO 128, SBO 256) and pre-arranged by the host;
# the idesc comes from a parameter. D (128 x 32 f32) is read back with 32x32b.x32.
MMA = HEAD + """
.visible .entry mma(.param .u64 pa, .param .u64 pb, .param .u64 pd, .param .u32 idesc, .param .u32 acc)
{
    .reg .b32 %r<80>;
    .reg .b64 %rd<20>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 sa[4096];
    .shared .align 128 .b8 sb[1024];
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 base;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pd];
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    mul.wide.u32 %rd4, %r1, 32;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd5];
    ld.global.v4.u32 {%r14, %r15, %r16, %r17}, [%rd5+16];
    mov.u32 %r3, sa;
    mad.lo.u32 %r18, %r1, 32, %r3;
    st.shared.v4.u32 [%r18], {%r10, %r11, %r12, %r13};
    st.shared.v4.u32 [%r18+16], {%r14, %r15, %r16, %r17};
    mul.wide.u32 %rd6, %r1, 8;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.v2.u32 {%r10, %r11}, [%rd7];
    mov.u32 %r4, sb;
    mad.lo.u32 %r19, %r1, 8, %r4;
    st.shared.v2.u32 [%r19], {%r10, %r11};
    mov.u32 %r5, bar;
    mov.u32 %r6, base;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra NOINIT;
    mbarrier.init.shared::cta.b64 [%r5], 1;
NOINIT:
    setp.ne.u32 %p2, %r2, 0;
    @%p2 bra NOALLOC;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r6], 32;
NOALLOC:
    fence.proxy.async.shared::cta;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.u32 %r7, [base];
    @%p1 bra WAIT;
    shr.u32 %r20, %r3, 4;
    cvt.u64.u32 %rd8, %r20;
    or.b64 %rd8, %rd8, 70437464178688;
    shr.u32 %r21, %r4, 4;
    cvt.u64.u32 %rd9, %r21;
    or.b64 %rd9, %rd9, 70437464178688;
    ld.param.u32 %r22, [idesc];
    ld.param.u32 %r23, [acc];
    setp.ne.u32 %p3, %r23, 0;
    setp.ne.u32 %p2, %r23, %r23;
    tcgen05.mma.cta_group::1.kind::KIND [%r7], %rd8, %rd9, %r22, %p2;
    @%p3 tcgen05.mma.cta_group::1.kind::KIND [%r7], %rd8, %rd9, %r22, %p3;
    tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r5];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
    @!%p2 bra WAIT;
    tcgen05.fence::after_thread_sync;
    shl.b32 %r24, %r2, 21;
    add.u32 %r25, %r7, %r24;
    tcgen05.ld.sync.aligned.32x32b.x32.b32 {%r40, %r41, %r42, %r43, %r44, %r45, %r46, %r47, %r48, %r49, %r50,
        %r51, %r52, %r53, %r54, %r55, %r56, %r57, %r58, %r59, %r60, %r61, %r62, %r63, %r64, %r65, %r66, %r67,
        %r68, %r69, %r70, %r71}, [%r25];
    tcgen05.wait::ld.sync.aligned;
    mul.wide.u32 %rd10, %r1, 128;
    add.s64 %rd11, %rd3, %rd10;
    st.global.v4.u32 [%rd11], {%r40, %r41, %r42, %r43};
    st.global.v4.u32 [%rd11+16], {%r44, %r45, %r46, %r47};
    st.global.v4.u32 [%rd11+32], {%r48, %r49, %r50, %r51};
    st.global.v4.u32 [%rd11+48], {%r52, %r53, %r54, %r55};
    st.global.v4.u32 [%rd11+64], {%r56, %r57, %r58, %r59};
    st.global.v4.u32 [%rd11+80], {%r60, %r61, %r62, %r63};
    st.global.v4.u32 [%rd11+96], {%r64, %r65, %r66, %r67};
    st.global.v4.u32 [%rd11+112], {%r68, %r69, %r70, %r71};
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    setp.ne.u32 %p2, %r2, 0;
    @%p2 bra DONE;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r7, 32;
DONE:
    ret;
}
"""


def _core_layout(codes):
    """[rows][32 bytes] K-major -> the no-swizzle core-matrix layout (LBO 128, SBO 256)."""
    b = np.asarray(codes).view(np.uint8).reshape(codes.shape[0], 32)
    out = np.zeros(b.size, np.uint8)
    r, k = np.meshgrid(np.arange(b.shape[0]), np.arange(32), indexing="ij")
    out[((r // 8) * 2 + k // 16) * 128 + (r % 8) * 16 + k % 16] = b
    return out


def _idesc(a, b, neg_a=0, neg_b=0, n=32, m=128, d=1):
    return d << 4 | a << 7 | b << 10 | neg_a << 13 | neg_b << 14 | (n >> 3) << 17 | (m >> 4) << 24


@pytest.mark.parametrize("kind,dtype,code", [("f16", np.float16, 0), ("f16", ml_dtypes.bfloat16, 1),
                                             ("f8f6f4", ml_dtypes.float8_e4m3fn, 0),
                                             ("f8f6f4", ml_dtypes.float8_e5m2, 1)])
@pytest.mark.parametrize("acc,neg", [(0, (0, 0)), (1, (1, 0)), (0, (1, 1))])
def test_mma_types_negate_accumulate(kind, dtype, code, acc, neg):
    """bf16 / e5m2 inputs, the negate bits, N = 32, and enable-input-d: D = A B, then D = A B + D."""
    k = 32 // np.dtype(dtype).itemsize
    A = rng.standard_normal((128, k)).astype(dtype)
    Bt = rng.standard_normal((32, k)).astype(dtype)
    D = np.zeros((128, 32), np.float32)
    mod = pf.parse(MMA.replace("KIND", kind), filename="mma.ptx")
    mod.kernel("mma").launch(grid=(1,), block=(128,), options={"sanitize": True},
                             args=[_core_layout(A), _core_layout(Bt), D, np.uint32(_idesc(code, code, *neg)),
                                   np.uint32(acc)])
    sign = (-1) ** (neg[0] + neg[1])
    ref = sign * (A.astype(np.float64) @ Bt.astype(np.float64).T) * (1 + acc)
    np.testing.assert_allclose(D, ref, rtol=1e-5, atol=1e-5)
    once = _rounding_model(sign * A.astype(np.float64), Bt)
    if acc:  # the second MMA adds the same product to the rounded first result: one more rounding
        once = _dot_rn(sign * A.astype(np.float64), Bt.astype(np.float64).T, once.view(np.float32).astype(
            np.float64), F32).astype(np.uint32)
    np.testing.assert_array_equal(_bits(D), once)


def _run_mma(kind, A, Bt, idesc, acc=0, dtype=np.float32):
    D = np.zeros((128, 32), dtype)
    mod = pf.parse(MMA.replace("KIND", kind), filename="mma.ptx")
    mod.kernel("mma").launch(grid=(1,), block=(128,), options={"sanitize": True},
                             args=[_core_layout(A), _core_layout(Bt), D, np.uint32(idesc), np.uint32(acc)])
    return D


def test_mma_tf32_ignores_the_low_13_bits():
    """kind::tf32 (K = 8): f32 elements in shared memory, of which the tensor core uses the upper 19 bits."""
    A = rng.standard_normal((128, 8)).astype(np.float32)
    Bt = rng.standard_normal((32, 8)).astype(np.float32)
    D = _run_mma("tf32", A, Bt, _idesc(2, 2))

    def tf32(x):
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    ref = tf32(A).astype(np.float64) @ tf32(Bt).astype(np.float64).T
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_bits(D), _rounding_model(tf32(A), tf32(Bt)))
    assert not np.array_equal(D, (A.astype(np.float64) @ Bt.astype(np.float64).T).astype(np.float32))


@pytest.mark.parametrize("signed", [0, 1])
def test_mma_i8_exact(signed):
    """kind::i8 (K = 32) into s32: exact integer dot products; the second MMA accumulates."""
    lo, hi = (-128, 128) if signed else (0, 256)
    A = rng.integers(lo, hi, (128, 32)).astype(np.int8 if signed else np.uint8)
    Bt = rng.integers(lo, hi, (32, 32)).astype(np.int8 if signed else np.uint8)
    D = _run_mma("i8", A, Bt, _idesc(signed, signed, d=2), acc=1, dtype=np.int32)
    np.testing.assert_array_equal(D, 2 * (A.astype(np.int64) @ Bt.astype(np.int64).T))


# ---------------------------------------------------------------------------- errors


def _fault(match, body, **kw):
    with pytest.raises(MemoryFault, match=match) as e:
        _frame(body, **kw)
    return e.value


def test_access_to_another_warps_lanes():
    """Every warp stores at lane 0: warp 1 may only use lanes 32-63."""
    e = _fault(r"k\.ptx:\d+: tcgen05\.st.*: tcgen05\.st lanes 0-31 at 0x00000000 from warp 1 \(rank 1 in its "
               r"warpgroup\), which may access only tensor memory lanes 32-63 by thread \(32,0,0\) block \(0,0,0\)",
               "tcgen05.st.sync.aligned.32x32b.x1.b32 [%r4], {%r1};")
    assert e.kind == "tensor-memory" and e.thread == (32, 0, 0)


def test_use_before_alloc():
    _fault(r"tcgen05\.ld columns 0-3 at 0x00000000: column 0 is not allocated \(allocated: nothing\); "
           r"tcgen05\.alloc first by thread \(0,0,0\)",
           "tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r6, %r7, %r8, %r9}, [%r5];", alloc="", dealloc="")


def test_columns_past_the_allocation():
    _fault(r"tcgen05\.st columns 30-33 at 0x0000001e: column 32 is not allocated \(allocated: columns 0-31\)",
           "add.u32 %r6, %r5, 30;\n tcgen05.st.sync.aligned.32x32b.x4.b32 [%r6], {%r1, %r1, %r1, %r1};")


def test_double_dealloc():
    _fault(r"tcgen05\.dealloc of 32 columns at 0x00000000 \(lane 0, column 0\): no allocation starts there "
           r"\(allocated: nothing\); deallocated twice",
           "", dealloc=DEALLOC32 + "\n    " + DEALLOC32)


def test_dealloc_with_the_wrong_count():
    _fault(r"tcgen05\.dealloc of 64 columns at column 0: that allocation has 32 columns", "",
           dealloc="tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 64;")


def test_leak_at_exit():
    _fault(r"k\.ptx:\d+: tcgen05\.alloc: block \(0,0,0\) exited holding tensor memory columns 0-31 \(and 1 "
           r"more allocation\(s\)\); tcgen05\.dealloc every allocation", "", dealloc="", blocks=2, num_sms=1)


@pytest.mark.parametrize("alloc,match", [
    ("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" + ALLOC32,
     "tcgen05.alloc after tcgen05.relinquish_alloc_permit"),
    ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 48;",
     "tcgen05.alloc of 48 columns: the count must be a power of two from 32 to 512"),
    ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 512;\n" + ALLOC32,
     r"tcgen05.alloc of 32 columns: only 0 of 512 columns are free \(allocated: columns 0-511\)"),
])
def test_alloc_errors(alloc, match):
    _fault(match, "", alloc=alloc, dealloc="")


def test_wgmma_style_descriptor_is_rejected():
    """A descriptor without the tcgen05 version bits 46-48 = 0b001 is an error, not a wrong answer."""
    body = """
    setp.ne.u32 %p2, %r1, 0;
    mov.u32 %r9, 134479888;
    mov.b64 %rd4, 0;
    @!%p2 tcgen05.mma.cta_group::1.kind::f16 [%r4], %rd4, %rd4, %r9, %p2;
    """
    _fault(r"the A descriptor 0x0000000000000000 has 0b000 in bits 46-48; the manual fixes them to 0b001",
           body)


def test_unsupported_shape_is_named():
    with pytest.raises(UnsupportedInstruction, match=r"tcgen05 shape \.16x64b is not supported yet"):
        _frame("tcgen05.ld.sync.aligned.16x64b.x1.b32 {%r6}, [%r4];")


def test_sanitizer_reports_reads_of_unwritten_tensor_memory():
    """Freshly allocated tensor memory holds garbage on a GPU: the sanitizer reports reading it (once per
    site, counting the threads), and stays quiet on the lanes a warp stored first."""
    body = """
    add.u32 %r6, %r4, %r5;
    setp.ne.u32 %p2, %r2, 2;
    @%p2 tcgen05.st.sync.aligned.32x32b.x1.b32 [%r6], {%r1};
    tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r7, %r8}, [%r6];
    tcgen05.wait::ld.sync.aligned;
    """
    with pytest.raises(pf.SanitizerError) as e:
        _frame(body, sanitize=True)
    (rep,) = e.value.reports
    assert rep.kind == "uninitialized" and rep.thread == (0, 0, 0) and rep.count == 128
    assert rep.message == ("tcgen05.ld reads tensor memory lane 0, column 1 (and 31 more cells) that no "
                           "tcgen05.st or tcgen05.mma wrote since their tcgen05.alloc")
    body_ok = body.replace("x2.b32 {%r7, %r8}", "x1.b32 {%r7}").replace("@%p2 ", "")
    _frame(body_ok, sanitize=True)


def test_sanitizer_reports_accumulating_into_unwritten_tensor_memory():
    """enable-input-d on the first MMA adds whatever the fresh allocation held."""
    A = rng.standard_normal((128, 16)).astype(np.float16)
    text = MMA.replace("KIND", "f16").replace("setp.ne.u32 %p2, %r23, %r23;", "setp.eq.u32 %p2, %r23, %r23;")
    D = np.zeros((128, 32), np.float32)
    with pytest.raises(pf.SanitizerError) as e:
        pf.parse(text, filename="mma.ptx").kernel("mma").launch(
            grid=(1,), block=(128,), options={"sanitize": True},
            args=[_core_layout(A), _core_layout(A[:32]), D, np.uint32(_idesc(0, 0)), np.uint32(0)])
    (rep,) = e.value.reports
    assert rep.kind == "uninitialized" and rep.thread == (0, 0, 0)
    assert rep.message.startswith("tcgen05.mma with enable-input-d reads tensor memory lane 0, column 0 (and 4095 "
                                  "more cells) that no tcgen05.st or tcgen05.mma wrote")


WAIT_LOOP = """mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
    @!%p2 bra WAIT;"""
COMMIT = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r5];"


@pytest.mark.parametrize("drop,why", [
    ((WAIT_LOOP,), "no thread of the block has seen the mbarrier phase its tcgen05.commit completes on"),
    ((WAIT_LOOP, COMMIT), "its thread has not issued a tcgen05.commit for it"),
])
def test_sanitizer_reports_reading_an_mma_result_too_early(drop, why):
    """On a GPU tcgen05.mma runs asynchronously: D is ready only after the commit's mbarrier phase."""
    text = MMA.replace("KIND", "f16")
    for d in drop:
        assert d in text
        text = text.replace(d, "")
    A = rng.standard_normal((128, 16)).astype(np.float16)
    D = np.zeros((128, 32), np.float32)
    with pytest.raises(pf.SanitizerError) as e:
        pf.parse(text, filename="mma.ptx").kernel("mma").launch(
            grid=(1,), block=(128,), options={"sanitize": True},
            args=[_core_layout(A), _core_layout(A[:32]), D, np.uint32(_idesc(0, 0)), np.uint32(0)])
    (rep,) = e.value.reports
    assert rep.kind == "async-before-wait" and rep.thread == (0, 0, 0)
    assert rep.message == ("tcgen05.ld reads tensor memory columns 0-31 while a tcgen05.mma by thread (0,0,0) "
                           f"into columns 0-31 may still be running: {why}")


def test_warp_must_agree_on_the_address():
    _fault(r"tcgen05\.ld: the tensor memory address must be the same in every thread of the warp: 0x0 in one "
           r"thread, 0x1 in another by thread \(1,0,0\)",
           "and.b32 %r6, %r1, 1;\n tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r7}, [%r6];")


def test_cta_pairs_are_unsupported_by_name():
    with pytest.raises(UnsupportedInstruction, match=r"\.cta_group::2 \(a pair of CTAs sharing tensor memory\)"):
        _frame("", alloc="tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r3], 32;", dealloc="")
