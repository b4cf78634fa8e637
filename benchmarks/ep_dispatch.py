"""Expert-parallel dispatch + combine on 4 gloo ranks: ptxforge.ep (BF16 and FP8 dispatch) next to a plain torch
all-to-all MoE written the straightforward way (one copy per (token, expert): gather by expert,
all_to_all_single, all_to_all_single back, scatter-add), measured in the same run.

Reports bytes on the wire per rank (payload + scales; metadata apart) and the time per dispatch + combine
(median over iterations, the slowest rank). The FP8 quantization itself is not timed (as in DeepEP, the
caller quantizes before dispatch). One intra-op thread per rank.
The kernel backend (`--kernel-sms 4,8,20`, issue 13): the same layer's FP8 dispatch and BF16 combine by the
intranode communication kernels (ptxforge.kernels.comm) on a 4-GPU emulated node in this process
(ptxforge.ep.NodeGroup, the single-process form of Buffer(backend="kernels")): thread-instructions and the
per-SM load of each role (notify, sender, receiver) per num_sms, the combine checked exact. No GPU here, so
no GB/s: DeepEP's published H800 figures are the reference row. `--kernel-tokens` shrinks that part.
The internode kernels (`--internode-sms 4,8,20`, issue 28): FP8 dispatch and BF16 combine on an emulated
cluster of `--nodes` x `--gpus-per-node` GPUs (benchmarks/ep_internode.py): thread-instructions, per-role SM
load and bytes per link; DeepEP's published internode H800 figures are the reference row.
Usage: python benchmarks/ep_dispatch.py [--tokens 256] [--hidden 7168] [--experts 64] [--topk 8] [--iters 10]
       [--kernel-sms 4,8,20] [--kernel-tokens 256] [--internode-sms 4,8,20] [--internode-tokens 256]
       [--internode-hidden 7168] [--internode-timeout 3600] [--nodes 2] [--gpus-per-node 4] [--skip-torch]
       [--append]   (--append: adds the tables to benchmarks/RESULTS.md)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

from ep_bench import RESULTS, median_time

WORLD = 4



def bench_rank(rank, world, tokens, hidden, experts, topk, iters):
    import torch
    import torch.distributed as dist

    import ptxforge.ep as deep_ep
    from ptxforge.ep.testing import calc_diff
    from ptxforge.kernels import fp8

    g = torch.Generator().manual_seed(rank)
    x = torch.randn((tokens, hidden), generator=g).to(torch.bfloat16)
    scores = torch.rand((tokens, experts), generator=g)
    idx = torch.topk(scores, topk, dim=-1).indices
    w = torch.rand((tokens, topk), generator=g)
    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world)
    # the numpy reference of the FP8 kernel (bit-identical to it, see tests/kernels) quantizes the large input
    q_np, sf_np, _ = fp8.per_token_quant_ref(_bf16_np(x), True)
    q = torch.from_numpy(q_np).view(torch.float8_e4m3fn)
    sf = torch.from_numpy(sf_np)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, experts)
    lay = dict(num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte, topk_idx=idx,
               topk_weights=w)

    def ours(payload, dequant=False):
        recv, _, _, _, handle, _ = buf.dispatch(payload, **lay)
        if isinstance(recv, tuple):  # the experts' BF16 output stands in for them (dequantized when checked)
            rq, rs = recv
            rx = ((rq.float().view(rq.shape[0], -1, 128) * rs.unsqueeze(2)).view(rq.shape).to(torch.bfloat16)
                  if dequant else torch.zeros(rq.shape, dtype=torch.bfloat16))
        else:
            rx = recv
        return buf.combine(rx, handle)[0]

    t_bf16 = median_time(lambda: ours(x), iters)
    t_fp8 = median_time(lambda: ours((q, sf)), iters)
    buf.stats(reset=True)
    out_bf16 = ours(x)
    st_bf16 = buf.stats()[0]
    out_fp8 = ours((q, sf), dequant=True)
    st_fp8 = buf.stats()[-2]

    # the baseline: every (token, expert) pair travels, grouped by expert
    epr = experts // world
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    tok = order // topk
    send_counts = torch.bincount(flat // epr, minlength=world).tolist()

    def baseline():
        send = x[tok]
        recv_counts = torch.empty(world, dtype=torch.int64)
        dist.all_to_all_single(recv_counts, torch.tensor(send_counts, dtype=torch.int64))
        rc = recv_counts.tolist()
        recv = torch.empty((sum(rc), hidden), dtype=torch.bfloat16)
        dist.all_to_all_single(recv, send, rc, send_counts)
        back = torch.empty_like(send)
        dist.all_to_all_single(back, recv, send_counts, rc)  # the experts would run between the two
        out = torch.zeros((tokens, hidden), dtype=torch.float32)
        out.index_add_(0, tok, back.float())
        return out.to(torch.bfloat16)

    t_base = median_time(baseline, iters)
    out_base = baseline()
    base_bytes = sum(c for r, c in enumerate(send_counts) if r != rank) * hidden * 2
    wire = lambda s: (s.intra_node_sent.payload + s.intra_node_sent.scales, s.intra_node_sent.meta)  # noqa: E731
    return {"t_bf16": t_bf16, "t_fp8": t_fp8, "t_base": t_base, "bytes_bf16": wire(st_bf16),
            "bytes_fp8": wire(st_fp8), "bytes_base": base_bytes,
            "exact": bool(out_bf16.equal((x.float() * in_rank.sum(1, keepdim=True)).to(torch.bfloat16))
                          and out_base.equal((x.float() * topk).to(torch.bfloat16))),
            "fp8_diff": calc_diff(out_fp8, out_bf16)}


def _bf16_np(x):
    import ml_dtypes

    return x.view(__import__("torch").int16).numpy().view(ml_dtypes.bfloat16)


def kernel_rows(tokens, hidden, experts, topk, sms_list):
    """Per num_sms: FP8 dispatch + BF16 combine by the communication kernels on a 4-GPU emulated node."""
    import numpy as np
    import torch

    from ptxforge.emu import Node
    from ptxforge.ep import Config
    from ptxforge.ep.node_group import NodeGroup
    from ptxforge.kernels import fp8

    xs, qs, idxs, ws = [], [], [], []
    for r in range(WORLD):
        g = torch.Generator().manual_seed(r)
        x = torch.randint(-4, 5, (tokens, hidden), generator=g).float().to(torch.bfloat16)
        q, sf, _ = fp8.per_token_quant_ref(_bf16_np(x), True)
        xs.append(x)
        qs.append((torch.from_numpy(q).view(torch.float8_e4m3fn), torch.from_numpy(sf)))
        idxs.append(torch.topk(torch.rand((tokens, experts), generator=g), topk, dim=-1).indices)
        ws.append(torch.rand((tokens, topk), generator=g))
    rows = []
    for sms in sms_list:
        node = Node(gpus=WORLD, sms=132, watchdog_s=120)
        group = NodeGroup(node)
        t0 = time.perf_counter()
        outs = group.dispatch(qs, topk_idx=idxs, topk_weights=ws, num_experts=experts, config=Config(sms, 6, 32))
        t_d = time.perf_counter() - t0
        disp = [group.sm_map(r) for r in range(WORLD)]
        t0 = time.perf_counter()
        # the experts' output stands in as x's own rows, so the combine must give x times its copies exactly
        ys = []
        for r, o in enumerate(outs):
            h = o[4]
            src_rank = torch.repeat_interleave(torch.arange(WORLD), torch.diff(torch.cat(
                [torch.zeros(1, dtype=torch.int32), h.rank_prefix_matrix[:, r]])).long())
            ys.append(torch.stack([xs[int(s)][int(t)] for s, t in zip(src_rank, h.recv_src_idx, strict=True)])
                      if len(src_rank) else torch.zeros((0, hidden), dtype=torch.bfloat16))
        comb = group.combine(ys, [o[4] for o in outs], config=Config(sms, 6, 32))
        t_c = time.perf_counter() - t0
        exact = all(c[0].equal((xs[r].float() * outs[r][4].is_token_in_rank.sum(1, keepdim=True))
                               .to(torch.bfloat16)) for r, c in enumerate(comb))
        maps = [group.sm_map(r) for r in range(WORLD)]
        def load(call, role, m):  # noqa: E306
            v = [row["thread_instructions"] for mm in m for row in mm if row["call"] == call and row["role"] == role]
            return np.mean(v) if v else 0, max(v) if v else 0
        ti = {call: sum(row["thread_instructions"] for mm in maps for row in mm if row["call"] == call)
              for call in ("dispatch", "combine")}
        budget = group.ranks[0].sm_budget  # how the kernels were held to num_sms (Buffer.sm_budget() on a rank)
        rows.append({"sms": sms, "budget": f"{budget['how']}, {budget['sms']} SMs", "t_dispatch": t_d,
                     "t_combine": t_c, "ti": ti, "exact": exact,
                     "recv": sum(o[0][0].shape[0] for o in outs),
                     "load": {(call, role): load(call, role, disp if call == "dispatch" else maps)
                              for call in ("dispatch", "combine") for role in ("notify", "sender", "receiver")}})
    return rows


def kernel_table(args, rows) -> list[str]:
    lines = [
        f"## Intranode communication kernels, backend=\"kernels\" (issue 13), {datetime.date.today()}",
        "",
        f"`python benchmarks/ep_dispatch.py --kernel-sms {','.join(str(r['sms']) for r in rows)} --kernel-tokens "
        f"{args.kernel_tokens} --hidden {args.hidden} --experts {args.experts} --topk {args.topk}`: FP8 dispatch "
        f"(UE8M0-rounded f32 scales, top-k ids and weights) and BF16 combine of {WORLD} ranks x "
        f"{args.kernel_tokens} tokens x {args.hidden} hidden, {args.experts} experts, top-{args.topk}, by the "
        f"DSL kernels on a {WORLD}-GPU emulated node in one process ({os.cpu_count()} cores shared with other jobs, "
        f"load average {os.getloadavg()[0]:.1f} at the end, no GPU); Config(num_sms, 6, 32): chunks of 6 tokens, "
        "rings of 32 slots. Thread-instructions are all ranks' together; the per-SM load is thread-instructions "
        "per SM by role, mean / max over SMs and ranks. Wall time is the emulator's (a CPU running every "
        "GPU's lanes), not a GPU estimate.",
        "",
        "| num_sms | SM budget | channels | dispatch thread-instr. | combine thread-instr. | "
        "dispatch sender SM mean / max | "
        "dispatch receiver SM mean / max | combine sender SM mean / max | combine receiver SM mean / max | "
        "notify SM | emulator s (dispatch + combine) | combine exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ld = r["load"]

        def f(k, ld=ld):
            return f"{ld[k][0]:,.0f} / {ld[k][1]:,.0f}"
        roles = " | ".join(f(k) for k in (("dispatch", "sender"), ("dispatch", "receiver"), ("combine", "sender"),
                                         ("combine", "receiver")))
        lines.append(f"| {r['sms']} | {r['budget']} | {r['sms'] // 2} | {r['ti']['dispatch']:,} | "
                     f"{r['ti']['combine']:,} | {roles} | "
                     f"{ld[('dispatch', 'notify')][1]:,.0f} | {r['t_dispatch']:.1f} + {r['t_combine']:.1f} | "
                     f"{r['exact']} |")
    lines += [
        "| DeepEP V1 on H800 (published, EP8, 4096 tokens, not measured here) | 20 SMs | 10 | | | | | | | | "
        "153 GB/s dispatch (FP8), 158 GB/s combine (BF16), NVLink | |",
        "",
        f"Rows received over all ranks: {rows[0]['recv']:,}. No GPU was lent to this task, so there is no GB/s "
        "figure of ours and no NCCL all_to_all beside it. On a GPU the same kernels share CUDA IPC buffers and "
        "run on a green context of at least num_sms SMs where the driver has them (else their grid of num_sms "
        "persistent blocks is the budget); `Buffer.sm_budget()` reports which, for the GB/s rows a GPU run "
        "would add (not written: no GPU to measure them on).",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--kernel-sms", default="4,8,20", help="num_sms values for the kernel backend ('' to skip)")
    ap.add_argument("--kernel-tokens", type=int, default=256)
    ap.add_argument("--internode-sms", default="", help="num_sms values for the internode kernels ('' to skip)")
    ap.add_argument("--internode-tokens", type=int, default=256)
    ap.add_argument("--internode-hidden", type=int, default=7168)
    ap.add_argument("--internode-timeout", type=float, default=3600.0,
                    help="wall-clock bound of each wait in the internode kernels (s)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--skip-torch", action="store_true", help="only the kernel backend")
    ap.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = ap.parse_args()
    if not args.skip_torch:
        torch_table(args)
    if args.kernel_sms:
        rows = kernel_rows(args.kernel_tokens, args.hidden, args.experts, args.topk,
                           [int(v) for v in args.kernel_sms.split(",")])
        text = "\n".join(kernel_table(args, rows))
        print(text)
        if args.append:
            with RESULTS.open("a") as f:
                f.write("\n" + text + "\n")
    if args.internode_sms:
        internode(args)


def internode(args) -> None:
    from ep_internode import internode_rows, internode_table

    sms = [int(v) for v in args.internode_sms.split(",")]
    rows = internode_rows(args.nodes, args.gpus_per_node, args.internode_tokens, args.internode_hidden,
                          args.experts, args.topk, sms, args.internode_timeout)
    cmd = (f"python benchmarks/ep_dispatch.py --skip-torch --kernel-sms '' --internode-sms {args.internode_sms} "
           f"--internode-tokens {args.internode_tokens} --internode-hidden {args.internode_hidden} --nodes "
           f"{args.nodes} --gpus-per-node {args.gpus_per_node} --experts {args.experts} --topk {args.topk}")
    text = "\n".join(internode_table(cmd, args.nodes, args.gpus_per_node, args.internode_tokens,
                                     args.internode_hidden, args.experts, args.topk, rows))
    print(text)
    if args.append:
        with RESULTS.open("a") as f:
            f.write("\n" + text + "\n")


def torch_table(args) -> None:
    from ptxforge.ep.spawn import run_ranks

    res = run_ranks(bench_rank, WORLD, args.tokens, args.hidden, args.experts, args.topk, args.iters,
                    timeout_s=600)
    worst = {k: max(r[k] for r in res) for k in ("t_bf16", "t_fp8", "t_base")}
    b16 = sum(r["bytes_bf16"][0] for r in res) / WORLD
    b8 = sum(r["bytes_fp8"][0] for r in res) / WORLD
    meta = sum(r["bytes_bf16"][1] for r in res) / WORLD
    base = sum(r["bytes_base"] for r in res) / WORLD
    load = os.getloadavg()[0]
    lines = [
        f"## Expert-parallel dispatch + combine (issue 11), {datetime.date.today()}",
        "",
        f"`python benchmarks/ep_dispatch.py --tokens {args.tokens} --hidden {args.hidden} --experts "
        f"{args.experts} --topk {args.topk}`: {WORLD} gloo ranks on one machine ({os.cpu_count()} cores, no GPU, "
        f"{platform.python_implementation()} {platform.python_version()}, load average {load:.1f} at the end), "
        f"one intra-op thread per rank; median of {args.iters} iterations, slowest rank. Dispatch bytes are what "
        "one rank sends to the others (payload + scales; top-k ids, weights and source indices apart).",
        "",
        "| method | dispatch bytes/rank | vs BF16 | ms per dispatch + combine |",
        "|---|---|---|---|",
        f"| plain torch all-to-all MoE (one copy per token and expert) | {base:,.0f} | {base / b16:.2f}x | "
        f"{worst['t_base'] * 1e3:.1f} |",
        f"| ptxforge.ep BF16 dispatch, BF16 combine | {b16:,.0f} | 1.00x | {worst['t_bf16'] * 1e3:.1f} |",
        f"| ptxforge.ep FP8 dispatch (+UE8M0-rounded f32 scales), BF16 combine | {b8:,.0f} | {b8 / b16:.3f}x | "
        f"{worst['t_fp8'] * 1e3:.1f} |",
        "",
        f"FP8 / BF16 dispatch bytes incl. scales: {100 * b8 / b16:.1f}% (goal <= 53%). Metadata: {meta:,.0f} "
        f"bytes a rank ({100 * meta / b16:.1f}% of the BF16 payload). Both combine outputs exact (x times its "
        f"copies: ranks for ptxforge.ep, experts for the baseline): {all(r['exact'] for r in res)}; FP8 vs BF16 "
        f"combine calc_diff {max(r['fp8_diff'] for r in res):.1e}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.append:
        with RESULTS.open("a") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
