"""A ring exchange across processes: emulated GPUs sharing memory through emulator IPC, next to gloo.

The kernel is `ring_exchange` from src/ptxforge/data/node_demo.cu (nvcc PTX; the one node_ring.py runs): every
GPU writes its `n` ints into the next GPU's buffer through a peer pointer, raises a flag there
(st.release.sys) and waits for its own (ld.acquire.sys). Rows, each the same ring of the same bytes:
- ptxforge.emu.ipc: one process per rank (a gloo job), each with its own IPC device; the next rank's buffer
  and flags opened through its handle. Time: from a barrier to the last rank's launch returning.
- ptxforge.emu.Node: the same kernel, all GPUs in this one process (the single-process tool).
- peer, gloo: the same processes move the same int32 chunk to the next rank with torch.distributed
  isend/irecv (CPU memory, no kernel).
The first round of each runner (compiles, maps) is not timed; best of --repeat rounds after it.
A second table prices the atomics' cross-process lock: one atomic loop on a lone device and on an IPC device.

    python benchmarks/ipc_ring.py [--ranks 2 4] [--ints 65536] [--repeat 5]
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

from node_ring import BLOCKS, THREADS, kernel, node_ring, ring_round  # noqa: E402 (beside this file)


def rank_main(rank: int, world: int, n: int, repeat: int) -> dict:
    import torch
    import torch.distributed as dist

    from ptxforge import runtime as rt
    from ptxforge.emu.ipc import ipc_close_mem_handle, ipc_device, ipc_get_mem_handle, ipc_open_mem_handle

    k = kernel()
    out: dict = {"ipc": [], "gloo": [], "ti": 0, "exact": True}
    with ipc_device(rank, world, capacity=64 << 20) as dev:
        recv = rt.empty(n, np.int32, device=dev)
        flags = rt.empty(BLOCKS, np.uint32, device=dev)
        send = rt.to_device((rank << 24 | np.arange(n)).astype(np.int32), device=dev)
        res = rt.empty(n, np.int32, device=dev)
        handles = [None] * world
        dist.all_gather_object(handles, (ipc_get_mem_handle(recv), ipc_get_mem_handle(flags)))
        nxt = (rank + 1) % world
        peer_recv, peer_flags = (ipc_open_mem_handle(h, device=dev) for h in handles[nxt])
        expect = ((rank - 1) % world << 24 | np.arange(n)).astype(np.int32)
        for tag in range(1, repeat + 2):
            dist.barrier()
            t0 = time.perf_counter()
            r = k.launch((BLOCKS,), (THREADS,), [send, peer_recv, peer_flags, flags, recv, res, np.int32(n),
                                                  np.uint32(tag)], device=dev, options={"watchdog_s": 120})
            t = [time.perf_counter() - t0]
            dist.all_reduce(ts := torch.tensor(t, dtype=torch.float64), op=dist.ReduceOp.MAX)
            out["exact"] &= bool(np.array_equal(res.to_host(), expect))
            if tag > 1:
                out["ipc"].append(float(ts[0]))
                out["ti"] = r.thread_instructions
        dist.barrier()
        ipc_close_mem_handle(peer_recv, device=dev)
        ipc_close_mem_handle(peer_flags, device=dev)
    chunk = torch.from_numpy((rank << 24 | np.arange(n)).astype(np.int32))
    got = torch.empty_like(chunk)
    for i in range(repeat + 1):
        dist.barrier()
        t0 = time.perf_counter()
        reqs = [dist.isend(chunk, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
        for q in reqs:
            q.wait()
        dist.all_reduce(ts := torch.tensor([time.perf_counter() - t0], dtype=torch.float64), op=dist.ReduceOp.MAX)
        if i:
            out["gloo"].append(float(ts[0]))
    out["exact"] &= bool(np.array_equal(got.numpy(), ((rank - 1) % world << 24 | np.arange(n)).astype(np.int32)))
    return out


def on_node(k, gpus: int, n: int, repeat: int) -> tuple[float, int, bool]:
    """The same ring on a single-process Node: the best of `repeat` rounds after an untimed first one."""
    node, bufs = node_ring(gpus, n)
    rounds = [ring_round(k, node, bufs, n, tag) for tag in range(1, repeat + 2)]
    dt, ti, _ = min(rounds[1:], key=lambda r: r[0])
    return dt, ti, all(r[2] for r in rounds)


ATOMIC_LOOP = """.version 8.0
.target sm_90
.address_size 64
.visible .entry atomic_loop(.param .u64 counter, .param .u32 turns)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [counter];
    ld.param.u32 %r1, [turns];
    mov.u32 %r2, 0;
