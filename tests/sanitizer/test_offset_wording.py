"""The sanitizer places a bad local or shared address by its signed offset: an access below a window reads
"N bytes before the start", never as an offset of nearly 2^64 "after the end"."""

from __future__ import annotations

import pytest

import ptxforge as pf

H = ".version 8.5\n.target sm_90\n.address_size 64\n"


def sanitizer_report(body: str) -> str:
    k = pf.parse(H + ".visible .entry k()\n{\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n.local .b32 l[4];\n"
                 ".shared .align 4 .b32 s[4];\n" + body + "\nret;\n}\n").kernel("k")
    with pytest.raises(pf.SanitizerError) as ei:
        k.launch(grid=1, block=32, args=[], device="emu", options={"sanitize": True})
    return str(ei.value)


@pytest.mark.parametrize("body,words", [
    ("mov.u64 %rd1, 0;\nld.local.u32 %r1, [%rd1+-4];",
     "Address 0xfffffffffffffffc is 4 bytes before the start of the thread's local memory (64 bytes)"),
    ("mov.u64 %rd1, l;\nst.local.u32 [%rd1+-16], %r1;", "is 16 bytes before the start of the thread's local memory"),
    ("mov.u64 %rd1, s;\nld.shared.u32 %r1, [%rd1+-8];", "is 8 bytes before the start of __shared__ s (16 bytes)"),
    ("mov.u64 %rd1, l;\nld.local.u32 %r1, [%rd1+64];", "is 0 bytes after the end of the thread's local memory"),
])
def test_negative_offsets_read_as_before_the_start(body, words):
    text = sanitizer_report(body)
    assert words in text
    assert "18446744073709551" not in text
