"""A ring exchange among emulated GPUs: `ptxforge.emu.Node` next to the workaround it replaces.

The kernel is `ring_exchange` from src/ptxforge/data/node_demo.cu (nvcc PTX): every GPU writes its `n` ints
into the next GPU's buffer through a peer pointer, raises a flag there (st.release.sys) and waits for its
own (ld.acquire.sys). ptxforge runs it on a Node, one stream per GPU, all launches concurrently. The peer
is what worked before the Node: one Python thread per "rank", each launching synchronously on the single
shared emulated device (the threads interleave through the GIL; all ranks share one address space).

    python benchmarks/node_ring.py [--gpus 4 8] [--ints 65536] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BLOCKS, THREADS = 8, 256


def kernel():
    import ptxforge as pf

    text = (resources.files("ptxforge") / "data" / "node_demo.sm_90a.ptx").read_text()
    return pf.parse(text, filename="node_demo.sm_90a.ptx").kernel("ring_exchange")


def node_ring(gpus: int, n: int):
    """A Node and each GPU's ring buffers: what it sends, receives, its flags and its output."""
    from ptxforge import runtime as rt
    from ptxforge.emu import Node

    node = Node(gpus=gpus, sms=132)
    recv = [rt.empty(n, np.int32, device=d) for d in node.devices]
    flags = [rt.empty(BLOCKS, np.uint32, device=d) for d in node.devices]
    sends = [rt.to_device((r << 24 | np.arange(n)).astype(np.int32), device=d) for r, d in enumerate(node.devices)]
    outs = [rt.empty(n, np.int32, device=d) for d in node.devices]
    return node, (sends, recv, flags, outs)


def ring_round(k, node, bufs, n: int, tag: int) -> tuple[float, int, bool]:
    """One ring on the Node, every GPU on its own stream, with flag value `tag`: (s, thread-instr, exact)."""
    sends, recv, flags, outs = bufs
    gpus = len(node.devices)
    pend = []
    t0 = time.perf_counter()
    for r, d in enumerate(node.devices):
        nx = (r + 1) % gpus
        pend.append(k.launch((BLOCKS,), (THREADS,), [sends[r], recv[nx], flags[nx], flags[r], recv[r], outs[r],
                                                      np.int32(n), np.uint32(tag)], device=d, stream=d.stream()))
    node.synchronize()
    dt = time.perf_counter() - t0
    ok = all(np.array_equal(outs[r].to_host(), sends[(r - 1) % gpus].to_host()) for r in range(gpus))
    return dt, sum(p.result().thread_instructions for p in pend), ok


def on_node(k, gpus: int, n: int) -> tuple[float, int, bool]:
    node, bufs = node_ring(gpus, n)
    return ring_round(k, node, bufs, n, 1)


def on_threads(k, gpus: int, n: int) -> tuple[float, int, bool]:
    from ptxforge import runtime as rt
    from ptxforge.emu import EmuDevice

    dev = EmuDevice()
    dev.image(k.module)  # load once, before the threads start
    recv = [rt.empty(n, np.int32, device=dev) for _ in range(gpus)]
    flags = [rt.empty(BLOCKS, np.uint32, device=dev) for _ in range(gpus)]
    sends = [rt.to_device((r << 24 | np.arange(n)).astype(np.int32), device=dev) for r in range(gpus)]
    outs = [rt.empty(n, np.int32, device=dev) for _ in range(gpus)]
    results: list = [None] * gpus

    def rank(r: int) -> None:
        nx = (r + 1) % gpus
        results[r] = k.launch((BLOCKS,), (THREADS,), [sends[r], recv[nx], flags[nx], flags[r], recv[r], outs[r],
                                                       np.int32(n), np.uint32(1)], device=dev,
                              options={"watchdog_s": 120})
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(gpus)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    dt = time.perf_counter() - t0
    ok = all(res is not None for res in results) and all(
        np.array_equal(outs[r].to_host(), sends[(r - 1) % gpus].to_host()) for r in range(gpus))
    return dt, sum(res.thread_instructions for res in results if res is not None), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--ints", type=int, default=1 << 16, help="ints each GPU sends")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy "
          f"{np.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; best of {args.repeat}\n")
    print("| GPUs | KiB per GPU | runner | s | MB/s moved | M thread-instr/s | exact |")
    print("|---|---|---|---|---|---|---|")
    k = kernel()
    for g in args.gpus:
        for name, fn in (("ptxforge.emu.Node, a stream per GPU", on_node),
                         ("peer: a thread per rank on one device", on_threads)):
            best = None
            for _ in range(args.repeat):
                r = fn(k, g, args.ints)
                best = r if best is None or r[0] < best[0] else best
            dt, ti, ok = best
            print(f"| {g} | {args.ints * 4 // 1024} | {name} | {dt:.3f} | {g * args.ints * 4 / dt / 1e6:.1f} | "
                  f"{ti / dt / 1e6:.1f} | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
