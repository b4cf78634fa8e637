"""The node section of `ptxforge demo`: 4 emulated GPUs exchange data in a ring through peer pointers, and
a persistent kernel on 20 SMs runs beside a compute kernel on the other 112 (with the SM map as a PNG)."""

from __future__ import annotations

import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

from ptxforge import runtime as rt
from ptxforge.cli.sm_map import draw_sm_map
from ptxforge.emu import Node
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.outputs import OutputRefused
from ptxforge.ptx.ir import Module
from ptxforge.ptx.parser import parse


def default_sm_map_path() -> str:
    return str(Path(tempfile.gettempdir()) / "ptxforge_node_sm_map.png")


def node_section(sm_map_path: str | None = None) -> bool:
    print("\n== a whole GPU node: ptxforge.emu.Node (peer memory, streams on SM partitions, concurrent kernels)")
    text = (resources.files("ptxforge") / "data" / "node_demo.sm_90a.ptx").read_text()
    m = parse(text, filename="node_demo.sm_90a.ptx")
    ok = _ring(m, gpus=4, n=1 << 16, sanitize=False)
    ok &= _ring(m, gpus=4, n=2048, sanitize=True)
    ok &= _partitions(m, sm_map_path or default_sm_map_path())
    return ok


def _ring(m: Module, *, gpus: int, n: int, sanitize: bool) -> bool:
    k = m.kernel("ring_exchange")
    node = Node(gpus=gpus, sms=132, sanitize=sanitize)
    blocks = 8
    recv = [rt.empty(n, np.int32, device=d) for d in node.devices]
    flags = [rt.empty(blocks, np.uint32, device=d) for d in node.devices]
    sends = [(r << 24 | np.arange(n)).astype(np.int32) for r in range(gpus)]  # each value names its sender
    outs = [np.zeros(n, np.int32) for _ in range(gpus)]
    pend = []
    for r, d in enumerate(node.devices):
        nx = (r + 1) % gpus
        pend.append(k.launch((blocks,), (256,), [sends[r], recv[nx], flags[nx], flags[r], recv[r], outs[r], np.int32(n),
                                                  np.uint32(1)], device=d, stream=d.stream(sms=range(0, 20))))
    t0 = time.perf_counter()
    try:
        node.synchronize()
    except SanitizerError as e:
        print(f"ring exchange under the sanitizer: UNEXPECTED reports\n{e}")
        return False
    dt = time.perf_counter() - t0
    match = all(np.array_equal(outs[r], sends[(r - 1) % gpus]) for r in range(gpus))
    ti = sum(p.result().thread_instructions for p in pend)
    what = f"ring exchange, {gpus} GPUs x {n * 4 // 1024} KiB" + (" (sanitizer)" if sanitize else "")
    extra = "no reports" if sanitize else f"{gpus * n * 4 / dt / 1e6:.1f} MB/s through peer pointers"
    print(f"{what:<42} {'every chunk from its sender' if match else 'MISMATCH'}  {ti:>10,} thread-instructions in "
          f"{dt * 1e3:6.1f} ms ({ti / dt / 1e6:.1f} M/s), {extra}")
    return match


def _partitions(m: Module, path: str) -> bool:
    node = Node(gpus=1, sms=132)
    gpu = node.devices[0]
    comm, gemm = gpu.stream(sms=range(0, 20)), gpu.stream(sms=range(20, 132))
    threads, waves = 128, 3
    blocks = 112 * 16 * waves  # 16 blocks of 128 threads fill an SM: 3 waves on 112 SMs
    n = blocks * threads
    x = (np.arange(n, dtype=np.float32) % 97) / 8
    y = np.zeros(n, np.float32)
    done = rt.empty(1, np.uint32, device=gpu)
    sm_comm, polls = np.zeros(20, np.uint32), np.zeros(20, np.uint32)
    sm_gemm = np.zeros(blocks, np.uint32)
    pc = m.kernel("comm_persistent").launch((20,), (threads,), [done, np.uint32(blocks), sm_comm, polls],
                                            device=gpu, stream=comm)
    pg = m.kernel("compute_square").launch((blocks,), (threads,), [x, y, np.int32(n), done, sm_gemm], device=gpu,
                                           stream=gemm)
    t0 = time.perf_counter()
    node.synchronize()
    dt = time.perf_counter() - t0
    rc, rg = pc.result(), pg.result()
    ok = bool(np.array_equal(y, x * x + np.float32(1)))
    ok &= sorted(sm_comm.tolist()) == list(range(20)) and int(sm_gemm.min()) >= 20
    ok &= not rc.per_sm[20:].any() and not rg.per_sm[:20].any()
    print(f"persistent kernel on SMs 0-19 spinning on a flag {'':<6} {'both finish' if ok else 'FAILED'}: "
          f"comm_persistent polled {int(polls.mean()):,} times per block while compute_square ran {rg.waves} waves "
          f"on SMs {int(sm_gemm.min())}-{int(sm_gemm.max())} ({rg.thread_instructions:,} thread-instructions, "
          f"{dt * 1e3:.0f} ms)")
    try:
        out = draw_sm_map(node, path, title="GPU 0: comm_persistent on SMs 0-19, compute_square on SMs 20-131")
        print(f"SM map (which SMs ran which kernel, over time): {out}")
    except (ImportError, OutputRefused) as e:
        print(f"SM map: not drawn ({e})")
    return ok
