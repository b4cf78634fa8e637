"""docs/cluster.md's python blocks run as written: the all-to-all over 2 nodes x 2 GPUs (sanitized, adversarial)
in one process, and the put-with-signal ring as 4 processes (`ClusterRank`)."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", DOC.read_text(), re.S)


def test_the_cluster_docs_example_runs(capsys):
    blocks = _blocks()
    assert len(blocks) == 2
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__doc__"})
    out = capsys.readouterr().out
    assert "PE  1 -> PE  2       rdma" in out and "PE  0 -> PE  1       nvlink" in out


def test_the_one_process_per_gpu_example_runs_as_four_processes(capsys):
    exec(compile(_blocks()[1], str(DOC), "exec"), {"__name__": "__doc__"})
    out = capsys.readouterr().out
    assert "PE  1 -> PE  2       rdma" in out and "PE  0 -> PE  1       nvlink" in out
