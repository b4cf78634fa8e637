"""DualPipe's `dualpipe.utils` names import from ptxforge.pipeline.utils, as DeepSeek's example expects."""

import pytest

torch = pytest.importorskip("torch")


def test_dualpipe_utils_names():
    from ptxforge.pipeline import WeightGradStore as W2
    from ptxforge.pipeline.utils import WeightGradStore, gather, run_backward, scatter

    assert WeightGradStore is W2 and callable(run_backward)
    x = torch.arange(8.0)
    parts = scatter((x, None), 4, 0)
    assert len(parts) == 4 and torch.equal(parts[1][0], torch.tensor([2.0, 3.0])) and parts[1][1] is None
    assert torch.equal(gather([[p[0]] for p in parts], 0), x)
    w = torch.ones(3, requires_grad=True)
    run_backward([w * 2], [torch.ones(3)])
    assert torch.equal(w.grad, torch.full((3,), 2.0))
