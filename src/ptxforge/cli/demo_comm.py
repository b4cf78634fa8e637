"""The communication-kernels section of `ptxforge demo`: an FP8 dispatch and a BF16 combine of 4 ranks by the
intranode kernels (ptxforge.kernels.comm) on SMs 0-19 of each emulated GPU while a GEMM runs on SMs 20-131
of GPU 0, with the SM map drawn (senders, receivers and the GEMM in their own colors). Needs torch (`ptxforge
demo` imports this module only when torch is installed)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch

from ptxforge import runtime as rt
from ptxforge.cli.sm_map import draw_sm_map
from ptxforge.dsl import ctaid, f32, kernel, ld, mad, ntid, ptr, range_, reg, st, tid, u32
from ptxforge.emu import Node
from ptxforge.ep import Config
from ptxforge.ep.buffer import DispatchHandle, DispatchOutput, Received
from ptxforge.ep.node_group import NodeGroup
from ptxforge.kernels import fp8
from ptxforge.outputs import OutputRefused

COMM_SMS = 20


def default_comm_map_path() -> str:
    return str(Path(tempfile.gettempdir()) / "ptxforge_comm_sm_map.png")


@kernel(arch="sm_90a")
def gemm_f32(a: ptr(f32), b: ptr(f32), c: ptr(f32), n: u32, k: u32) -> None:  # type: ignore[valid-type]  # DSL types
    """c[i, j] = sum_k a[i, k] * b[k, j] for square n x n outputs, one thread an element."""
    i = mad(ctaid.y, ntid.y, tid.y)
    j = mad(ctaid.x, ntid.x, tid.x)
    acc = reg.f32(0.0)
    for kk in range_(0, k):
        acc.set(mad(ld(a[mad(i, k, kk)]), ld(b[mad(kk, n, j)]), acc))
    st(c[mad(i, n, j)], acc)


def comm_section(path: str | None = None, *, tokens: int = 64, hidden: int = 512, n: int = 128) -> bool:
    print(f"\n== communication kernels on {COMM_SMS} SMs beside a GEMM: ptxforge.kernels.comm (Buffer(backend="
          "\"kernels\"))")
    world, experts, topk = 4, 32, 4
    node = Node(gpus=world, sms=132)
    group = NodeGroup(node, num_sms=COMM_SMS)
    xs, qs, idxs = [], [], []
    for r in range(world):
        g = torch.Generator().manual_seed(r)
        x = torch.randint(-4, 5, (tokens, hidden), generator=g).float().to(torch.bfloat16)
        q, sf, _ = fp8.per_token_quant_ref(x.view(torch.int16).numpy().view(ml_dtypes.bfloat16), True)
        xs.append(x)
        qs.append((torch.from_numpy(q).view(torch.float8_e4m3fn), torch.from_numpy(sf)))
        idxs.append(torch.topk(torch.rand((tokens, experts), generator=g), topk, dim=-1).indices)
    gpu0 = node.devices[0]
    gemm_stream = gpu0.stream(sms=range(COMM_SMS, 132))
    a = (np.arange(n * n, dtype=np.float32) % 7).reshape(n, n)
    b = (np.arange(n * n, dtype=np.float32) % 5).reshape(n, n)
    c = rt.empty((n * n,), np.float32, device=gpu0)
    launched = []

    def gemm_beside(phase):
        if phase == 1:  # while the dispatch kernel runs
            launched.append(gemm_f32.launch(grid=(n // 8, n // 16), block=(8, 16), args=[
                rt.to_device(a.reshape(-1), device=gpu0), rt.to_device(b.reshape(-1), device=gpu0), c,
                np.uint32(n), np.uint32(n)], device=gpu0, stream=gemm_stream))

    t0 = time.perf_counter()
    outs = group.dispatch(qs, topk_idx=idxs, num_experts=experts, config=Config(COMM_SMS, 6, 32),
                          alongside=gemm_beside)
    t_d = time.perf_counter() - t0
    roles = {(row["kernel"], row["sm"]): _label(row) for row in group.sm_map(0)}
    ok = bool(np.array_equal(c.to_host().reshape(n, n), a @ b))
    # each received row dequantized stands in for its expert's output; the combine sums the copies
    ys = [dequant(o[0]) for o in outs]
    t0 = time.perf_counter()
    handles = [_handle(o) for o in outs]
    comb = group.combine(ys, handles, config=Config(COMM_SMS, 6, 32))
    t_c = time.perf_counter() - t0
    for r in range(world):
        want = dequant(qs[r]).float() * handles[r].is_token_in_rank.sum(1, keepdim=True)
        ok &= bool(comb[r][0].equal(want.to(torch.bfloat16)))
    rows = group.sm_map(0)
    senders = sorted(row["sm"] for row in rows if row["call"] == "dispatch" and row["role"] == "sender")
    receivers = sorted(row["sm"] for row in rows if row["call"] == "dispatch" and row["role"] == "receiver")
    load = {role: [row["thread_instructions"] for row in rows if row["call"] == "dispatch" and row["role"] == role]
            for role in ("sender", "receiver")}
    gemm_sms = np.flatnonzero(np.asarray(launched[0].result().per_sm)) if launched else np.zeros(0, np.int64)
    ok &= bool(len(gemm_sms)) and int(min(gemm_sms)) >= COMM_SMS and max(senders + receivers) < COMM_SMS
    print(f"FP8 dispatch + BF16 combine, {world} GPUs x {tokens} tokens x {hidden}: "
          f"{'combine exact' if ok else 'FAILED'}; GPU 0 senders on SMs {senders[0]},{senders[1]},..."
          f"{senders[-1]} ({int(np.mean(load['sender'])):,} thread-instructions each on average), receivers on "
          f"SMs {receivers[0]},{receivers[1]},...{receivers[-1]} ({int(np.mean(load['receiver'])):,}); the GEMM "
          f"({n}x{n}x{n}, exact) on SMs {int(min(gemm_sms))}-{int(max(gemm_sms))}; {t_d:.1f} s + {t_c:.1f} s "
          "on the emulator")
    try:
        roles |= {(row["kernel"], row["sm"]): _label(row) for row in rows}
        out = draw_sm_map(node, path or default_comm_map_path(), roles=roles,
                          title=f"GPU 0: dispatch senders (even SMs) and receivers (odd) on SMs 0-{COMM_SMS - 1}, "
                                f"a GEMM on SMs {COMM_SMS}-131")
        print(f"SM map (communication roles beside the GEMM): {out}")
    except (ImportError, OutputRefused) as e:
        print(f"SM map: not drawn ({e})")
    return ok


def _label(row: dict[str, Any]) -> str:
    """'notify', 'dispatch sender', 'combine receiver', ..."""
    return row["role"] if row["role"] == "notify" else f"{row['call']} {row['role']}"


def _handle(out: DispatchOutput) -> DispatchHandle:
    """The handle of a dispatch made without one (only a cached dispatch returns None)."""
    assert out[4] is not None, "a dispatch without a cached handle returns its handle"
    return out[4]


def dequant(x: Received) -> torch.Tensor:
    """bf16 from (e4m3, f32 scales), as the experts see it."""
    assert isinstance(x, tuple), "the demo dispatches FP8 with scales"
    q, s = x
    assert s is not None, "the demo dispatches FP8 with scales"
    return (q.float().view(q.shape[0], -1, 128) * s.unsqueeze(2)).view(q.shape).to(torch.bfloat16)
