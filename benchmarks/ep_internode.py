"""The internode rows of benchmarks/ep_dispatch.py: FP8 dispatch and BF16 combine by the internode kernels
(ptxforge.kernels.internode_*) on an emulated cluster of nodes x GPUs in one process (ptxforge.ep.internode_cluster).

Per num_sms: thread-instructions of each call (all GPUs), per-role SM load (thread-instructions per SM by role,
mean / max over SMs and GPUs), bytes per GPU on the scale-out link measured by the NIC model, and NVLink bytes
counted from what the forwarders passed on (plain peer stores: the emulator has no NVLink byte counter).
"""

from __future__ import annotations

import datetime
import os
import time

import numpy as np


def internode_rows(nodes: int, gpus: int, tokens: int, hidden: int, experts: int, topk: int,
                   sms_list: list[int], timeout_s: float = 600.0) -> list[dict]:
    """One row per num_sms; `timeout_s` bounds each wait and the watchdog (wall-clock: one process emulates every
    GPU, so a loaded machine needs a generous bound)."""
    import ml_dtypes
    import torch

    from ptxforge.emu import Cluster
    from ptxforge.ep.internode_cluster import ClusterGroup
    from ptxforge.kernels import fp8
    from ptxforge.kernels.internode_layout import CombineSlot, DispatchSlot

    ranks = nodes * gpus
    xs, scales, idxs, ws = [], [], [], []
    for r in range(ranks):
        g = torch.Generator().manual_seed(r)
        x = torch.randint(-4, 5, (tokens, hidden), generator=g).float().to(torch.bfloat16)
        q, sf, _ = fp8.per_token_quant_ref(x.view(torch.int16).numpy().view(ml_dtypes.bfloat16), True)
        xs.append(q.view(np.uint8))
        scales.append(sf.view(np.uint32))
        idxs.append(torch.topk(torch.rand((tokens, experts), generator=g), topk, dim=-1).indices.numpy())
        ws.append(torch.rand((tokens, topk), generator=g).numpy())
    rows = []
    for sms in sms_list:
        cluster = Cluster(nodes=nodes, gpus_per_node=gpus, sms=max(sms, 2), watchdog_s=timeout_s)
        group = ClusterGroup(cluster, timeout_s=timeout_s, rdma_ring=16, nvl_ring=16, chunk=4)
        t0 = time.perf_counter()
        outs = group.dispatch(xs, scales, idxs, ws, num_experts=experts, num_sms=sms)
        t_d = time.perf_counter() - t0
        d_links = group.traffic[-1]
        d_map = [group.sm_map(r) for r in range(ranks)]
        ys = [np.zeros((o.recv_x.shape[0], hidden), ml_dtypes.bfloat16) for o in outs]
        for y in ys:  # the experts' output: 1.0 everywhere, so the combine counts copies
            y[:] = 1
        t0 = time.perf_counter()
        comb = group.combine(ys, [o.handle for o in outs])
        t_c = time.perf_counter() - t0
        c_links = group.traffic[-1]
        maps = [group.sm_map(r) for r in range(ranks)]
        exact = all(np.array_equal(c[0].astype(np.float32), np.broadcast_to(
            o.handle.is_token_in_rank.sum(1, keepdims=True).astype(np.float32), c[0].shape))
            for c, o in zip(comb, outs, strict=True))

        def load(call, role, m):
            v = [row["thread_instructions"] for mm in m for row in mm if row["call"] == call and row["role"] == role]
            return (float(np.mean(v)), max(v)) if v else (0.0, 0)

        def rdma(links):
            per = [sum(t.bytes for t in links.links if t.src == r and t.kind == "rdma") for r in range(ranks)]
            return float(np.mean(per)), max(per)

        d_slot = DispatchSlot(hidden, scales[0].shape[1], topk, True, gpus).nbytes
        c_slot = CombineSlot(hidden, 0).nbytes
        nvl = []  # per GPU: slots its forwarders wrote into the other GPUs of its node
        for r, o in enumerate(outs):
            bits = o.handle.fwd_bits
            others = sum(int(((bits >> j) & 1).sum()) for j in range(gpus) if j != r % gpus)
            nvl.append(others)
        roles = {}
        for call, m in (("dispatch", d_map), ("combine", maps)):
            names = {row["role"] for mm in m for row in mm if row["call"] == call}
            roles.update({(call, role): load(call, role, m) for role in names})
        ti = {call: sum(row["thread_instructions"] for mm in maps for row in mm if row["call"] == call)
              for call in ("dispatch", "combine")}
        rows.append({"sms": sms, "t_dispatch": t_d, "t_combine": t_c, "ti": ti, "exact": exact, "roles": roles,
                     "rdma_dispatch": rdma(d_links), "rdma_combine": rdma(c_links),
                     "nvl_dispatch": float(np.mean(nvl)) * d_slot, "nvl_combine": float(np.mean(nvl)) * c_slot,
                     "recv": sum(o.recv_x.shape[0] for o in outs)})
    return rows


