"""Routing for the planner: DeepSeek-V3's group-limited top-k (numpy), generated scores, routing files, and
the statistics the cost model uses in place of its average-case formulas.

`group_limited_topk` has the semantics of DeepSeek-V3's gate: sigmoid scores s, a per-expert bias added
only to choose; experts form `n_group` groups, each scored by the sum of its top-2 biased scores; the best
`topk_group` groups are kept, then the top_k experts by biased score among them; weights are the unbiased
s of the chosen experts normalized to sum 1, times `routed_scaling`; the choice and weights are those of
the routing kernel (`ptxforge.kernels.routing.select_experts`, its numpy twin), checked here for sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ptxforge import _optional
from ptxforge.kernels.routing import select_experts

if TYPE_CHECKING:
    from ptxforge.plan.params import Params


def group_limited_topk(scores: np.ndarray, bias: np.ndarray | None = None, n_group: int = 8,
                       topk_group: int = 4, top_k: int = 8,
                       routed_scaling: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    """(topk_ids [T, k] int64, weights [T, k] float32) for sigmoid `scores` [T, E]."""
    s = np.asarray(scores, np.float32)
    T, E = s.shape
    if E % n_group:
        raise ValueError(f"{E} experts do not split into {n_group} groups")
    if not 0 < topk_group <= n_group:
        raise ValueError(f"topk_group must lie in 1..{n_group} (the number of groups), got {topk_group}")
    if top_k > topk_group * (E // n_group):
        raise ValueError(f"top_k={top_k} of topk_group={topk_group} groups of {E // n_group} is impossible")
    ids, w = select_experts(s, bias, n_group, topk_group, top_k, routed_scaling)
    return ids.astype(np.int64), w


def generate_scores(tokens: int, experts: int, kind: str = "random", seed: int = 0) -> np.ndarray:
    """Sigmoid affinities: "random" (i.i.d. logits) or "skewed" (each expert's popularity drawn once,
    log-normal-like, so a few experts and nodes are hot)."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((tokens, experts)).astype(np.float32)
    if kind == "skewed":
        logits += 1.5 * rng.standard_normal(experts).astype(np.float32)
    elif kind != "random":
        raise ValueError(f"unknown score kind {kind!r}; choose random or skewed")
    return 1 / (1 + np.exp(-logits))


