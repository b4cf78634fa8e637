"""Uninitialized reads reported where the value is used (memcheck's rule), and `eager=True` at the load."""

from __future__ import annotations

import numpy as np
import pytest
from test_sync_order import cu_line, run

rng = np.random.default_rng(2)


def f32(n):
    return rng.standard_normal(n).astype(np.float32)


def uninit(err):
    assert err is not None, "the sanitizer found nothing"
    hits = [r for r in err.reports if r.kind == "uninitialized"]
    assert hits, str(err)
    return hits


def test_an_undefined_value_that_is_never_used_is_clean():
    """Like DeepGEMM's unused scale: loaded from uninitialized shared memory, selected away."""
    x, out = f32(64), np.zeros(64, np.float32)
    assert run("uninit_unused", (1,), (64,), [x, out, np.zeros(1, np.int32)]) is None
    np.testing.assert_array_equal(out, np.tile(x[:32], 2))


def test_eager_reports_at_the_load():
    from ptxforge.emu.sanitizer import Sanitizer

    err = run("uninit_unused", (1,), (64,), [f32(64), np.zeros(64, np.float32), np.zeros(1, np.int32)],
              sanitize=Sanitizer(eager=True))
    r = uninit(err)[0]
    assert r.instruction.startswith("ld.shared") and r.thread == (32, 0, 0) and r.count == 32
    assert "use" not in r.other


def test_copying_an_undefined_value_back_is_clean():
    x, out = f32(64), np.zeros(64, np.float32)
    assert run("uninit_store_back", (1,), (64,), [x, out]) is None
    np.testing.assert_array_equal(out[:32], x[:32])


@pytest.mark.parametrize(("name", "use", "marker", "prefix"), [
    ("uninit_used", "store", "REPORT: the undefined value reaches global", "st.global"),
    ("uninit_branch", "branch", "REPORT: the undefined value decides", "@"),
    ("uninit_address", "address", "REPORT: the undefined value is an address", "ld.global"),
    ("uninit_shfl", "collective", "REPORT: the undefined value enters", "shfl.sync"),
])
def test_uses_of_an_undefined_value(name, use, marker, prefix):
    err = run(name, (1,), (64,), [f32(64), np.zeros(64, np.float32)])
    r = uninit(err)[0]
    assert r.other["use"] == use, str(err)
    assert r.thread == (32, 0, 0) and r.space == "shared" and r.address == 128 and r.count == 32
    assert r.instruction.startswith(prefix) or (prefix == "@" and "bra" in r.instruction), r.instruction
    assert r.source.split(" ")[0].endswith(f"sync_san.cu:{cu_line(marker)}")
    assert r.other["instruction"].startswith("ld.shared") and "used as" in r.message
    assert "Uninitialized value used: loaded from __shared__ memory" in str(err)


def test_reports_fold_by_site_with_a_count():
    err = run("uninit_used", (4,), (64,), [f32(64), np.zeros(256, np.float32)])
    rs = uninit(err)
    assert len(rs) == 1 and rs[0].count == 4 * 32
    assert "(this site: 128 times" in str(err)


def test_arithmetic_atomics_on_undefined_counters_report_at_the_atomic():
    x = np.arange(64, dtype=np.int32)
    err = run("uninit_histogram", (1,), (64,), [x, np.zeros(16, np.int32)])
    r = uninit(err)[0]
    assert r.instruction.startswith("atom.shared.add") or r.instruction.startswith("red.shared.add"), r.instruction
    assert r.source.split(" ")[0].endswith(f"sync_san.cu:{cu_line('REPORT: an undefined counter')}")
    assert r.access == "atomic" and r.space == "shared"


SPILL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry spill(.param .u64 out, .param .u32 use)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    .local .align 4 .b8 stack[8];
    .shared .align 4 .b32 s[32];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r5, [use];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, s;
    add.u32 %r3, %r3, %r2;
    ld.shared.u32 %r4, [%r3];
    st.local.u32 [stack], %r4;
    mov.u32 %r4, 0;
    ld.local.u32 %r4, [stack];
    setp.eq.u32 %p1, %r5, 0;
    @%p1 bra DONE;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
DONE:
    ret;
}
"""


def test_an_undefined_value_spilled_to_the_stack_and_back_is_still_undefined():
    """As -G code spills: the store to local memory is no use, the value loaded back is undefined again."""
    import ptxforge as pf
    from ptxforge.emu.sanitizer import SanitizerError

    k = pf.parse(SPILL, filename="spill.ptx").kernel("spill")
    k.launch(grid=(1,), block=(32,), args=[np.zeros(32, np.uint32), np.uint32(0)], device="emu",
             options={"sanitize": True})
    with pytest.raises(SanitizerError) as e:
        k.launch(grid=(1,), block=(32,), args=[np.zeros(32, np.uint32), np.uint32(1)], device="emu",
                 options={"sanitize": True})
    r = uninit(e.value)[0]
    assert r.other["use"] == "store" and r.instruction.startswith("st.global.u32") and r.count == 32
    assert r.other["instruction"].startswith("ld.local.u32")
