"""The names DualPipe's `dualpipe.utils` exports, so code written against it imports unchanged:

    from ptxforge.pipeline.utils import WeightGradStore, run_backward   # was: from dualpipe.utils import ...

`scatter(inputs, chunks, dim)` splits each input into micro-batches (a list of tuples, one per micro-batch);
`gather(micro_outputs, dim)` concatenates the micro-batches' outputs back. Importing this module imports torch.
"""

from __future__ import annotations

from ptxforge.pipeline.executor import _gather as gather
from ptxforge.pipeline.executor import _scatter as scatter
from ptxforge.pipeline.weight_grad import WeightGradStore, run_backward

__all__ = ["WeightGradStore", "run_backward", "scatter", "gather"]