def internode_table(cmd: str, nodes: int, gpus: int, tokens: int, hidden: int, experts: int, topk: int,
                    rows: list[dict]) -> list[str]:
    def mm(v):
        return f"{v[0]:,.0f} / {v[1]:,.0f}"

    lines = [
        f"## Internode communication kernels (issue 28, point 5), {datetime.date.today()}",
        "",
        f"`{cmd}`: FP8 dispatch (f32 scales, top-k ids and weights) and BF16 combine of {nodes} nodes x {gpus} GPUs x "
        f"{tokens} tokens x {hidden} hidden, {experts} experts, top-{topk}, by the DSL internode kernels on an "
        f"emulated cluster in one process ({os.cpu_count()} cores, x86-64, no GPU, shared with other jobs: load "
        f"average {os.getloadavg()[0]:.1f} at the end); rings of 16 slots, chunks of 4 tokens. Thread-instructions "
        "are all GPUs' together; SM load is thread-instructions per SM by role (block 2c: RDMA senders, their "
        "coordinator and the NVLink receivers; block 2c+1: forwarders), mean / max over SMs and GPUs. RDMA bytes "
        "per GPU (mean / max) are measured by the NIC model (payload slots plus 8 bytes per tail or head signal); "
        "NVLink bytes per GPU are the forwarders' slots to the other GPUs of the node times the slot size "
        "(counted, not measured: the emulator counts no plain peer stores). Wall time is the emulator's.",
        "",
        "| num_sms | channels | dispatch thread-instr. | combine thread-instr. | dispatch send/coord/recv SM | "
        "dispatch forwarder SM | combine send/recv SM | combine forwarder SM | dispatch RDMA B/GPU | "
        "combine RDMA B/GPU | NVLink B/GPU (dispatch, combine) | emulator s (dispatch + combine) | combine exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ro = r["roles"]
        lines.append(
            f"| {r['sms']} | {r['sms'] // 2} | {r['ti']['dispatch']:,} | {r['ti']['combine']:,} | "
            f"{mm(ro[('dispatch', 'RDMA sender + coordinator + NVLink receiver')])} | "
            f"{mm(ro[('dispatch', 'forwarder')])} | {mm(ro[('combine', 'NVLink sender + RDMA receiver')])} | "
            f"{mm(ro[('combine', 'forwarder')])} | {mm(r['rdma_dispatch'])} | {mm(r['rdma_combine'])} | "
            f"{r['nvl_dispatch']:,.0f}, {r['nvl_combine']:,.0f} | {r['t_dispatch']:.1f} + {r['t_combine']:.1f} | "
            f"{r['exact']} |")
    lines += [
        "| DeepEP V1 on H800 (published, 4096 tokens, FP8 dispatch / BF16 combine, not measured here) | 10 | | | | | "
        "| | RDMA 58 GB/s (EP32), 51 GB/s (EP64) | RDMA 57 GB/s (EP32), 50 GB/s (EP64) | | | |",
        "",
        f"Rows received over all GPUs: {rows[0]['recv']:,}. No GPU or NIC here, so no GB/s of ours: the PTX calls "
        "NVSHMEM's device API by its own names (docs/cluster.md) but has not been linked against NVSHMEM or run on "
        "a cluster.",
    ]
    return lines
