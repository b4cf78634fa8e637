"""Warp-synchronous instructions (vote/shfl .sync, bar.warp.sync) with a full member mask after some lanes of
the warp left the kernel: clean, as PTX allows since sm_70 (docs/sanitizer-rulings.md); lanes that skip the
instruction and rejoin the others' code are still reported."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.sanitizer import SanitizerError

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# Lanes 16-31 of each warp take LEAVE (their own path to the end of the kernel); lanes 0-15 run the vote,
# the shuffle and bar.warp.sync with the full mask and store vote + the partner's %tid.x.
BODY = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    setp.ge.u32 %p1, %r2, 16;
    @%p1 bra LEAVE;
JOIN:
    setp.lt.u32 %p2, %r2, 100;
    vote.sync.all.pred %p3, %p2, 0xffffffff;
    selp.u32 %r3, 1, 0, %p3;
    shfl.sync.bfly.b32 %r4, %r1, 1, 31, 0xffffffff;
    bar.warp.sync 0xffffffff;
    add.u32 %r3, %r3, %r4;
    st.global.u32 [%rd3], %r3;
    ret;
LEAVE:
"""

EXITS = {
    "ret": "    ret;\n}\n",
    "store-then-exit": "    st.global.u32 [%rd3], 77;\n    exit;\n}\n",
    "guarded-ret": "    @%p1 ret;\n    bra.uni JOIN;\n}\n",
}


def _run(text):
    out = np.zeros(64, np.uint32)
    pf.parse(text, filename="ws.ptx").kernel("k").launch(grid=(2,), block=(64,), args=[out], options={"sanitize": True})
    return out


@pytest.mark.parametrize("leave", sorted(EXITS))
def test_full_mask_after_lanes_left_is_clean(leave):
    out = _run(BODY + EXITS[leave])
    t = np.arange(64)
    lo = t % 32 < 16
    np.testing.assert_array_equal(out[lo], 1 + (t[lo] ^ 1))  # the vote of the lanes that took part
    assert (out[~lo] == (77 if leave == "store-then-exit" else 0)).all()


def test_lanes_that_skip_and_rejoin_are_still_reported():
    # lanes 16-31 jump past the vote into the code the voters run next: named, alive, never taking part
    text = BODY.replace("    @%p1 bra LEAVE;\nJOIN:\n", "    mov.u32 %r3, 5;\n    @%p1 bra AFTER;\nJOIN:\n").replace(
        "    st.global.u32 [%rd3], %r3;\n", "AFTER:\n    st.global.u32 [%rd3], %r3;\n") + "    ret;\n}\n"
    with pytest.raises(SanitizerError) as e:
        _run(text)
    r = e.value.reports[0]
    assert r.kind == "invalid-member-mask" and "names lanes 16-31, which do not execute this vote.sync" in r.message
