"""A put-with-signal ring over an emulated 2 nodes x 2 GPUs: one process (`Cluster`) against one process per GPU
(`ClusterRank`, both NIC transports), next to gloo moving the same bytes between the same processes.

The kernel (DSL, NVSHMEM's device API): thread 0 of each PE puts `n` u32 into the next PE's `recv` with
nvshmemx_putmem_signal_nbi and waits for its own signal; the block copies the first 32 words. PE 1 -> PE 2 and
PE 3 -> PE 0 cross nodes (RDMA), the others NVLink. Rows:
- Cluster: all four GPUs in this one process, one `synchronize`.
- ClusterRank shm / dist: four processes (a gloo job); time from a barrier to the slowest rank's
  `synchronize` returning (its NIC's puts applied on every rank).
- peer, gloo: the same processes send the same bytes to the next rank with torch.distributed isend/irecv.
The first round of each (compiles, maps) is not timed; best of --repeat rounds after it.

    python benchmarks/cluster_procs.py [--kib 32 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

WORLD, PER_NODE = 4, 2


def ring_kernel():
    from ptxforge.dsl import bar_sync, bitcast, if_, kernel, ld, mul_wide, ptr, st, tid
    from ptxforge.dsl import types as T
    from ptxforge.dsl.nvshmem import (
        NVSHMEM_CMP_EQ,
        NVSHMEM_SIGNAL_SET,
        nvshmem_my_pe,
        nvshmem_n_pes,
        nvshmem_signal_wait_until,
        nvshmemx_putmem_signal_nbi,
    )

    @kernel(arch="sm_90")
    def ring(send: ptr(T.u32), recv: ptr(T.u32), sig: ptr(T.u64), out: ptr(T.u32), n: T.u32, tag: T.u64):
        me, npes = bitcast(nvshmem_my_pe(), T.u32), bitcast(nvshmem_n_pes(), T.u32)
        with if_(tid.x == 0):
            nvshmemx_putmem_signal_nbi(recv, send, mul_wide(n, 4), sig, tag, NVSHMEM_SIGNAL_SET, (me + 1) % npes)
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, tag)
        bar_sync()
        st(out[tid.x], ld(recv[tid.x]))
    return ring


def single(n: int, repeat: int) -> tuple[float, bool]:
    from ptxforge.emu import Cluster

    k, c = ring_kernel(), Cluster(nodes=WORLD // PER_NODE, gpus_per_node=PER_NODE, sms=1)
    send, recv, out = (c.malloc(n, np.uint32, s) for s in ("send", "recv", "out"))
    sig = c.malloc(1, np.uint64, "sig")
    for pe in range(WORLD):
        send.write(pe, pe * 10_000_000 + np.arange(n))
    best, exact = float("inf"), True
    for tag in range(1, repeat + 2):
        t0 = time.perf_counter()
        for pe, dev in enumerate(c.devices):
            k.launch((1,), (32,), [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe), np.uint32(n),
                                   np.uint64(tag)], device=dev, stream=dev.stream())
        c.synchronize()
        if tag > 1:
            best = min(best, time.perf_counter() - t0)
        exact &= all(int(recv.read(pe)[-1]) == (pe - 1) % WORLD * 10_000_000 + n - 1 for pe in range(WORLD))
    return best, exact


def rank_main(rank: int, world: int, n: int, repeat: int) -> dict:
    import torch
    import torch.distributed as dist

    from ptxforge.emu import ClusterRank

    def slowest(t: float) -> float:
        x = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return float(x[0])

    k = ring_kernel()
    out: dict = {"exact": True}
    for transport in ("shm", "dist"):
        with ClusterRank(None, PER_NODE, sms=1, transport=transport, watchdog_s=120) as cr:
            send, recv, res = (cr.malloc(n, np.uint32, s) for s in ("send", "recv", "out"))
            sig = cr.malloc(1, np.uint64, "sig")
            send.write(rank * 10_000_000 + np.arange(n))
            times = []
            for tag in range(1, repeat + 2):
                dist.barrier()
                t0 = time.perf_counter()
                cr.launch(k, (1,), (32,), [send.address, recv.address, sig.address, res.address, np.uint32(n),
                                           np.uint64(tag)])
                result = cr.synchronize()
                times.append(slowest(time.perf_counter() - t0))
                out["exact"] &= int(recv.read()[-1]) == (rank - 1) % world * 10_000_000 + n - 1
            out[transport] = min(times[1:])
            out["rdma_bytes"] = result.bytes("rdma")
    payload = torch.from_numpy((rank * 10_000_000 + np.arange(n)).astype(np.int32))
    into = torch.empty_like(payload)
    times = []
    for _ in range(repeat + 1):
        dist.barrier()
        t0 = time.perf_counter()
        reqs = [dist.isend(payload, (rank + 1) % world), dist.irecv(into, (rank - 1) % world)]
        for r in reqs:
            r.wait()
        times.append(slowest(time.perf_counter() - t0))
    out["gloo"] = min(times[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kib", type=int, nargs="+", default=[32, 2048])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from ptxforge.ep.spawn import run_ranks

    print(f"# {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; 2 nodes x 2 GPUs, "
          f"best of {args.repeat}")
    print("| payload per PE | Cluster (1 process) | ClusterRank shm (4 processes) | ClusterRank dist | peer: gloo "
          "isend/irecv | exact |")
    print("|---|---|---|---|---|---|")
    for kib in args.kib:
        n = kib * 256
        t1, ok1 = single(n, args.repeat)
        outs = run_ranks(rank_main, WORLD, n, args.repeat, timeout_s=900)
        ok = ok1 and all(o["exact"] for o in outs) and outs[0]["rdma_bytes"] == 2 * (4 * n + 8)
        print(f"| {kib} KiB | {t1 * 1e3:.1f} ms | {outs[0]['shm'] * 1e3:.1f} ms | {outs[0]['dist'] * 1e3:.1f} ms | "
              f"{outs[0]['gloo'] * 1e3:.2f} ms | {ok} |")


if __name__ == "__main__":
    main()
