"""Reports of inlined code carry the `.loc ... inlined_at` chain of both sides of a race as call stacks."""

import numpy as np
from san_helpers import cu_line, launch_sanitized


def test_both_sides_of_a_race_show_their_inlined_call_stacks():
    err = launch_sanitized("inlined_race", (1,), (64,), [np.ones(64, np.float32), np.zeros(64, np.float32)])
    r = next(r for r in err.reports if r.kind == "race")
    put, get = cu_line("BUG: the write side"), cu_line("BUG: the read side")
    scale, fill = cu_line("void inl_scale_put"), cu_line("void inl_fill")
    call_fill, call_get = cu_line("inl_fill(s, t, in[t]);"), cu_line("out[t] = inl_get(")
    reader = [f.rsplit("/", 1)[-1] for f in r.stack]
    writer = [f.rsplit("/", 1)[-1] for f in r.other["stack"]]
    assert r.access == "read" and r.other["access"] == "write"
    assert reader == [f"planted.cu:{get} in inl_get", f"planted.cu:{call_get} in inlined_race"]
    assert writer == [f"planted.cu:{put} in inl_put", f"planted.cu:{scale} in inl_scale_put",
                      f"planted.cu:{fill} in inl_fill", f"planted.cu:{call_fill} in inlined_race"]
    assert r.source.endswith(f"planted.cu:{call_get} (inlined from {r.stack[0].split(' in ')[0]})")
    text = str(err)
    assert f"source {r.stack[0]}\n" in text and f"inlined at {r.stack[1]}\n" in text
    assert f"its source {r.other['stack'][0]}\n" in text
    for frame in r.other["stack"][1:]:
        assert f"inlined at {frame}\n" in text
