"""st.bulk in the emulator: each thread zeroes `size` bytes of shared memory from its address (PTX ISA 9.7.9.13).

The kernels fill a block's shared memory with a pattern, st.bulk a range of it, and copy all of it to global
memory: exactly the range is zero and every other byte is the pattern. Faults name the PTX line; under the
sanitizer a range past the end of shared memory is a report, and st.bulk-initialised bytes count as written.
"""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import MemoryFault
from ptxforge.ptx.validator import validate

SHARED = 256  # bytes of shared memory; 64 threads write 4 bytes each
THREADS = SHARED // 4


def _kernel(size_decl: str, size_load: str, bulk: str, version: str = "8.6", setup: str = "") -> str:
    """64 threads: shared[4t..4t+3] = pattern; thread 0 (or `bulk`'s own guard) runs `bulk`; out = shared."""
    return f""".version {version}
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 out, .param .{size_decl} size, .param .u32 off)
{{
  .reg .b32 %r<10>;
  .reg .u32 %u<4>;
  .reg .s32 %s<4>;
  .reg .b64 %rd<8>;
  .reg .u64 %ud<4>;
  .reg .pred %p;
  .shared .align 16 .b8 buf[{SHARED}];
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, buf;
  add.u32 %r4, %r3, %r2;
  mad.lo.u32 %r5, %r1, 16843009, -1600085856;
  st.shared.u32 [%r4], %r5;
  bar.sync 0;
  setp.eq.u32 %p, %r1, 0;
  {size_load}
  ld.param.u32 %r6, [off];
  add.u32 %r7, %r3, %r6;
  {setup}
  {bulk}
  bar.sync 0;
  ld.shared.u32 %r8, [%r4];
  ld.param.u64 %rd2, [out];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r8;
  ret;
}}
"""


U64_SIZE = ("u64", "ld.param.u64 %ud1, [size];", "@%p st.bulk.weak.shared::cta [%r7], %ud1, 0;")


def _pattern() -> np.ndarray:
    t = np.arange(THREADS, dtype=np.uint64)
    return ((t * 16843009 + (1 << 32) - 1600085856) & 0xFFFFFFFF).astype(np.uint32).view(np.uint8)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _run(text: str, size, off: int, sanitize: bool = False, block: int = THREADS) -> np.ndarray:
    m = pf.parse(text, filename="bulk.ptx")
    assert [d.message for d in validate(m) if d.severity == "error"] == []
    out = np.zeros(THREADS, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(block,), args=[out, size, np.uint32(off)], device="emu",
                         options={"sanitize": sanitize})
    return out.view(np.uint8)


def _expected(off: int, size: int) -> np.ndarray:
    want = _pattern().copy()
    want[off: off + size] = 0
    return want


@pytest.mark.parametrize("off, size", [(0, SHARED), (8, 16), (40, 64), (SHARED - 8, 8), (16, 0), (128, 128)])
@pytest.mark.parametrize("sanitize", [False, True])
def test_exactly_the_range_is_zeroed(off, size, sanitize):
    got = _run(_kernel(*U64_SIZE), np.uint64(size), off, sanitize)
    assert (got == _expected(off, size)).all()
    assert (got[off: off + size] == 0).all() and (_pattern()[off: off + size] != 0).all()  # they were not zero


@pytest.mark.parametrize("decl, load, bulk, version", [
    ("u32", "ld.param.u32 %u1, [size];", "@%p st.bulk.weak.shared::cta [%r7], %u1, 0;", "9.0"),
    ("s32", "ld.param.s32 %s1, [size];", "@%p st.bulk.shared::cta [%r7], %s1, 0;", "9.0"),
    ("u32", "ld.param.u32 %u1, [size];", "@%p st.bulk.weak.shared::cta [%r7], %u1+8, 0;", "9.0"),
    ("u64", "ld.param.u64 %rd5, [size];", "@%p st.bulk.weak.shared::cta [%r7], %rd5, 0;", "8.6"),
], ids=["u32", "s32", "u32-plus-8", "b64"])
def test_a_register_size_operand(decl, load, bulk, version):
    got = _run(_kernel(decl, load, bulk, version), getattr(np, decl.replace("u64", "uint64").replace(
        "u32", "uint32").replace("s32", "int32"))(24), 32)
    size = 32 if "+8" in bulk else 24
    assert (got == _expected(32, size)).all()


