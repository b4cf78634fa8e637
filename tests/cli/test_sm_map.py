"""The node section of the demo and its SM map picture."""

import numpy as np
import pytest

from ptxforge.cli.demo_node import node_section


def test_node_demo_section_passes_and_draws_the_sm_map(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the SM map needs the plot extra")
    out = tmp_path / "map.png"
    assert node_section(str(out))
    text = capsys.readouterr().out
    assert "every chunk from its sender" in text and "no reports" in text and "both finish" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sm_map_of_a_gpu_without_launches_is_an_error(tmp_path):
    pytest.importorskip("matplotlib", reason="the SM map needs the plot extra")
    from ptxforge.cli.sm_map import _runs, draw_sm_map
    from ptxforge.emu import Node

    with pytest.raises(ValueError, match="ran no stream launch"):
        draw_sm_map(Node(gpus=1, sms=4), tmp_path / "x.png")
    assert _runs(np.array([5, 1, 2, 3, 7])) == [(1, 3), (5, 5), (7, 7)]
