"""The MoE block's two exchanges between EP ranks as pieces (`ptxforge.models.pieces`) over a `ptxforge.ep.Buffer`:

- `Dispatch`: tokens (FP8 1x128 or BF16), their top-k expert ids and weights to the ranks holding those experts;
  its backward is a combine of the received rows' gradients (BF16) and of the weights' (f32).
- `Combine`: each rank's weighted expert outputs back to the tokens' ranks as BF16, summed there; its backward is
  a dispatch of the output gradient (BF16) with the dispatch's handle.

Every call is made with `async_finish=True`: the dispatch with `num_worst_tokens` (every token of every rank:
its results' sizes are then known at once, as in DeepEP without a CPU sync), so that each call, its agreement,
count exchange, packing and unpacking included, runs whole on the Buffer's communication thread (backend="torch")
until `finish` waits on the event; the received rows are padded to that size (ids -1, zeros). A combine names
its dispatch's event as `previous_event` (it reads that dispatch's handle); with `asynchronous=False` every call
completes before it returns (the peer the overlap is measured against).
"""

from __future__ import annotations

from typing import Any

import torch

from ptxforge.ep.layout import dispatch_layout
from ptxforge.models import wire
from ptxforge.models.pieces import Env


class Dispatch:
    """(u, idx, w) of block `layer` -> (rx, ridx, rw) on the experts' ranks; leaves the handle in the env."""

    def __init__(self, layer: int, buffer: Any, num_experts: int, fp8: bool, asynchronous: bool = True) -> None:
        self.name = f"dispatch {layer}"
        self.layer, self.buffer, self.num_experts = layer, buffer, num_experts
        self.fp8, self.asynchronous = fp8, asynchronous
        self.inputs = (f"u{layer}", f"idx{layer}", f"w{layer}")
        self.outputs = (f"rx{layer}", f"ridx{layer}", f"rw{layer}")

    def issue(self, env: Env, state: dict) -> None:
        u, idx, w = (env[n] for n in self.inputs)
        buf = self.buffer
        x = wire.to_fp8(u) if self.fp8 else u.to(torch.bfloat16)
        # get_dispatch_layout's numbers computed here, without its agreement (the dispatch's checks the input)
        ntr, ntrr, nte, in_rank = dispatch_layout(idx, self.num_experts, buf.group_size, buf.ranks_per_node)
        out = buf.dispatch(x, num_tokens_per_rank=ntr, num_tokens_per_rdma_rank=ntrr, is_token_in_rank=in_rank,
                           num_tokens_per_expert=nte,
                           topk_idx=idx, topk_weights=w.float(), num_worst_tokens=u.shape[0] * buf.group_size,
                           async_finish=self.asynchronous)
        state.update(out=out, k=idx.shape[1], hidden=u.shape[1], dtype=u.dtype)

    def finish(self, state: dict) -> Env:
        recv, ridx, rw, _, handle, event = state.pop("out")
        event.current_stream_wait()
        dtype = state["dtype"]
        rx = (wire.from_fp8(*recv) if self.fp8 else recv).to(dtype)
        state.update(handle=handle, n=rx.shape[0])
        return {self.outputs[0]: rx, self.outputs[1]: ridx, self.outputs[2]: rw.to(dtype),
                f"handle{self.layer}": handle, f"event{self.layer}": event}

    def issue_backward(self, grads: Env, state: dict) -> None:
        g_rx, _, g_rw = (grads[n] for n in self.outputs)
        handle, n = state["handle"], state["n"]
        if g_rw is None:  # no row arrived here, or none was used
            g_rw = torch.zeros((n, state["k"]), dtype=torch.float32)
        if g_rx is None:
            g_rx = torch.zeros((n, state["hidden"]), dtype=state["dtype"])
        state["back"] = self.buffer.combine(g_rx.to(torch.bfloat16), handle, topk_weights=g_rw.float(),
                                            async_finish=self.asynchronous)

    def finish_backward(self, state: dict) -> Env:
        gx, gw, event = state.pop("back")
        event.current_stream_wait()
        dtype = state["dtype"]
        state.clear()
        return {self.inputs[0]: gx.to(dtype), self.inputs[2]: gw.to(dtype)}


class Combine:
    """y of block `layer` (the experts' weighted outputs per received row) -> comb (summed per token)."""

    def __init__(self, layer: int, buffer: Any, asynchronous: bool = True) -> None:
        self.name = f"combine {layer}"
        self.layer, self.buffer, self.asynchronous = layer, buffer, asynchronous
        self.inputs = (f"y{layer}", f"handle{layer}", f"event{layer}")
        self.outputs = (f"comb{layer}",)

    def issue(self, env: Env, state: dict) -> None:
        y, handle, dispatched = (env[n] for n in self.inputs)
        state.update(handle=handle, dtype=y.dtype, rows=y.shape[0])
        state["out"] = self.buffer.combine(y.to(torch.bfloat16), handle, previous_event=dispatched,
                                           async_finish=self.asynchronous)

    def finish(self, state: dict) -> Env:
        out, _, event = state.pop("out")
        event.current_stream_wait()
        return {self.outputs[0]: out.to(state["dtype"])}

    def issue_backward(self, grads: Env, state: dict) -> None:
        g = grads[self.outputs[0]]
        state["back"] = self.buffer.dispatch(g.to(torch.bfloat16), handle=state["handle"],
                                             async_finish=self.asynchronous)

    def finish_backward(self, state: dict) -> Env:
        recv, *_, event = state.pop("back")
        event.current_stream_wait()
        dtype, rows = state["dtype"], state["rows"]
        state.clear()
        if recv.shape[0] < rows:  # y had the dispatch's padding rows: their gradient is zero
            recv = torch.cat([recv, recv.new_zeros((rows - recv.shape[0], recv.shape[1]))])
        return {self.inputs[0]: recv.to(dtype)}


def rows_per_source(handle: Any, rank: int) -> list[int]:
    """How many of the rows a dispatch delivered to `rank` came from each rank (they arrive grouped by source
    rank, in ascending order): a column of the handle's rank_prefix_matrix, differenced."""
    prefix = [int(v) for v in handle.rank_prefix_matrix[:, rank].tolist()]
    return [b - a for a, b in zip([0, *prefix[:-1]], prefix, strict=True)]
