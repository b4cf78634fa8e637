"""`NodeGroup`: every rank of an expert-parallel group on one emulated `Node`, driven from one process.

    node = Node(gpus=4, sms=132, sanitize=True)
    group = NodeGroup(node)                           # rank r on node.devices[r]
    outs = group.dispatch(xs, topk_idx=idxs, topk_weights=ws, num_experts=32)   # one list entry a rank
    recv_x, recv_idx, recv_w, counts, handle, _ = outs[r]                      # as Buffer.dispatch returns
    combined = group.combine([expert_out[r] ...], [o[4] for o in outs])          # [(x, w, event)] per rank
    group.sm_map(0)                                   # which SM ran which role, and its thread-instructions

The same kernels and host code as `Buffer(backend="kernels")` (see ptxforge.ep.kernel_backend), with the
ranks' launches queued together and run by one `node.synchronize()` per phase, so the node-wide sanitizer
sees every GPU's accesses. The inputs are trusted (no agreement step): this is the tool for testing and
sanitizing the kernels; programs use `Buffer`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ptxforge.ep import kernel_backend as KB
from ptxforge.ep import layout as torch_layout
from ptxforge.ep.config import COMBINE_CONFIGS, DISPATCH_CONFIGS, Config, EventOverlap, recommended
from ptxforge.ep.intranode import CommRank
from ptxforge.kernels.comm import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from ptxforge.emu.node import Node
    from ptxforge.ep.backends.base import DispatchOutput

_ids = itertools.count(1_000_000)


class NodeGroup:
    def __init__(self, node: Node, num_ranks: int | None = None, num_sms: int = 20,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """`timeout_s` bounds each wait of the kernels on a peer's counter (a `CommTimeout` past it). On the
        emulator the node's own watchdog (`Node(watchdog_s=...)`, no global store for that long) may stop a
        hang first; a shorter timeout_s names the wait instead."""
        self.node = node
        self.world = num_ranks or len(node.devices)
        self.fabric = KB.NodeFabric(node, self.world)
        self.ranks = [CommRank(r, self.world, node.devices[r], self.fabric, timeout_s) for r in range(self.world)]
        self.num_sms = num_sms
        self.id = next(_ids)
        self._serial = 0

    def set_num_sms(self, n: int) -> None:
        if n <= 0 or n % 2:
            raise ValueError(f"set_num_sms: the SM count must be positive and even, got {n}")
        self.num_sms = n

    def dispatch(self, x: list, topk_idx: list | None = None, topk_weights: list | None = None,
                 num_experts: int | None = None, handles: list | None = None, expert_alignment: int = 1,
                 num_worst_tokens: int = 0, config: Config | None = None, bug: str = "",
                 alongside: Callable[[int], object] | None = None) -> list[DispatchOutput]:
        """Per rank: (recv_x, recv_topk_idx, recv_topk_weights, counts, handle, event), as Buffer.dispatch
        (x[r]: bf16 [T, H] or (e4m3, scales); with `handles`, a cached dispatch of x only). `alongside(phase)`
        may queue other launches before each phase (0: notify, 1: dispatch); `bug` plants a defect in the
        dispatch kernel for the sanitizer (see ptxforge.kernels.comm)."""
        self._serial += 1
        config = config or recommended(DISPATCH_CONFIGS, self.world, self.num_sms)
        tun = KB.tunables(config)
        gens, lay = [], []
        for r, comm in enumerate(self.ranks):
            payload, scales = x[r] if isinstance(x[r], tuple | list) else (x[r], None)
            if handles is not None:
                h = handles[r]
                in_rank, per_expert, e = h.is_token_in_rank, torch.zeros(h._num_experts, dtype=torch.int32), \
                    h._num_experts
                idx = w = None
            else:
                if topk_idx is None or num_experts is None:
                    raise ValueError("NodeGroup.dispatch needs topk_idx and num_experts, or the handles of an "
                                     "earlier dispatch (a cached dispatch)")
                idx, w, e = topk_idx[r], (topk_weights[r] if topk_weights is not None else None), num_experts
                _, _, per_expert, in_rank = torch_layout.dispatch_layout(idx, e, self.world, self.world)
            lay.append((payload, scales, in_rank, e))
            gens.append(KB.start_dispatch(comm, payload, scales, idx, w, in_rank, per_expert, e, tun, bug))
        outs = KB.drive_all(self.node, gens, alongside, self.ranks)
        results: list[DispatchOutput] = []
        for r, out in enumerate(outs):
            payload, scales, in_rank, e = lay[r]
            recv, idx, w, counts, fields, n = KB.finish_dispatch(out, payload, scales, in_rank, expert_alignment)
            if handles is not None:
                results.append((recv, None, None, None, None, EventOverlap()))
                continue
            handle = KB.make_handle(fields, n, payload.shape[0], e, num_worst_tokens, tun, self.id, self._serial)
            if num_worst_tokens:
                recv, idx, w = KB.pad_worst(num_worst_tokens, recv, idx, w)
                counts = []
            results.append((recv, idx, w, counts, handle, EventOverlap()))
        return results

    def combine(self, x: list, handles: list, topk_weights: list | None = None, bias: list | None = None,
                config: Config | None = None, alongside: Callable[[int], object] | None = None) -> list:
        """Per rank: (combined_x bf16 [T, H], combined_topk_weights or None, event), as Buffer.combine."""
        config = config or recommended(COMBINE_CONFIGS, self.world, self.num_sms)
        gens = []
        for r, comm in enumerate(self.ranks):
            tun = KB.tunables(config, handles[r]._tunables.num_sms)
            gens.append(KB.start_combine(comm, x[r], topk_weights[r] if topk_weights is not None else None,
                                         bias[r] if bias is not None else None, handles[r], tun))
        outs = KB.drive_all(self.node, gens, alongside, self.ranks)
        return [(*KB.finish_combine(o, x[r]), EventOverlap()) for r, o in enumerate(outs)]

    def sm_map(self, rank: int = 0) -> list[dict]:
        """Rank `rank`'s last dispatch and combine: per block its SM, role (notify, sender, receiver),
        channel and thread-instructions."""
        return self.ranks[rank].sm_map()
