# mypy: disable-error-code="valid-type"
# (kernel parameters are annotated with PTX types, `u32` and `ptr(f32)`: DSL values, not Python types)
"""The dispatch layout and permutation by expert, as DSL kernels with their numpy references.

- `dispatch_layout` (one thread per token): tokens per expert, the token-in-rank map (a token goes to a rank
  once however many of its experts live there), tokens per rank and tokens per node ("RDMA rank"), as
  DeepEP's `get_dispatch_layout`. Experts are laid out contiguously: expert e lives on rank e // (E / R),
  rank r on node r // ranks_per_node. An id of -1 selects nothing.
- `expert_positions` (one thread per expert): the row each (token, k) takes when the copies are grouped by
  expert, in (token, k) order within an expert (-1 where topk_idx is -1), and each expert's first row.
- `gather_rows` (one block per (token, k)): the permuted copy of the rows; rows are moved as 32-bit words,
  so any dtype whose row is a multiple of 4 bytes (bf16, e4m3 plus its scales) permutes bit-exactly.
- `unpermute` (one block per token): out[t] = bf16(sum_k w[t, k] * f32(y[pos[t, k]])), accumulated in f32 in
  k order (weights optional).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ptxforge.dsl import (
    add,
    atom,
    bf16,
    ctaid,
    cvt,
    f32,
    if_,
    kernel,
    ld,
    mad,
    mul,
    ntid,
    or_,
    ptr,
    range_,
    reg,
    s32,
    st,
    tid,
    u8,
    u32,
)

BLOCK = 128


@kernel(arch="sm_80")
def dispatch_layout(topk_idx: ptr(s32), per_rank: ptr(u32), per_expert: ptr(u32), per_node: ptr(u32),
                    in_rank: ptr(u8), tokens: u32, TOPK: int = 8, RANKS: int = 8, EXPERTS_PER_RANK: int = 32,
                    RANKS_PER_NODE: int = 8) -> None:
    t = mad(ctaid.x, ntid.x, tid.x)
    with if_(t < tokens):
        for k in range(TOPK):
            e = ld(topk_idx[t * TOPK + k])
            with if_(e >= 0):
                atom("add", per_expert[e], 1)
                st(in_rank[mad(t, RANKS, e.view(u32) // EXPERTS_PER_RANK)], cvt(reg.u32(1), u8))
        for node in range(RANKS // RANKS_PER_NODE):
            any_ = reg.u32(0)
            for r in range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE):
                f = cvt(ld(in_rank[t * RANKS + r]), u32)
                with if_(f != 0):
                    atom("add", per_rank[r], 1)
                or_(any_, f, out=any_)
            with if_(any_ != 0):
                atom("add", per_node[node], 1)


@kernel(arch="sm_80")
def expert_positions(topk_idx: ptr(s32), pos: ptr(s32), first_row: ptr(u32), slots: u32, experts: u32) -> None:
    """pos must come in filled with -1; first_row has experts + 1 entries."""
    e = mad(ctaid.x, ntid.x, tid.x)
    with if_(e < experts):
        es = e.view(s32)
        n = reg.u32(0)
        for i in range_(0, slots):
            v = ld(topk_idx[i])
            with if_((v >= 0) & (v < es)):
                add(n, 1, out=n)
        st(first_row[e], n)
        for i in range_(0, slots):
            with if_(ld(topk_idx[i]) == es):
                st(pos[i], n.view(s32))
                add(n, 1, out=n)
        with if_(e == experts - 1):
            st(first_row[experts], n)


@kernel(arch="sm_80")
def gather_rows(x: ptr(u32), pos: ptr(s32), out: ptr(u32), words: u32, TOPK: int = 8) -> None:
    """Block b copies row b // TOPK of x (`words` 32-bit words) to row pos[b] of out."""
    slot = ctaid.x
    p = ld(pos[slot])
    with if_(p >= 0):
        src = (slot // TOPK) * words
        dst = p.view(u32) * words
        for w in range_(tid.x, words, BLOCK):
            st(out[dst + w], ld(x[src + w]))


@kernel(arch="sm_80")
def unpermute(y: ptr(bf16), pos: ptr(s32), weights: ptr(f32), out: ptr(bf16), hidden: u32, TOPK: int = 8,
              weighted: bool = True) -> None:
    t = ctaid.x
    for c in range_(tid.x, hidden, BLOCK):
        acc = reg.f32(0.0)
        for k in range(TOPK):
            p = ld(pos[t * TOPK + k])
            with if_(p >= 0):
                v = cvt(ld(y[mad(p.view(u32), hidden, c)]), f32)
                if weighted:
                    v = mul(v, ld(weights[t * TOPK + k]))
                add(acc, v, out=acc)
        st(out[mad(t, hidden, c)], cvt(acc, bf16))


unpermute_unweighted = unpermute.specialize(weighted=False)


# --------------------------------------------------------------------------- numpy references

def dispatch_layout_ref(topk_idx: np.ndarray, num_experts: int, num_ranks: int,
                        ranks_per_node: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(per rank int32 [R], per node int32 [N], per expert int32 [E], in_rank bool [T, R])."""
    idx = np.asarray(topk_idx).astype(np.int64)
    t_ = idx.shape[0]
    per_expert = np.bincount(idx[idx >= 0], minlength=num_experts).astype(np.int32)
    in_rank = np.zeros((t_, num_ranks), bool)
    rows, cols = np.nonzero(idx >= 0)
    in_rank[rows, idx[rows, cols] // (num_experts // num_ranks)] = True
    per_rank = in_rank.sum(0).astype(np.int32)
    rpn = ranks_per_node or num_ranks
    per_node = in_rank.reshape(t_, num_ranks // rpn, rpn).any(-1).sum(0).astype(np.int32)
    return per_rank, per_node, per_expert, in_rank


def expert_positions_ref(topk_idx: np.ndarray, num_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """(pos int32 [T, K], first_row int64 [E + 1]): a stable sort of the (token, k) copies by expert."""
    flat = np.asarray(topk_idx).astype(np.int64).reshape(-1)
    valid = np.nonzero(flat >= 0)[0]
    order = valid[np.argsort(flat[valid], kind="stable")]
    pos = np.full(flat.shape, -1, np.int32)
    pos[order] = np.arange(order.size, dtype=np.int32)
    counts = np.bincount(flat[valid], minlength=num_experts)
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return pos.reshape(np.shape(topk_idx)), first


def gather_rows_ref(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """out[pos[t, k]] = x[t] for every pos >= 0."""
    pos = np.asarray(pos)
    out = np.zeros((int((pos >= 0).sum()),) + x.shape[1:], x.dtype)
    t_idx, _ = np.nonzero(pos >= 0)
    out[pos[pos >= 0]] = x[t_idx]
    return out


def unpermute_ref(y: np.ndarray, pos: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    pos = np.asarray(pos)
    acc = np.zeros((pos.shape[0], y.shape[1]), np.float32)
    yf = np.asarray(y).astype(np.float32)
    for k in range(pos.shape[1]):
        sel = pos[:, k] >= 0
        v = yf[pos[sel, k]]
        if weights is not None:
            v = (v * np.asarray(weights, np.float32)[sel, k][:, None]).astype(np.float32)
        acc[sel] = (acc[sel] + v).astype(np.float32)
    return acc.astype(ml_dtypes.bfloat16)