def test_an_immediate_size_and_a_generic_address():
    """st.bulk [a], 48, 0 with a generic address of the shared window (cvta.shared), from a 64-bit register."""
    bulk = "cvt.u64.u32 %rd6, %r7;\n  cvta.shared.u64 %rd6, %rd6;\n  @%p st.bulk [%rd6], 48, 0;"
    got = _run(_kernel("u64", "", bulk), np.uint64(0), 64)
    assert (got == _expected(64, 48)).all()


def test_each_thread_zeroes_its_own_range():
    """Per-thread semantics (ptxas loops over the distinct addresses): threads 0..7 each clear 8 bytes at 32t."""
    bulk = "shl.b32 %r9, %r1, 5;\n  add.u32 %r9, %r3, %r9;\n  setp.lt.u32 %p, %r1, 8;\n" \
           "  @%p st.bulk.weak.shared::cta [%r9], 8, 0;"
    got = _run(_kernel("u64", "", bulk), np.uint64(0), 0)
    want = _pattern().copy()
    for t in range(8):
        want[32 * t: 32 * t + 8] = 0
    assert (got == want).all()


# ---------------------------------------------------------------------------- faults


@pytest.mark.parametrize("off, size, kind, message", [
    (SHARED - 16, 32, "out-of-bounds", "out-of-bounds shared access of 8 bytes at 0x100"),
    (4, 8, "misaligned", "misaligned shared access of 8 bytes at 0x4 (needs 8-byte alignment)"),
    (0, 12, "misaligned", "st.bulk size 12 is not a multiple of 8 (undefined in the PTX ISA)"),
    (0, 16777224, "out-of-bounds", "st.bulk size 16777224 is outside [0, 16777216]"),
    (0, 1 << 63, "out-of-bounds", "st.bulk size 9223372036854775808 is outside [0, 16777216]"),
])
def test_a_bad_range_faults_naming_the_line(off, size, kind, message):
    text = _kernel(*U64_SIZE)
    with pytest.raises(MemoryFault) as e:
        _run(text, np.uint64(size), off)
    line = _line_of(text, "st.bulk")
    assert e.value.kind == kind and e.value.ptx_line == line
    assert str(e.value).startswith(f"bulk.ptx:{line}: @%p st.bulk.weak.shared::cta [%r7], %ud1, 0;: {message}")
    assert "thread (0,0,0)" in str(e.value)


def test_a_generic_address_outside_the_shared_window_faults():
    """The PTX ISA leaves a generic st.bulk outside .shared undefined: here it names a global array."""
    bulk = "ld.param.u64 %rd6, [out];\n  @%p st.bulk [%rd6], 16, 0;"
    text = _kernel("u64", "", bulk)
    with pytest.raises(MemoryFault, match=r"bulk\.ptx:\d+: @%p st\.bulk \[%rd6\], 16, 0;: st\.bulk generic address "
                                          r"0x7f[0-9a-f]+ is not in the shared window"):
        _run(text, np.uint64(0), 0)


# ---------------------------------------------------------------------------- the sanitizer's view


def test_past_the_end_of_shared_memory_is_a_sanitizer_report():
    text = _kernel(*U64_SIZE)
    with pytest.raises(pf.SanitizerError) as e:
        _run(text, np.uint64(32), SHARED - 16, sanitize=True)
    (rep,) = e.value.reports
    assert rep.kind == "out-of-bounds" and rep.ptx_line == _line_of(text, "st.bulk")
    assert rep.thread == (0, 0, 0) and rep.size == 8 and rep.address == SHARED
    assert "st.bulk.weak.shared::cta" in str(e.value)


