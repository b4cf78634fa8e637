"""Bytes per link against `ptxforge plan --routing`: one routing, the planner's prediction for it, and the check
that a rank's measured bytes equal it within 1%; shared by the one-process cluster test
(test_ep_internode_kernels.py, the scale-out link: the NIC model) and the Buffer world across processes
(test_ep_kernels_internode.py: the NIC model and the stores counted into peers' memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from ep_checks import E

from ptxforge.kernels.internode_layout import CombineSlot, DispatchSlot

TOKENS, HIDDEN, TOPK = 16, 512, 4


def torus_routing(nodes: int, gpus: int, tokens: int = TOKENS, k: int = TOPK, experts: int = E,
                  seed: int = 3) -> np.ndarray:
    """Top-k ids [R, T, k] where GPU (n, l) routes like GPU 0 with every destination moved by (n, l) on the
    nodes x gpus torus: every GPU sends and receives the same volume (imbalance 1)."""
    ranks, epr = nodes * gpus, experts // (nodes * gpus)
    rng = np.random.default_rng(seed)
    base = np.stack([rng.choice(experts, k, replace=False) for _ in range(tokens)])
    out = []
    for r in range(ranks):
        d, o = base // epr, base % epr
        moved = ((d // gpus + r // gpus) % nodes) * gpus + (d % gpus + r % gpus) % gpus
        out.append(moved * epr + o)
    return np.stack(out).astype(np.int64)


def slots(gpus: int, hidden: int = HIDDEN, k: int = TOPK) -> tuple[int, int]:
    """Bytes of one BF16 dispatch slot (payload, top-k ids and weights, source and per-GPU rows) and one combine
    slot (payload and weights): what the kernels send per token copy."""
    return DispatchSlot(2 * hidden, 0, k, True, gpus).nbytes, CombineSlot(hidden, k).nbytes


def planned(tmp_path: Path, ids: np.ndarray, nodes: int, gpus: int, hidden: int = HIDDEN,
            k: int = TOPK) -> tuple[dict[str, float], dict[str, float]]:
    """`ptxforge plan --routing` on `ids` for the kernels' slots: (dispatch, combine) bytes per link name."""
    path = tmp_path / "routing.npy"
    np.save(path, ids)
    d_slot, c_slot = slots(gpus, hidden, k)

    def link_bytes(meta: int, phase: str) -> dict[str, float]:
        cmd = [sys.executable, "-m", "ptxforge", "plan", "--routing", str(path), "--json", "--nodes", str(nodes),
               "--gpus-per-node", str(gpus), "--tokens", str(ids.shape[1]), "--hidden", str(hidden),
               "--experts", str(E), "--top-k", str(k), "--dispatch-dtype", "bf16", "--meta-bytes", str(meta)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
        return json.loads(out)[phase]["link_bytes"]

    return link_bytes(d_slot - 2 * hidden, "dispatch"), link_bytes(c_slot - 2 * hidden, "combine")


def assert_as_planned(rank: int, measured: dict[str, int], plan: dict[str, float]) -> None:
    """Each link kind's bytes `measured` on `rank` ("rdma": the planner's "ib", "nvlink") within 1% of `plan`."""
    assert measured, rank
    for kind, got in measured.items():
        want = plan["ib" if kind == "rdma" else kind]
        assert abs(got / want - 1) < 0.01, (rank, kind, got, want)
