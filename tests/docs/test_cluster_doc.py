"""docs/cluster.md's python block runs as written (the all-to-all over 2 nodes x 2 GPUs, sanitized, adversarial)."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def test_the_cluster_docs_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)\n```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__doc__"})
    out = capsys.readouterr().out
    assert "PE  1 -> PE  2       rdma" in out and "PE  0 -> PE  1       nvlink" in out
