"""The demo's communication-kernels section: dispatch/combine on SMs 0-19 beside a GEMM, with its SM map."""

import pytest

pytest.importorskip("torch", reason="the expert-parallel demo needs the torch extra")
pytest.importorskip("matplotlib", reason="the SM map needs the plot extra")


def test_comm_section_passes_and_draws_the_roles(tmp_path, capsys):
    from ptxforge.cli.demo_comm import comm_section

    path = tmp_path / "comm.png"
    assert comm_section(str(path), tokens=16, hidden=256, n=64)
    out = capsys.readouterr().out
    assert "combine exact" in out and "senders on SMs 0,2,...18" in out and "receivers on SMs 1,3,...19" in out
    assert "the GEMM (64x64x64, exact) on SMs 20-" in out
    assert path.stat().st_size > 10_000
