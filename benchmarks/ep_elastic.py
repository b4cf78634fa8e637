"""DeepEP V2's ElasticBuffer on 4 gloo ranks next to the normal-mode Buffer it runs on, measured in the same run:
what V2's API costs on top (its agreement collective, the expand layout, the handle's fields).

Per call (median over iterations, the slowest rank, seconds of wall time): Buffer dispatch + combine (BF16), and
ElasticBuffer dispatch + combine in the plain layout, in the expand layout (alignment 128), and a cached dispatch.
The experts' output stands in for them: the received rows themselves (the expand layout's summed per token).
One intra-op thread per rank.
Usage: python benchmarks/ep_elastic.py [--tokens 256] [--hidden 7168] [--experts 64] [--topk 8] [--iters 10]
       [--append]   (--append: adds the table to benchmarks/RESULTS.md)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

from ep_bench import RESULTS, median_time, moe_inputs

WORLD = 4



def bench_rank(rank, world, tokens, hidden, experts, topk, iters):

    import ptxforge.ep as deep_ep

    x, idx, w = moe_inputs(rank, tokens, hidden, experts, topk)
    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world)
    el = deep_ep.ElasticBuffer(None, num_max_tokens_per_rank=tokens, hidden=hidden, num_topk=topk)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, experts)

    def normal():
        recv, _, rw, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                                 num_tokens_per_expert=nte, topk_idx=idx, topk_weights=w)
        return buf.combine(recv, handle, topk_weights=rw)[0]

    def elastic(do_expand):
        recv, _, rw, handle, _ = el.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=experts,
                                             do_expand=do_expand, expert_alignment=128 if do_expand else 1)
        return el.combine(recv, handle, topk_weights=rw)[0], handle

    _, handle = elastic(False)
    rows = {
        "Buffer dispatch + combine (the peer)": median_time(normal, iters),
        "ElasticBuffer dispatch + combine": median_time(lambda: elastic(False), iters),
        "ElasticBuffer expand dispatch + combine": median_time(lambda: elastic(True), iters),
        "ElasticBuffer cached dispatch": median_time(lambda: el.dispatch(x, handle=handle), iters),
    }
    same = bool(elastic(False)[0].equal(normal()))
    return {"rows": rows, "same": same, "expanded": elastic(True)[1].num_expanded_tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--append", action="store_true")
    a = ap.parse_args()
    from ptxforge.ep.spawn import run_ranks

    res = run_ranks(bench_rank, WORLD, a.tokens, a.hidden, a.experts, a.topk, a.iters, timeout_s=900)
    names = list(res[0]["rows"])
    slowest = {n: max(r["rows"][n] for r in res) for n in names}
    peer = slowest[names[0]]
    lines = [f"{WORLD} gloo ranks, {a.tokens} tokens x {a.hidden} BF16 per rank, top-{a.topk} of {a.experts} "
             f"experts, median of {a.iters}, slowest rank; expand rows per rank: "
             + ", ".join(str(r["expanded"]) for r in res)
             + f"; ElasticBuffer's combine equals Buffer's: {all(r['same'] for r in res)}", "",
             "| call | ms | vs Buffer |", "|---|---|---|"]
    lines += [f"| {n} | {slowest[n] * 1e3:.1f} | {slowest[n] / peer:.2f}x |" for n in names]
    text = "\n".join(lines)
    print(text)
    if a.append:
        head = (f"\n## {datetime.date.today()}: ElasticBuffer (DeepEP V2 API) over Buffer\n\n"
                f"`python benchmarks/ep_elastic.py --iters {a.iters}`; machine: {platform.machine()}, "
                f"{os.cpu_count()} cores, no GPU, under load from other jobs.\n\n")
        with RESULTS.open("a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
