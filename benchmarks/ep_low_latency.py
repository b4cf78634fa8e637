"""DeepEP's low-latency mode on 4 gloo ranks: per-call time and bytes of low_latency_dispatch (FP8) and
low_latency_combine for decode-sized batches, on both backends (torch's all_to_all; the low-latency kernels on
one emulated GPU per rank: one node of 4 IPC GPUs, and 2 nodes x 2 GPUs of an emulated cluster whose nodes
exchange RDMA puts through the NIC model), next to normal-mode dispatch + combine of the same tokens, in the
same run; and what the receive hook buys: a dispatch with `return_recv_hook=True`, a CPU matmul standing in for
the next micro-batch's attention, then `hook()`, against the two parts alone and one after the other (the
kernels backend's send and receive phases run on the device worker thread, the matmul on the caller's).

Times are medians over iterations of the slowest rank; one intra-op thread per rank. No GPU here: DeepEP's
published H800 figures (EP8, 128 tokens, hidden 7168, top-8: dispatch 77 us, combine 114 us) are the reference row.
Usage: python benchmarks/ep_low_latency.py [--tokens 128] [--hidden 7168] [--experts 64] [--topk 8] [--iters 10]
       [--kernel-iters 3] [--overlap-n 256] [--no-cluster] [--append]
       (--append adds the table to benchmarks/RESULTS.md; --no-cluster skips the 2 nodes x 2 GPUs run)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

from ep_bench import RESULTS, median_time, moe_inputs

WORLD = 4



def warm_kernels() -> None:
    """Import the kernels backend and trace the kernels this run specializes, before the ranks fork."""
    import ptxforge.ep.kernel_backend  # noqa: F401
    from ptxforge.ep.low_latency_rank import _special
    from ptxforge.kernels import low_latency as K

    for rdma in (False, True):
        _special(K.ll_dispatch_send, R=WORLD, FP8=True, ROUND=False, RDMA=rdma, BUG="").module()
        _special(K.ll_combine_send, R=WORLD, RDMA=rdma).module()
    _special(K.ll_dispatch_recv, R=WORLD, FP8=True, UE8M0=False).module()
    K.ll_combine_recv.module()


def bench_rank(rank, world, tokens, hidden, experts, topk, iters, overlap_n, backend, per_node=WORLD):
    import torch

    import ptxforge.ep as deep_ep

    x, idx, w = moe_inputs(rank, tokens, hidden, experts, topk)
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, world, experts)
    buf = deep_ep.Buffer(None, 0, hint, low_latency_mode=True, num_ranks_per_node=per_node, backend=backend,
                         timeout_s=600)
    state = {}

    def ll_dispatch():
        state["d"] = buf.low_latency_dispatch(x, idx, tokens, experts, use_fp8=True)

    def ll_combine():
        recv, _, handle, _, _ = state["d"]
        expert_out = torch.zeros(recv[0].shape, dtype=torch.bfloat16)
        buf.low_latency_combine(expert_out, idx, w, handle)

    def normal():
        recv, _, _, _, handle, _ = buf.dispatch(x, topk_idx=idx, topk_weights=w)
        buf.combine(recv, handle)

    buf.get_dispatch_layout(idx, experts)
    t_dispatch = median_time(ll_dispatch, iters)
    t_combine = median_time(ll_combine, iters)
    t_normal = median_time(normal, iters) if backend == "torch" else None  # the torch rows' peer
    buf.stats(reset=True)
    ll_dispatch()
    ll_combine()
    st = buf.stats()
    a, b = torch.randn((overlap_n, overlap_n)), torch.randn((overlap_n, overlap_n))
    one = median_time(lambda: a @ b, iters)
    # as much compute as one dispatch takes (the same count on every rank), so overlap can show
    reps = torch.tensor([max(1, round(t_dispatch / one))])
    torch.distributed.all_reduce(reps, op=torch.distributed.ReduceOp.MAX)

    def compute():
        for _ in range(int(reps)):
            a @ b

    # once more, from the loop's own time (the ranks' matmuls contend for the cores): about one dispatch
    reps = torch.tensor([max(1, round(int(reps) * t_dispatch / median_time(compute, 2)))])
    torch.distributed.all_reduce(reps, op=torch.distributed.ReduceOp.MAX)

    def apart():
        buf.low_latency_dispatch(x, idx, tokens, experts)
        compute()

    def together():
        _, _, _, _, hook = buf.low_latency_dispatch(x, idx, tokens, experts, return_recv_hook=True)
        compute()
        hook()

    def dispatch_alone():
        _, _, _, _, hook = buf.low_latency_dispatch(x, idx, tokens, experts, return_recv_hook=True)
        hook()

    t_compute = median_time(compute, iters)
    t_alone = median_time(dispatch_alone, iters)
    t_apart = median_time(apart, iters)
    t_together = median_time(together, iters)
    out = {"dispatch": t_dispatch, "combine": t_combine, "normal": t_normal, "compute": t_compute,
           "alone": t_alone, "apart": t_apart, "together": t_together, "dispatch_bytes": st[0].wire_sent,
           "combine_bytes": st[1].wire_sent, "reps": int(reps)}
    buf.destroy()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128, help="tokens per rank (num_max_dispatch_tokens_per_rank)")
    ap.add_argument("--hidden", type=int, default=7168, help="hidden size (a multiple of 128)")
    ap.add_argument("--experts", type=int, default=64, help="experts over the 4 ranks")
    ap.add_argument("--topk", type=int, default=8, help="experts each token selects")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations of the torch backend (median)")
    ap.add_argument("--kernel-iters", type=int, default=3, help="iterations of the kernels backend (emulated)")
    ap.add_argument("--overlap-n", type=int, default=256, help="size of the matmuls standing in for attention")
    ap.add_argument("--no-cluster", action="store_true", help="skip the kernels backend on 2 nodes x 2 GPUs")
    ap.add_argument("--append", action="store_true", help="append the tables to benchmarks/RESULTS.md")
    args = ap.parse_args()
    from ptxforge.ep.spawn import run_ranks

    runs = {"torch": run_ranks(bench_rank, WORLD, args.tokens, args.hidden, args.experts, args.topk, args.iters,
                               args.overlap_n, "torch", timeout_s=1200)}
    warm_kernels()
    runs["kernels"] = run_ranks(bench_rank, WORLD, args.tokens, args.hidden, args.experts, args.topk,
                                args.kernel_iters, args.overlap_n, "kernels", timeout_s=3000)
    configs = [("kernels", "kernels backend, 1 node x 4 (emulated IPC GPUs)")]
    if not args.no_cluster:
        runs["cluster"] = run_ranks(bench_rank, WORLD, args.tokens, args.hidden, args.experts, args.topk,
                                    args.kernel_iters, args.overlap_n, "kernels", WORLD // 2, timeout_s=3000)
        configs.append(("cluster", "kernels backend, 2 nodes x 2 (emulated cluster, RDMA puts between nodes)"))

    def slowest(key, backend="torch"):
        return max(r[key] for r in runs[backend])

    def mean_bytes(key, backend="torch"):
        return sum(r[key] for r in runs[backend]) / len(runs[backend])

    shape = f"{WORLD} ranks x {args.tokens} tokens x {args.hidden}, top-{args.topk} of {args.experts}"
    lines = [
        f"| call ({shape}) | time per call (slowest rank) | wire bytes per rank |",
        "|---|---|---|",
        f"| low_latency_dispatch, FP8 | {slowest('dispatch') * 1e3:.2f} ms | "
        f"{mean_bytes('dispatch_bytes') / 1e6:.2f} MB |",
        f"| low_latency_combine, BF16 | {slowest('combine') * 1e3:.2f} ms | "
        f"{mean_bytes('combine_bytes') / 1e6:.2f} MB |",
        *(f"| low_latency_dispatch, FP8, {name} | {slowest('dispatch', key) * 1e3:.2f} ms | "
          f"{mean_bytes('dispatch_bytes', key) / 1e6:.2f} MB |" for key, name in configs),
        *(f"| low_latency_combine, BF16, {name} | {slowest('combine', key) * 1e3:.2f} ms | "
          f"{mean_bytes('combine_bytes', key) / 1e6:.2f} MB |" for key, name in configs),
        f"| normal-mode dispatch + combine, BF16, same tokens | {slowest('normal') * 1e3:.2f} ms | |",
        "| DeepEP on H800, EP8, 128 tokens x 7168, top-8 (published) | dispatch 0.077 ms, combine 0.114 ms | |",
        "",
        "| receive hook: work between dispatch and hook() | compute alone | dispatch alone (hook at once) | "
        "sum of both alone | dispatch, then compute (no hook) | dispatch with hook, compute, hook() |",
        "|---|---|---|---|---|---|",
        *(f"| {name}: {args.overlap_n}^2 matmuls x {runs[key][0]['reps']} (about one dispatch) | "
          f"{slowest('compute', key) * 1e3:.2f} ms | {slowest('alone', key) * 1e3:.2f} ms | "
          f"{(slowest('compute', key) + slowest('alone', key)) * 1e3:.2f} ms | {slowest('apart', key) * 1e3:.2f} ms | "
          f"{slowest('together', key) * 1e3:.2f} ms |"
          for key, name in [("torch", "torch backend"), *configs]),
    ]
    print("\n".join(lines))
    if args.append:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0]
        head = (f"\n## {stamp}: low-latency mode (`benchmarks/ep_low_latency.py`; {platform.machine()}, "
                f"{os.cpu_count()} cores, no GPU, load {load:.1f})\n\n")
        with RESULTS.open("a") as f:
            f.write(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
