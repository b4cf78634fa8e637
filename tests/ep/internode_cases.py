"""Inputs and a numpy reference of DeepEP's internode contract for the internode kernels on one Cluster.

Rows encode their source rank and token (`ep_checks.encoded_x`); the reference orders received rows by
source rank, then source token, and combines as the torch backend does across nodes: each node's copies
summed in f32 in local-rank order and rounded to BF16 (the one scale-out copy), then the nodes' copies
summed in f32 in node order plus the biases, rounded to BF16; weights summed in f32 the same way.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
from ep_checks import E, H, T, encoded_x, random_topk

BF16 = ml_dtypes.bfloat16


def inputs(rank: int, form: str, tokens: int = T, hidden: int = H, experts: int = E, empty: bool = False):
    """(x bytes uint8 [T, x_bytes], scales u32 [T, words] or None, topk int64 [T, K], weights f32 [T, K])."""
    idx, w = random_topk(rank, tokens, experts)
    idx, w = idx.numpy(), w.numpy()
    if empty:  # this rank sends nothing
        idx = np.full_like(idx, -1)
    if form == "bf16":
        x = encoded_x(rank, tokens, hidden).view(torch.int16).numpy().view(np.uint8).reshape(tokens, 2 * hidden)
        return x, None, idx, w
    from ptxforge.kernels import fp8

    g = torch.Generator().manual_seed(50 + rank)
    xr = torch.randn((tokens, hidden), generator=g).to(torch.bfloat16)
    xr[:, 0], xr[:, 1] = rank, torch.arange(tokens) % 32
    q, sf, _ = fp8.per_token_quant_ref(xr.view(torch.int16).numpy().view(BF16), True)
    if form == "fp8-ue8m0":
        e = (sf.view(np.uint32) >> 23).astype(np.uint32).reshape(tokens, -1)  # the exponent byte of each 2^k
        pad = -e.shape[1] % 4
        e = np.pad(e, ((0, 0), (0, pad)))
        packed = e[:, 0::4] | (e[:, 1::4] << 8) | (e[:, 2::4] << 16) | (e[:, 3::4] << 24)
        return q.view(np.uint8), packed.astype(np.uint32), idx, w
    return q.view(np.uint8), sf.view(np.uint32), idx, w


def in_rank_of(idx: np.ndarray, ranks: int, experts: int) -> np.ndarray:
    out = np.zeros((idx.shape[0], ranks), bool)
    rows, cols = np.nonzero(idx >= 0)
    out[rows, idx[rows, cols] // (experts // ranks)] = True
    return out


def dispatch_reference(ins: list, ranks: int, experts: int) -> list[dict]:
    """Per destination rank: what it receives (rows by source rank, then token)."""
    epr = experts // ranks
    out = []
    for d in range(ranks):
        xs, sc, ids, ws, src = [], [], [], [], []
        for s in range(ranks):
            x, scales, idx, w = ins[s]
            toks = np.flatnonzero(in_rank_of(idx, ranks, experts)[:, d])
            xs.append(x[toks])
            if scales is not None:
                sc.append(scales[toks])
            mine = (idx[toks] >= d * epr) & (idx[toks] < (d + 1) * epr)
            ids.append(np.where(mine, idx[toks] - d * epr, -1))
            ws.append(np.where(mine, w[toks], np.float32(0)))
            src.append(toks.astype(np.int32))
        counts = np.zeros(epr, np.int32)
        for s in range(ranks):
            idx = ins[s][2]
            for e in range(epr):
                counts[e] += int((idx == d * epr + e).sum())
        out.append({"recv_x": np.concatenate(xs), "recv_scales": np.concatenate(sc) if sc else None,
                    "recv_idx": np.concatenate(ids), "recv_w": np.concatenate(ws), "recv_src": np.concatenate(src),
                    "expert_counts": counts})
    return out


def expert_out(recv_x: np.ndarray, rank: int, form: str) -> np.ndarray:
    """What the experts return: bf16 rows, deterministic per rank (FP8 rows reinterpreted, then scaled)."""
    if form == "bf16":
        v = recv_x.view(BF16).astype(np.float32)
    else:
        v = recv_x.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return (v * 0.5 + rank).astype(BF16)


def combine_reference(ins: list, ys: list[np.ndarray], ws: list[np.ndarray] | None, biases: list | None, nodes: int,
                      gpus: int, experts: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per source rank: (bf16 [T, H], f32 [T, K] or None), summed per node then over nodes (module docstring)."""
    ranks = nodes * gpus
    rows_of = {}  # (dest, source) -> first row
    for d in range(ranks):
        at = 0
        for s in range(ranks):
            rows_of[d, s] = at
            at += int(in_rank_of(ins[s][2], ranks, experts)[:, d].sum())
    out = []
    for s in range(ranks):
        in_rank = in_rank_of(ins[s][2], ranks, experts)
        t_, h = in_rank.shape[0], ys[0].shape[1]
        pos = np.cumsum(in_rank, axis=0) - 1  # the token's index among those s sends each rank
        acc = np.zeros((t_, h), np.float32)
        accw = np.zeros((t_, ws[0].shape[1]), np.float32) if ws is not None else None
        for n in range(nodes):
            node_sum = np.zeros((t_, h), np.float32)
            node_w = np.zeros_like(accw) if accw is not None else None
            for j in range(gpus):
                d = n * gpus + j
                toks = np.flatnonzero(in_rank[:, d])
                rows = rows_of[d, s] + pos[toks, d]
                node_sum[toks] += ys[d][rows].astype(np.float32)
                if node_w is not None:
                    node_w[toks] += ws[d][rows]
            reached = in_rank[:, n * gpus:(n + 1) * gpus].any(1)
            acc[reached] += node_sum[reached].astype(BF16).astype(np.float32)
            if accw is not None:
                accw[reached] += node_w[reached]
        for b in (biases[s] if biases is not None else ()):
            acc += b.astype(np.float32)
        out.append((acc.astype(BF16), accw))
    return out


def same_bits(a: np.ndarray | None, b: np.ndarray | None, where: str) -> None:
    if a is None or b is None:
        assert a is None and b is None, f"{where}: {a is None} vs {b is None}"
        return
    assert a.shape == b.shape, f"{where}: shape {b.shape}, wanted {a.shape}"
    assert a.dtype.itemsize == b.dtype.itemsize
    bad = np.flatnonzero(np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0] if a.ndim else 1, -1)
                         != np.ascontiguousarray(b).view(np.uint8).reshape(b.shape[0] if b.ndim else 1, -1))
    assert bad.size == 0, f"{where}: bits differ (first flat byte {bad[:4]})"
