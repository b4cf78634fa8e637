"""Deferred weight gradients (the W of zero-bubble schedules) and the backward helper stage code may call.

A stage whose layers split their backward calls `WeightGradStore.put(fn)` for the weight-gradient part while
`WeightGradStore.enabled` is set (the executor sets it during a backward whose W is deferred) and computes it
at once otherwise. Each deferred backward's functions form one group; W runs the oldest group (FIFO).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from torch.autograd.variable import Variable


class WeightGradStore:
    """Process-wide store of deferred weight-gradient closures (same API as deepseek-ai/DualPipe)."""

    enabled: bool = False
    cache: list[Callable[[], None]] = []
    funcs_queue: queue.Queue = queue.Queue()

    @classmethod
    def put(cls, func: Callable[[], None]) -> None:
        cls.cache.append(func)

    @classmethod
    def flush(cls) -> None:
        cls.funcs_queue.put(cls.cache)
        cls.cache = []

    @classmethod
    def pop(cls) -> None:
        if cls.funcs_queue.empty():
            raise RuntimeError("WeightGradStore.pop(): no deferred weight gradients are pending")
        for func in cls.funcs_queue.get():
            func()

    @classmethod
    def clear(cls) -> None:
        cls.cache = []
        cls.funcs_queue = queue.Queue()


def run_backward(tensors: Any, grad_tensors: Any) -> None:
    """Backpropagate `grad_tensors` from `tensors`, accumulating into the leaves' .grad (graph freed).

    Calls the autograd engine directly: unlike torch.autograd.backward it does not compare the gradient with
    the output's *data*, which the executor has already released after sending it to the next stage.
    """
    Variable._execution_engine.run_backward(
        tuple(tensors), tuple(grad_tensors), keep_graph=False, create_graph=False,
        allow_unreachable=True, accumulate_grad=True)