def load_topk_ids(path: str | Path) -> np.ndarray:
    """Top-k expert ids from a .npy or .pt file: [T, k] (tokens of one GPU) or [R, T, k] (every GPU)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if path.suffix == ".npy":
        try:
            ids = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise ValueError(f"{path}: not a readable .npy array ({e})") from None
    elif path.suffix in (".pt", ".pth"):
        try:
            torch = _optional.torch()
        except ImportError:
            raise ValueError(f"{path}: reading .pt files needs torch") from None
        try:
            t = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises several kinds (pickle, zip, runtime) for a bad file
            raise ValueError(f"{path}: not a readable torch file ({type(e).__name__}: {e})") from None
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{path}: expected one tensor of top-k ids, got {type(t).__name__}")
        ids = t.numpy()
    else:
        raise ValueError(f"{path}: expected a .npy or .pt file of top-k expert ids")
    if ids.ndim not in (2, 3) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{path}: expected integer ids of shape [T, k] or [R, T, k], got {ids.dtype} {ids.shape}")
    return ids


@dataclass(frozen=True)
class RoutingStats:
    """What a routing sends: per token averages and per-destination loads (busiest / mean)."""

    tokens: int
    nodes_per_token: float         # distinct nodes reached
    remote_nodes_per_token: float  # of which not the token's own node: scale-out copies
    gpus_per_node_copy: float      # distinct GPUs per (token, node) it reaches
    nvlink_copies_per_token: float  # of all GPUs reached, those not at the source's local index: NVLink copies
    experts_per_node_copy: float
    remote_expert_copies: float    # remote (token, expert) pairs per token: scale-out copies without dedup
    tokens_per_node: np.ndarray    # node copies received per node
    copies_per_gpu: np.ndarray     # (token, GPU) copies received per GPU
    imbalance_node: float
    imbalance_gpu: float

    @property
    def saved_fraction(self) -> float:
        """Share of remote expert copies that node-level dedup keeps off the scale-out link."""
        if not self.remote_expert_copies:
            return 0.0
        return 1 - self.remote_nodes_per_token / self.remote_expert_copies

    def as_dict(self) -> dict:
        return {"tokens": self.tokens, "nodes_per_token": self.nodes_per_token,
                "remote_nodes_per_token": self.remote_nodes_per_token,
                "gpus_per_node_copy": self.gpus_per_node_copy,
                "nvlink_copies_per_token": self.nvlink_copies_per_token,
                "experts_per_node_copy": self.experts_per_node_copy,
                "remote_expert_copies": self.remote_expert_copies, "saved_fraction": self.saved_fraction,
                "tokens_per_node": self.tokens_per_node.tolist(), "imbalance_node": self.imbalance_node,
                "imbalance_gpu": self.imbalance_gpu}


def routing_stats(topk_ids: np.ndarray, experts: int, gpus_per_node: int, nodes: int) -> RoutingStats:
    """Statistics of `topk_ids` ([T, k] from GPU 0, or [R, T, k] from GPU r) on nodes x gpus_per_node GPUs
    holding experts/(GPUs) consecutive experts each."""
    ids = np.asarray(topk_ids)
    if ids.ndim == 2:
        ids = ids[None]
    R, T, k = ids.shape
    gpus = gpus_per_node * nodes
    if R not in (1, gpus):
        raise ValueError(f"routing has {R} source GPUs; expected 1 or {gpus}")
    if ids.min() < 0 or ids.max() >= experts:
        raise ValueError(f"expert ids must lie in [0, {experts}), got {ids.min()}..{ids.max()}")
    per_gpu = experts // gpus
    gpu = ids // per_gpu                      # [R, T, k]
    node = gpu // gpus_per_node
    src_node = (np.arange(R) // gpus_per_node)[:, None]
    flat_t = R * T
    node_hit = np.zeros((flat_t, nodes), bool)
    np.put_along_axis(node_hit, node.reshape(flat_t, k), True, axis=-1)
    gpu_hit = np.zeros((flat_t, gpus), bool)
    np.put_along_axis(gpu_hit, gpu.reshape(flat_t, k), True, axis=-1)
    own = np.repeat(src_node, T, axis=0).reshape(flat_t)
    # the token reaches a node's GPU with its own local index over the scale-out link (or is there already):
    # that GPU forwards it over NVLink to the others it wants, keeping its own copy in its own memory
    src_local = np.repeat(np.arange(R) % gpus_per_node, T)
    nvl_hit = gpu_hit.reshape(flat_t, nodes, gpus_per_node).copy()
    nvl_hit[np.arange(flat_t), :, src_local] = False
    nodes_per = node_hit.sum(1)
    remote_nodes = nodes_per - node_hit[np.arange(flat_t), own]
    remote_pairs = (node.reshape(flat_t, k) != own[:, None]).sum(1)
    tokens_per_node = node_hit.sum(0).astype(float)
    copies_per_gpu = gpu_hit.sum(0).astype(float)
    return RoutingStats(
        tokens=flat_t, nodes_per_token=float(nodes_per.mean()), remote_nodes_per_token=float(remote_nodes.mean()),
        gpus_per_node_copy=float(gpu_hit.sum() / node_hit.sum()),
        nvlink_copies_per_token=float(nvl_hit.sum() / flat_t), experts_per_node_copy=float(k / nodes_per.mean()),
        remote_expert_copies=float(remote_pairs.mean()), tokens_per_node=tokens_per_node,
        copies_per_gpu=copies_per_gpu, imbalance_node=float(tokens_per_node.max() / tokens_per_node.mean()),
        imbalance_gpu=float(copies_per_gpu.max() / copies_per_gpu.mean()))


def apply(params: Params, stats: RoutingStats) -> Params:
    """`params` with the routing's measured copies and imbalance in place of the formulas."""
    remote = stats.remote_nodes_per_token / stats.nodes_per_token if stats.nodes_per_token else 0.0
    return params.with_(nodes_per_token=stats.nodes_per_token, remote_fraction=remote or 0.0,
                        experts_per_node=stats.gpus_per_node_copy, nvlink_copies=stats.nvlink_copies_per_token,
                        imbalance=stats.imbalance_gpu)
