"""Normal-mode dispatch with `async_finish=True` overlapping CPU compute, on 2 gloo ranks.

Each rank times, in the same run: the dispatch alone (synchronous), a CPU matmul loop alone (sized to take about
as long as the dispatch; the same count on every rank), the two one after the other (the peer: every call
synchronous), and the two overlapped (dispatch with async_finish=True, the matmuls, then the event's wait). The
data all_to_all runs on gloo's thread while the matmuls run on the caller's; the agreement, the count all_gather,
packing and unpacking stay on the caller's thread. backend="kernels" (a smaller shape: its kernels run on emulated
GPUs) runs the communication kernels on each rank's device worker thread; its call waits for the notify kernel's
counts only. Times are medians over iterations of the slowest rank; one intra-op thread per rank; the four are
measured in turn in every round so the load falls on each alike. Each backend's row has its own synchronous
calls as the peer, in the same run.
Usage: python benchmarks/ep_overlap.py [--tokens 2048] [--hidden 4096] [--experts 32] [--topk 4] [--iters 12]
       [--matmul-n 768] [--backend torch|kernels|both] [--kernels-tokens 128] [--kernels-hidden 512]
       [--num-sms 4] [--append]   (--append adds the tables to benchmarks/RESULTS.md)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

from ep_bench import RESULTS, median_time, moe_inputs

WORLD = 2



def bench_rank(rank, world, runs, experts, topk, iters, matmul_n):
    """Each backend's row, one after the other in the same processes: runs = [(backend, tokens, hidden)]."""
    return {backend: bench_backend(rank, backend, tokens, hidden, experts, topk, iters, matmul_n)
            for backend, tokens, hidden in runs}


def bench_backend(rank, backend, tokens, hidden, experts, topk, iters, matmul_n):
    import torch
    import torch.distributed as dist

    import ptxforge.ep as deep_ep

    x, idx, w = moe_inputs(rank, tokens, hidden, experts, topk)
    buf = deep_ep.Buffer(None, timeout_s=120, backend=backend)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, experts)

    def dispatch(async_finish=False):
        return buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                            topk_idx=idx, topk_weights=w, async_finish=async_finish)

    a, b = torch.randn((matmul_n, matmul_n)), torch.randn((matmul_n, matmul_n))
    t_dispatch = median_time(dispatch, iters)
    one = median_time(lambda: [a @ b for _ in range(4)], max(iters, 5)) / 4
    reps = torch.tensor([max(1, round(t_dispatch / one))])
    dist.all_reduce(reps, op=dist.ReduceOp.MAX)
    parts = {"issue": [], "wait": []}

    def compute():
        for _ in range(int(reps)):
            a @ b

    def apart():
        dispatch()
        compute()

    def together():
        t0 = time.perf_counter()
        *_, event = dispatch(async_finish=True)
        t1 = time.perf_counter()
        compute()
        t2 = time.perf_counter()
        event.current_stream_wait()
        parts["issue"].append(t1 - t0)
        parts["wait"].append(time.perf_counter() - t2)

    sync_out, async_out = dispatch(), dispatch(async_finish=True)
    async_out[5].current_stream_wait()
    same = bool(torch.equal(sync_out[0], async_out[0]))
    # the four measured in turn in every round, so the machine's load falls on each alike
    times: dict[str, list[float]] = {"dispatch": [], "compute": [], "apart": [], "together": []}
    fns = {"dispatch": dispatch, "compute": compute, "apart": apart, "together": together}
    for i in range(iters):
        names = list(fns)[i % 4:] + list(fns)[:i % 4]
        for name in names:
            dist.barrier()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    buf.stats(reset=True)
    dispatch()
    sent = buf.stats()[0].wire_sent
    out = {k: statistics.median(v) for k, v in times.items()}
    out.update(issue=statistics.median(parts["issue"]), wait=statistics.median(parts["wait"]))
    buf.destroy()
    return dict(out, reps=int(reps), same=same, sent=sent)


def _table(backend, res, tokens, hidden, experts, topk, matmul_n) -> list[str]:
    def slowest(key):
        return max(r[key] for r in res)

    alone = slowest("dispatch") + slowest("compute")
    shape = f"{WORLD} ranks x {tokens} tokens x {hidden} BF16, top-{topk} of {experts}"
    return [
        f"backend={backend!r}: {shape}; {res[0]['reps']} matmuls of {matmul_n}^2; wire bytes sent per rank "
        f"{sum(r['sent'] for r in res) / len(res) / 1e6:.2f} MB; async result equals sync: "
        f"{all(r['same'] for r in res)}",
        "",
        "| what (median, slowest rank) | ms |",
        "|---|---|",
        f"| dispatch alone (synchronous) | {slowest('dispatch') * 1e3:.1f} |",
        f"| compute alone | {slowest('compute') * 1e3:.1f} |",
        f"| sum of both alone | {alone * 1e3:.1f} |",
        f"| dispatch, then compute (every call synchronous: the peer) | {slowest('apart') * 1e3:.1f} |",
        f"| dispatch with async_finish=True, compute, event wait | {slowest('together') * 1e3:.1f} |",
        f"| overlapped vs synchronous | {slowest('together') / slowest('apart'):.2f}x the time |",
        f"| of which: the async dispatch call returning | {slowest('issue') * 1e3:.1f} |",
        f"| of which: the event wait after the compute | {slowest('wait') * 1e3:.1f} |",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--matmul-n", type=int, default=768, help="size of the matmuls standing in for compute")
    ap.add_argument("--backend", choices=("torch", "kernels", "both"), default="both")
    ap.add_argument("--kernels-tokens", type=int, default=128, help="tokens of the kernels row (emulated GPUs)")
    ap.add_argument("--kernels-hidden", type=int, default=512)
    ap.add_argument("--num-sms", type=int, default=4, help="SMs of the kernels row's communication kernels")
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    from ptxforge.ep import Buffer
    from ptxforge.ep.spawn import run_ranks

    Buffer.set_num_sms(args.num_sms)  # inherited by the forked ranks
    runs = [(b, t, h) for b, t, h in (("torch", args.tokens, args.hidden),
                                      ("kernels", args.kernels_tokens, args.kernels_hidden))
            if args.backend in (b, "both")]
    res = run_ranks(bench_rank, WORLD, runs, args.experts, args.topk, args.iters, args.matmul_n, timeout_s=1800)
    lines: list[str] = []
    for backend, tokens, hidden in runs:
        lines += _table(backend, [r[backend] for r in res], tokens, hidden, args.experts, args.topk, args.matmul_n)
        if backend == "kernels":
            lines.append(f"| (kernels: {args.num_sms} SMs, their launches on each rank's device worker thread) | |")
        lines.append("")
    print("\n".join(lines))
    if args.append:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0]
        head = (f"\n## {stamp}: asynchronous normal-mode dispatch overlapping compute (`benchmarks/ep_overlap.py`;"
                f" {platform.machine()}, {os.cpu_count()} cores, no GPU, under load from other jobs: load average "
                f"{load:.1f})\n\n")
        with RESULTS.open("a") as f:
            f.write(head + "\n".join(lines))


if __name__ == "__main__":
    main()