def _init_kernel(bulk: str) -> str:
    """Thread t stores shared[4t..4t+3] to global without anyone writing it but `bulk` (run by thread 0)."""
    return f""".version 8.6
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<9>;
  .reg .b64 %rd<5>;
  .reg .pred %p;
  .shared .align 16 .b8 buf[{SHARED}];
  mov.u32 %r1, %tid.x;
  mov.u32 %r3, buf;
  setp.eq.u32 %p, %r1, 0;
  {bulk}
  bar.sync 0;
  shl.b32 %r2, %r1, 2;
  add.u32 %r4, %r3, %r2;
  ld.shared.u32 %r8, [%r4];
  ld.param.u64 %rd2, [out];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r8;
  ret;
}}
"""


def _init_run(bulk: str) -> np.ndarray:
    m = pf.parse(_init_kernel(bulk), filename="init.ptx")
    out = np.full(THREADS, 7, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(THREADS,), args=[out], device="emu", options={"sanitize": True})
    return out


def test_st_bulk_initialised_memory_is_not_uninitialized():
    out = _init_run(f"@%p st.bulk.weak.shared::cta [%r3], {SHARED}, 0;")
    assert (out == 0).all()


def test_bytes_st_bulk_did_not_reach_are_still_uninitialized():
    with pytest.raises(pf.SanitizerError) as e:
        _init_run(f"@%p st.bulk.weak.shared::cta [%r3], {SHARED // 2}, 0;")
    reps = e.value.reports
    assert reps and {r.kind for r in reps} == {"uninitialized"}
    assert min(r.thread[0] for r in reps) == THREADS // 2  # the first thread past the zeroed half


def test_an_undefined_size_is_reported_as_the_byte_count():
    """A size loaded from uninitialized shared memory is a use of an undefined value, named as st.bulk's size."""
    bulk = "ld.shared.u64 %rd1, [%r3+128];\n  @%p st.bulk.weak.shared::cta [%r3], %rd1, 0;"
    with pytest.raises(pf.SanitizerError) as e:
        _init_run(bulk)
    assert "the value is used as the byte count of st.bulk" in str(e.value)


def _race_kernel(sync: str) -> str:
    """Threads 0 and 1 both zero the block's shared memory after every thread wrote its word; then each
    thread reads its word back, after `sync`."""
    return f""".version 8.6
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<9>;
  .reg .b64 %rd<5>;
  .reg .pred %p;
  .shared .align 16 .b8 buf[{SHARED}];
  mov.u32 %r1, %tid.x;
  mov.u32 %r3, buf;
  shl.b32 %r2, %r1, 2;
  add.u32 %r4, %r3, %r2;
  st.shared.u32 [%r4], %r1;
  bar.sync 0;
  setp.lt.u32 %p, %r1, 2;
  @%p st.bulk.shared::cta [%r3], {SHARED}, 0;
  {sync}
  ld.shared.u32 %r8, [%r4];
  ld.param.u64 %rd2, [out];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r8;
  ret;
}}
"""


def test_the_race_check_sees_the_bytes_st_bulk_writes():
    """Two threads zeroing the same bytes store equal values (no race); a read of them in the same barrier
    interval is a write-read race with the st.bulk."""
    out = np.full(THREADS, 7, np.uint32)
    pf.parse(_race_kernel("bar.sync 0;"), "race.ptx").kernel("k").launch(
        grid=(1,), block=(THREADS,), args=[out], device="emu", options={"sanitize": True})
    assert (out == 0).all()
    text = _race_kernel("")
    with pytest.raises(pf.SanitizerError) as e:
        pf.parse(text, "race.ptx").kernel("k").launch(grid=(1,), block=(THREADS,), args=[out], device="emu",
                                                      options={"sanitize": True})
    (rep,) = e.value.reports
    assert rep.kind == "race" and rep.ptx_line == _line_of(text, "ld.shared.u32 %r8")
    assert f"race.ptx:{_line_of(text, 'st.bulk')}: @%p st.bulk.shared::cta" in str(e.value)
