"""How rows move: a `Hop` is one all_to_all (which local rows go to which peer), and `DispatchPlan` chains
one hop (all ranks one node) or two (node-limited routing across nodes) and can be run backwards to combine.

Two hops, as DeepSeek-V3: a token on rank (node a, local i) crosses to each destination node b once, to rank
(b, i), which forwards it inside node b to every rank there that holds one of its experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Hop:
    send_index: torch.Tensor  # local row of each sent row, grouped by destination peer (ascending)
    send_counts: list[int]    # rows to each peer of the group
    recv_counts: list[int]    # rows from each peer

    @staticmethod
    def from_mask(mask: torch.Tensor, peers: list[int], size: int, recv_counts: list[int]) -> Hop:
        """mask [N, len(peers)]: row n goes to peers[j] where mask[n, j]; rows in ascending order per peer."""
        counts = [0] * size
        parts = []
        for j, p in enumerate(peers):
            rows = torch.nonzero(mask[:, j], as_tuple=False).flatten()
            counts[p] = int(rows.numel())
            parts.append(rows)
        order = sorted(range(len(peers)), key=lambda j: peers[j])
        index = torch.cat([parts[j] for j in order]) if parts else torch.zeros(0, dtype=torch.int64)
        return Hop(index.to(torch.int64), counts, recv_counts)


def reduce_back(rows: torch.Tensor, hop: Hop, num_local: int) -> torch.Tensor:
    """Sum returned rows (aligned with hop.send_index) into f32 [num_local, W], peer by peer in rank order."""
    acc = torch.zeros((num_local, rows.shape[1]), dtype=torch.float32, device=rows.device)
    start = 0
    for c in hop.send_counts:
        if c:
            acc.index_add_(0, hop.send_index[start:start + c], rows[start:start + c].to(torch.float32))
        start += c
    return acc