LOOP:
    atom.relaxed.sys.global.add.u32 %r3, [%rd1], 1;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra LOOP;
    ret;
}
"""


def lock_cost(repeat: int, turns: int = 64, blocks: int = 4, threads: int = 128) -> None:
    """The price of cross-process atomicity: one process, no contention, the same atomic loop on a lone
    device and on an IPC device (whose atomics take the segment's flock)."""
    import ptxforge as pf
    from ptxforge import runtime as rt
    from ptxforge.emu import EmuDevice
    from ptxforge.emu.ipc import ipc_device

    k = pf.parse(ATOMIC_LOOP, filename="atomic_loop.ptx").kernel("atomic_loop")
    print(f"\natomic cost: {blocks} x {threads} threads x {turns} atom.add.u32 on one counter per launch; the "
          f"emulator runs each atom once for all {blocks * threads} threads (one wave), so the IPC device takes "
          f"its lock {turns} times per launch; best of {repeat}\n")
    print("| device | s per launch | us per emulated atom instruction | exact |")
    print("|---|---|---|---|")
    with ipc_device(0, 1, capacity=1 << 20) as ipc:
        for name, dev in (("lone EmuDevice", EmuDevice()), ("IpcDevice (flock around each atom)", ipc)):
            c = rt.empty(1, np.uint32, device=dev)
            best = None
            for _ in range(repeat + 1):
                t0 = time.perf_counter()
                k.launch((blocks,), (threads,), [c, np.uint32(turns)], device=dev)
                dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
            ok = int(c.to_host()[0]) == (repeat + 1) * blocks * threads * turns
            print(f"| {name} | {best:.4f} | {best / turns * 1e6:.0f} | {'yes' if ok else 'NO'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--ints", type=int, default=1 << 16, help="ints each rank sends")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from ptxforge.ep.spawn import run_ranks

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy "
          f"{np.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; best of {args.repeat}\n")
    print("| ranks | KiB per rank | runner | s per ring | MB/s moved | M thread-instr/s | exact |")
    print("|---|---|---|---|---|---|---|")
    k = kernel()
    moved = args.ints * 4
    for w in args.ranks:
        res = run_ranks(rank_main, w, args.ints, args.repeat, timeout_s=600)
        ipc, gloo = min(res[0]["ipc"]), min(res[0]["gloo"])
        ti = sum(r["ti"] for r in res)
        exact = all(r["exact"] for r in res)
        node_s, node_ti, node_ok = on_node(k, w, args.ints, args.repeat)
        rows = (("ptxforge.emu.ipc, a process per rank", ipc, ti, exact),
                ("ptxforge.emu.Node, one process", node_s, node_ti, node_ok),
                ("peer: gloo isend/irecv, same processes", gloo, None, exact))
        for name, s, t, ok in rows:
            rate = "-" if t is None else f"{t / s / 1e6:.1f}"
            print(f"| {w} | {moved // 1024} | {name} | {s:.4f} | {w * moved / s / 1e6:.1f} | {rate} | "
                  f"{'yes' if ok else 'NO'} |")
    lock_cost(args.repeat)


if __name__ == "__main__":
    main()
