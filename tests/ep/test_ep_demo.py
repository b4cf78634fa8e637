"""The expert-parallel section of `ptxforge demo` runs its 4 ranks and passes its own checks."""

from ptxforge.cli.demo_ep import expert_parallel


def test_demo_section(capsys):
    assert expert_parallel()
    out = capsys.readouterr().out
    assert "bit-exact with numpy" in out and "MISMATCH" not in out
    assert "FP8 + scales" in out and "(51.6%" in out and "calc_diff" in out
