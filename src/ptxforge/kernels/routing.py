# mypy: disable-error-code="valid-type"
# (kernel parameters are annotated with PTX types, `u32` and `ptr(f32)`: DSL values, not Python types)
"""DeepSeek-V3 routing (group-limited, auxiliary-loss-free top-k) as a DSL kernel, with its numpy reference.

Per token: s = sigmoid(logits); the biased score b = s + bias picks experts, s weighs them. The experts form
`n_group` equal groups; a group's score is the sum of its two largest biased scores; the best `topk_group`
groups are kept (this bounds a token to that many nodes when a group is a node), then the `topk` experts with
the largest biased scores inside them. Weights are the unbiased scores of the chosen experts divided by their
sum (in selection order) and multiplied by `routed_scaling_factor`. Ties go to the lower index.

sigmoid is 1 / (1 + 2^(-z * log2 e)) with `ex2.approx.f32` and `rcp.rn.f32`: the emulator rounds ex2
correctly, which the reference mirrors; a GPU's ex2 is within 2 ulp, so GPU weights may differ in the last
bits (and the choice only at a near-tie).

One thread per token (the kernel is the executable specification, not a fast router).
"""

from __future__ import annotations

import numpy as np

from ptxforge.dsl import (
    add,
    and_,
    ctaid,
    div,
    ex2,
    f32,
    if_,
    kernel,
    ld,
    mad,
    mul,
    ntid,
    ptr,
    range_,
    rcp,
    reg,
    s32,
    selp,
    shl,
    shr,
    st,
    tid,
    u32,
)

NEG_LOG2E = -1.4426950408889634
NEG_INF = float("-inf")


def _fmax(a, b):
    return selp(b, a, b > a)


@kernel(arch="sm_80")
def route(logits: ptr(f32), bias: ptr(f32), scores: ptr(f32), work: ptr(f32), topk_idx: ptr(s32),
          topk_w: ptr(f32), tokens: u32, E: int = 256, N_GROUP: int = 8, TOPK_GROUP: int = 4, TOPK: int = 8,
          SCALE: float = 2.5) -> None:
    t = mad(ctaid.x, ntid.x, tid.x)
    size = E // N_GROUP
    with if_(t < tokens):
        row = t * E
        for e in range_(0, E):
            s = rcp(add(ex2(mul(ld(logits[row + e]), NEG_LOG2E)), 1.0))
            st(scores[row + e], s)
            st(work[row + e], add(s, ld(bias[e])))
        group_score = []
        for g in range(N_GROUP):  # the sum of each group's two largest biased scores
            m1, m2 = reg.f32(NEG_INF), reg.f32(NEG_INF)
            for j in range_(g * size, (g + 1) * size):
                v = ld(work[row + j])
                above = v > m1
                selp(m1, _fmax(m2, v), above, out=m2)
                selp(v, m1, above, out=m1)
            group_score.append(add(m1, m2))
        keep = reg.u32(0)  # bit g: group g is kept
        for _ in range(TOPK_GROUP):
            best, pick = reg.f32(NEG_INF), reg.u32(0)
            for g in range(N_GROUP):
                better = (group_score[g] > best) & (and_(keep, 1 << g) == 0)
                selp(group_score[g], best, better, out=best)
                selp(g, pick, better, out=pick)
            keep |= shl(1, pick, type=u32)
        total = reg.f32(0.0)
        for k in range(TOPK):
            best, pick = reg.f32(NEG_INF), reg.u32(0)
            for e in range_(0, E):
                v = ld(work[row + e])
                better = (v > best) & (and_(shr(keep, div(e, size)), 1) != 0)
                selp(v, best, better, out=best)
                selp(e, pick, better, out=pick)
            st(work[row + pick], NEG_INF)
            st(topk_idx[t * TOPK + k], pick.view(s32))
            w = ld(scores[row + pick])
            st(topk_w[t * TOPK + k], w)
            add(total, w, out=total)
        for k in range(TOPK):
            st(topk_w[t * TOPK + k], mul(div(ld(topk_w[t * TOPK + k]), total), SCALE))


def _ex2_f32(t: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp2(t.astype(np.float64)).astype(np.float32)


def sigmoid_ref(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, np.float32)
    e = _ex2_f32((z * np.float32(NEG_LOG2E)).astype(np.float32))
    return (np.float32(1) / (e + np.float32(1)).astype(np.float32)).astype(np.float32)


def route_ref(logits: np.ndarray, bias: np.ndarray, n_group: int = 8, topk_group: int = 4, topk: int = 8,
              routed_scaling_factor: float = 2.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(topk_idx int32 [T, topk] in selection order, weights f32 [T, topk], scores f32 [T, E])."""
    s = sigmoid_ref(logits)
    idx, w = select_experts(s, bias, n_group, topk_group, topk, routed_scaling_factor)
    return idx, w, s


def select_experts(scores: np.ndarray, bias: np.ndarray | None = None, n_group: int = 8, topk_group: int = 4,
                   topk: int = 8, routed_scaling_factor: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's choice and weights from sigmoid `scores` [T, E] (f32), in numpy: (topk_idx int32 [T, topk]
    in selection order, weights f32 [T, topk]). Fast enough for planning on thousands of tokens."""
    s = np.asarray(scores, np.float32)
    t_, e_ = s.shape
    size = e_ // n_group
    b = s if bias is None else (s + np.asarray(bias, np.float32)).astype(np.float32)
    top2 = -np.sort(-b.reshape(t_, n_group, size), axis=-1)[..., :2]
    group_score = (top2[..., 0] + top2[..., 1]).astype(np.float32)
    keep = np.zeros((t_, n_group), bool)
    for _ in range(topk_group):
        masked = np.where(keep, np.float32(NEG_INF), group_score)
        keep[np.arange(t_), np.argmax(masked, axis=1)] = True
    work = np.where(np.repeat(keep, size, axis=1), b, np.float32(NEG_INF)).astype(np.float32)
    idx = np.zeros((t_, topk), np.int32)
    for k in range(topk):
        idx[:, k] = np.argmax(work, axis=1)
        work[np.arange(t_), idx[:, k]] = NEG_INF
    w = np.take_along_axis(s, idx, axis=1)
    total = np.zeros(t_, np.float32)
    for k in range(topk):
        total = (total + w[:, k]).astype(np.float32)
    w = ((w / total[:, None]).astype(np.float32) * np.float32(routed_scaling_factor)).astype(np.float32)
    return idx, w
