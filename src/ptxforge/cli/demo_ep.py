"""The expert-parallel section of `ptxforge demo`: the FP8 quantization kernel on the emulator, then a 4-rank
gloo dispatch/combine of a small MoE layer with the bytes FP8 saves and its accuracy against BF16. Needs torch
(`ptxforge demo` imports this module only when torch is installed)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

import ptxforge.ep as deep_ep
from ptxforge.ep.spawn import run_ranks
from ptxforge.ep.testing import calc_diff, moe_reference
from ptxforge.kernels import fp8, ops

RANKS, TOKENS, HIDDEN, EXPERTS, TOPK = 4, 64, 512, 16, 4


def _section(title: str) -> None:
    print(f"\n== {title}")


def expert_parallel() -> bool:
    return _quantize() & _dispatch_combine()


def _quantize() -> bool:
    _section("FP8 quantization kernel (DeepSeek's 1x128 tiles), on the CPU emulator")
    x = (torch.randn((4, 7168)) * 3).to(torch.bfloat16)
    ok = True
    for round_scale, name in ((False, "f32 scales"), (True, "power-of-two (UE8M0) scales")):
        t0 = time.perf_counter()
        q, s = ops.per_token_cast_to_fp8(x, round_scale=round_scale, device="emu")
        took = time.perf_counter() - t0
        ref_q, ref_s, _ = fp8.per_token_quant_ref(ops._np(x), round_scale)
        same = np.array_equal(q.view(torch.uint8).numpy(), ref_q) and np.array_equal(s.numpy(), ref_s)
        ok &= same
        print(f"4x7168 bf16 -> e4m3 + {name:<28} {'bit-exact with numpy' if same else 'MISMATCH'}  {took:.2f} s")
    return ok


def _rank(rank: int, world: int, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, q: torch.Tensor,
          s: torch.Tensor) -> dict[str, Any]:
    """One rank: route its tokens to the experts' ranks (BF16, then FP8), run its experts, combine."""
    experts = _experts()
    epr = EXPERTS // world
    mine = experts[rank * epr:(rank + 1) * epr]
    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, EXPERTS)
    lay = dict(num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte, topk_idx=idx,
               topk_weights=w)

    def moe(payload):
        recv, ridx, rw, _, handle, _ = buf.dispatch(payload, **lay)
        if isinstance(recv, tuple):  # DeepEP's cast back (bit-identical to the dequant kernel, see tests/kernels)
            rq, rs = recv
            recv = (rq.float().view(rq.shape[0], -1, 128) * rs.unsqueeze(2)).view(rq.shape).to(torch.bfloat16)
        y = moe_reference(recv, ridx, rw, mine)  # this rank's experts on what it received
        return buf.combine(y, handle)[0]

    ref = moe_reference(x, idx, w, experts)
    out16, out8 = moe(x), moe((q, s))
    st16, st8 = buf.stats()[0], buf.stats()[2]
    wire = lambda st: st.intra_node_sent.payload + st.intra_node_sent.scales  # noqa: E731
    return {"bf16": calc_diff(out16, ref), "fp8": calc_diff(out8, ref), "bytes16": wire(st16),
            "bytes8": wire(st8)}


def _rank_of(rank: int, world: int, per_rank: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    return _rank(rank, world, *per_rank[rank])


def _experts() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return (torch.randn((EXPERTS, HIDDEN, HIDDEN), generator=g) / HIDDEN ** 0.5).to(torch.bfloat16)


def _dispatch_combine() -> bool:
    _section(f"expert parallelism: {RANKS} gloo processes, DeepEP's Buffer API (ptxforge.ep), a {EXPERTS}-expert "
             f"MoE layer, top-{TOPK} DeepSeek-V3 routing")
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(10)
    x = torch.randn((RANKS * TOKENS, HIDDEN), generator=g).to(torch.bfloat16)
    # every rank's routing and FP8 quantization by the DSL kernels (here, once, on the emulator)
    idx, w = ops.route(torch.randn((RANKS * TOKENS, EXPERTS), generator=g), torch.zeros(EXPERTS), n_group=RANKS,
                       topk_group=2, topk=TOPK, device="emu")
    q, s = ops.per_token_cast_to_fp8(x, round_scale=True, device="emu")
    part = lambda t, r: t[r * TOKENS:(r + 1) * TOKENS].clone()  # noqa: E731
    per_rank = [tuple(part(t, r) for t in (x, idx, w, q, s)) for r in range(RANKS)]
    print(f"routing ({RANKS * TOKENS} tokens, groups = ranks, at most 2 a token) and FP8 quantization: DSL kernels "
          f"on the emulator, {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    res = run_ranks(_rank_of, RANKS, per_rank, timeout_s=120)
    took = time.perf_counter() - t0
    b16, b8 = sum(r["bytes16"] for r in res), sum(r["bytes8"] for r in res)
    d16, d8 = max(r["bf16"] for r in res), max(r["fp8"] for r in res)
    print(f"dispatch bytes on the wire, all ranks: BF16 {b16:,}  FP8 + scales {b8:,} ({100 * b8 / b16:.1f}%, "
          f"saves {b16 - b8:,})")
    print(f"MoE output vs a single-process reference (calc_diff): BF16 dispatch {d16:.1e} (DeepEP's bar 5e-6), "
          f"FP8 dispatch {d8:.1e}")
    print(f"({took:.1f} s including starting {RANKS} processes)")
    return d16 < 5e-6 and d8 < 2e-3 and b8 <= 0.53 * b16
