"""`backend="kernels"`: dispatch and combine by the intranode communication kernels, in the torch backend's
formats (the same tensors, dtypes and handle fields, bit for bit).

Shared by `Buffer` (one rank a process) and `NodeGroup` (every rank of a `Node` in one process):
- `Fabric`s give every rank a communication buffer that every rank's kernels reach: `NodeFabric` (one
  address space, peer memory of a Node) and `IpcFabric` (IPC handles exchanged through the process group:
  CUDA IPC on GPUs, `ptxforge.runtime.cuda_ipc`; emulator IPC on CPU, `ptxforge.emu.ipc`).
- `start_dispatch` / `finish_dispatch` and `start_combine` / `finish_combine` convert torch tensors to what
  `CommRank` takes and its results back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist

from ptxforge.emu import ipc
from ptxforge.ep.errors import CommTimeout
from ptxforge.ep.handle import DispatchHandle, pad_rows
from ptxforge.ep.intranode import CommRank, DispatchOut, Notified, Tunables
from ptxforge.ep.rows import Field, RowFormat
from ptxforge.errors import KernelFault
from ptxforge.runtime import cuda_ipc
from ptxforge.runtime.buffers import DeviceBuffer
from ptxforge.runtime.cuda_device import cuda_device

if TYPE_CHECKING:
    from ptxforge.emu.node import Node
    from ptxforge.ep.backends.base import Received
    from ptxforge.ep.config import Config
    from ptxforge.ep.rows import RowFormat
    from ptxforge.runtime.buffers import DeviceBuffer
    from ptxforge.runtime.device import Device

R = TypeVar("R")
_generations = itertools.count(1)


class NodeFabric:
    """Communication buffers of the ranks of one `Node` (rank r on node.devices[r]); they are allocated
    together, so the first rank to ask for a larger size grows every rank's."""

    def __init__(self, node: Node, world: int) -> None:
        self.node, self.world = node, world
        self.bufs: list = [None] * world
        self.size = 0
        self.generation = 0
        self.peer_lost = False  # one process: no peer process to lose

    def ensure(self, rank: int, nbytes: int) -> int:
        if nbytes > self.size:
            for b in self.bufs:
                if b is not None:
                    b.free()
            self.size = max(nbytes, 2 * self.size)
            self.bufs = [DeviceBuffer((self.size,), np.uint8, device=self.node.devices[r], name=f"comm buffer {r}")
                         for r in range(self.world)]
            self.generation = next(_generations)
        return self.generation

    def addresses(self) -> list[int]:
        return [b.address for b in self.bufs]

    def own(self, rank: int) -> DeviceBuffer | None:
        """Rank `rank`'s buffer (None before the first call)."""
        return self.bufs[rank]

    def release(self) -> None:
        for b in self.bufs:
            if b is not None:
                b.free()
        self.bufs, self.size = [None] * self.world, 0


def ipc_module(kind: str | None) -> ModuleType:
    """The IPC calls for a device of `kind` (`Device.kind`; the same names and shapes in both): CUDA IPC on a
    GPU (`ptxforge.runtime.cuda_ipc`), emulator IPC on an emulated GPU (`ptxforge.emu.ipc`)."""
    if kind == "cuda":
        return cuda_ipc
    if kind == "emu":
        return ipc
    raise NotImplementedError(f"ptxforge.ep backend='kernels' shares buffers between processes by IPC on a CUDA "
                              f"GPU or an emulated one; a device of kind {kind!r} has no IPC")


class IpcFabric:
    """Each process's own buffer on its device (a CUDA GPU or an emulated IPC GPU), the others' mapped through
    IPC handles exchanged with all_gather_object on the process group. A collective: every rank grows (and
    releases) at the same call, closing the peers' buffers before a barrier and freeing its own after it
    (CUDA requires the importers' close before the owner's free)."""

    def __init__(self, device: Device, group: dist.ProcessGroup | None, world: int) -> None:
        self.device, self.group, self.world = device, group, world
        self.ipc = ipc_module(device.kind)
        self.buf: DeviceBuffer | None = None
        self.size = 0
        self.generation = 0
        self._addresses: list[int] = []
        self._opened: list[int] = []
        self.peer_lost = False  # set when a peer died: releasing then frees this rank's buffer only

    def ensure(self, rank: int, nbytes: int) -> int:
        if nbytes > self.size:
            size = max(nbytes, 2 * self.size)
            self._drop()  # every rank is past the calls that used the old buffers (agreed)
            self.size = size
            self.buf = DeviceBuffer((self.size,), np.uint8, device=self.device, name=f"comm buffer {rank}")
            handles = [None] * self.world
            dist.all_gather_object(handles, self.ipc.ipc_get_mem_handle(self.buf), group=self.group)
            self._addresses = [self.buf.address if r == rank else self.ipc.ipc_open_mem_handle(h, device=self.device)
                               for r, h in enumerate(handles)]
            self._opened = [a for r, a in enumerate(self._addresses) if r != rank]
            self.generation = next(_generations)
        return self.generation

    def addresses(self) -> list[int]:
        return self._addresses

    def own(self, rank: int) -> DeviceBuffer | None:
        """This process's buffer (rank `rank` is this process's; None before the first call)."""
        return self.buf

    def _drop(self) -> None:
        if self.buf is None:
            return
        if self.peer_lost:  # the group is broken and a dead peer's mapping is gone (reclaimed): no barrier
            self._opened = []
            self.buf.free()
            self.buf, self.size, self._addresses = None, 0, []
            return
        for a in self._opened:
            self.ipc.ipc_close_mem_handle(a, device=self.device)
        self._opened = []
        dist.barrier(group=self.group)  # no rank has a peer's buffer open any more
        self.buf.free()
        self.buf, self.size, self._addresses = None, 0, []

    def release(self) -> None:
        self._drop()


_IPC_DEVICES: dict = {}


def ipc_device_for(rank: int, world: int) -> Device:
    """This process's emulated GPU for rank `rank` of a gloo job of `world` (one a process, kept open)."""
    ipc = ipc_module("emu")
    key = (rank, world)
    if key not in _IPC_DEVICES:
        _IPC_DEVICES[key] = ipc.ipc_device(rank, world)
    return _IPC_DEVICES[key]


def comm_device(rank: int, world: int, kind: str, ordinal: int | None = None) -> Device:
    """The device this process's rank runs the communication kernels on: kind "cuda" (GPU `ordinal`, else
    torch's current GPU; several ranks may share one GPU) or "emu" (an emulated GPU with IPC memory)."""
    if kind == "emu":
        return ipc_device_for(rank, world)
    if kind == "cuda":
        if ordinal is None:
            ordinal = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return cuda_device(int(ordinal))
    raise ValueError(f"backend='kernels' runs on 'cuda' or 'emu' devices, not {kind!r}")


def check_peers_during_launches(check: Callable[[], None] | None) -> None:
    """Have the launches on this process's emulated IPC GPUs call `check` at every watchdog tick (None: stop);
    a CUDA GPU runs no such hook (the kernels' own timeout bounds its waits)."""
    ipc.set_peer_check(check)


def dispatch_format(x: torch.Tensor, scales: torch.Tensor | None, topk_idx: torch.Tensor | None,
                    topk_weights: torch.Tensor | None) -> RowFormat:
    """What one token's ring slot carries, for `Buffer.stats()`."""
    k = topk_idx.shape[1] if topk_idx is not None else 0
    return RowFormat([Field("x", x.dtype, x.shape[1], "payload"),
                      Field("scales", scales.dtype if scales is not None else torch.float32,
                            scales.shape[1] if scales is not None else 0, "scales"),
                      Field("topk_idx", torch.int64, k, "meta"),
                      Field("topk_weights", torch.float32, k if topk_weights is not None else 0, "meta"),
                      Field("src", torch.int32, 1, "meta")])


# --------------------------------------------------------------------------- conversions

def _bytes(t: torch.Tensor) -> np.ndarray:
    """A 2-D tensor's rows as bytes (uint8 [rows, row bytes])."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8).numpy().reshape(t.shape[0], t.shape[1] * t.element_size())


def _words(t: torch.Tensor) -> np.ndarray:
    return _bytes(t).view(np.uint32)


def _from_bytes(a: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """uint8 rows [N, B] as [N, B / itemsize] of `dtype` (N may be 0)."""
    if a.shape[0] == 0:
        return torch.empty((0, a.shape[1] // torch.empty(0, dtype=dtype).element_size()), dtype=dtype, device=device)
    return torch.from_numpy(np.ascontiguousarray(a)).view(dtype).to(device)


def _bf16_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _bf16_torch(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(device)


def start_dispatch(comm: CommRank, x: torch.Tensor, x_scales: torch.Tensor | None, topk_idx: torch.Tensor | None,
                   topk_weights: torch.Tensor | None, in_rank: torch.Tensor, per_expert: torch.Tensor,
                   num_experts: int, tun: Tunables, bug: str = "",
                   on_notified: Callable[[Notified], object] | None = None) -> Generator[None, None, DispatchOut]:
    """The rank's dispatch generator (see `CommRank.dispatch`) for torch inputs."""
    return comm.dispatch(_bytes(x), _words(x_scales) if x_scales is not None else None,
                         topk_idx.detach().cpu().to(torch.int64).numpy() if topk_idx is not None else None,
                         topk_weights.detach().cpu().to(torch.float32).numpy() if topk_weights is not None else None,
                         in_rank.detach().cpu().numpy(), per_expert.detach().cpu().numpy(), num_experts, tun, bug,
                         on_notified)


def finish_dispatch(out: DispatchOut, x: torch.Tensor, x_scales: torch.Tensor | None, in_rank: torch.Tensor,
                    expert_alignment: int) -> tuple[Received, torch.Tensor | None, torch.Tensor | None, list[int],
                                                    tuple[torch.Tensor, ...], int]:
    """(recv in x's form, recv_topk_idx, recv_topk_weights, per-expert counts, handle fields, N)."""
    dev = x.device
    recv_x = _from_bytes(out.recv_x, x.dtype, dev)
    recv: Received = recv_x
    if x_scales is not None and out.recv_scales is not None:  # the scales come back when they were sent
        recv = (recv_x, _from_bytes(out.recv_scales.view(np.uint8).reshape(out.recv_scales.shape[0], -1),
                                    x_scales.dtype, dev))
    idx = torch.from_numpy(out.recv_idx.copy()).to(dev) if out.recv_idx is not None else None
    w = torch.from_numpy(out.recv_w.copy()).to(dev) if out.recv_w is not None else None
    counts = [-(-int(c) // expert_alignment) * expert_alignment for c in out.expert_recv.tolist()]
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int32)).to(dev)  # noqa: E731
    fields = (as_t(out.rank_prefix), as_t(out.chan_prefix), as_t(out.recv_chan), as_t(out.recv_src), in_rank,
              as_t(out.send_head))
    return recv, idx, w, counts, fields, int(out.recv_x.shape[0])


def start_combine(comm: CommRank, x: torch.Tensor, topk_weights: torch.Tensor | None,
                  bias: torch.Tensor | tuple[torch.Tensor | None, ...] | list[torch.Tensor | None] | None,
                  handle: DispatchHandle,
                  tun: Tunables) -> Generator[None, None, tuple[np.ndarray, np.ndarray | None]]:
    biases = [b for b in (bias if isinstance(bias, tuple | list) else (bias,)) if b is not None]
    n = handle._num_recv
    w = topk_weights[:n].detach().cpu().to(torch.float32).numpy() if topk_weights is not None else None
    return comm.combine(_bf16_np(x[:n]), w, [_bf16_np(b) for b in biases],
                        handle.is_token_in_rank.detach().cpu().numpy(), handle.rank_prefix_matrix.cpu().numpy(),
                        handle.recv_channel_prefix_matrix.cpu().numpy(), handle._num_experts, tun)


def finish_combine(result: tuple[np.ndarray, np.ndarray | None],
                   like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    out, w = result
    return _bf16_torch(out, like.device), (torch.from_numpy(w).to(like.device) if w is not None else None)


def drive(gen: Generator[None, None, R], device: Device, comm: CommRank | None = None) -> R:
    """Run one rank's generator alone: after each phase, wait for its launches (an emulated node's
    `synchronize`, when the rank's device is a GPU of one; other devices run each launch to completion).
    A kernel fault that a wait's timeout caused (`comm`'s timeout record says so) is raised as the
    `CommTimeout` that names it."""
    node = device.node
    try:
        while True:
            next(gen)
            if node is not None:
                node.synchronize()
    except StopIteration as stop:
        return stop.value
    except KernelFault as e:
        timed_out = _timeouts([comm] if comm is not None else [], e)
    raise timed_out from None


def tunables(config: Config, num_sms: int | None = None) -> Tunables:
    """The kernels' tunables from a DeepEP `Config` (num_sms: the handle's, for a combine)."""
    ring, chunk = config.num_max_nvl_chunked_recv_tokens, config.num_max_nvl_chunked_send_tokens
    if not 0 < chunk <= ring:
        raise ValueError(f"Config: num_max_nvl_chunked_send_tokens ({chunk}) must be between 1 and "
                         f"num_max_nvl_chunked_recv_tokens ({ring}), the ring's slots")
    return Tunables(num_sms or config.num_sms, ring, chunk)


def make_handle(fields: tuple[torch.Tensor, ...], n: int, t_: int, num_experts: int, num_worst: int, tun: Tunables,
                buffer_id: int, serial: int) -> DispatchHandle:
    return DispatchHandle(fields, _buffer_id=buffer_id, _serial=serial, _hops=None, _order=None, _num_tokens=t_,
                          _num_recv=n, _num_experts=num_experts, _num_worst=num_worst, _tunables=tun)


def pad_worst(num_worst: int, recv: Received, idx: torch.Tensor | None,
              w: torch.Tensor | None) -> tuple[Received, torch.Tensor | None, torch.Tensor | None]:
    if isinstance(recv, tuple):
        rx, rs, idx, w = pad_rows(num_worst, recv[0], recv[1], idx, w)
        return (rx, rs), idx, w
    rx, _, idx, w = pad_rows(num_worst, recv, None, idx, w)
    return rx, idx, w


def drive_all(node: Node, gens: list[Generator[None, None, Any]],
              alongside: Callable[[int], object] | None = None, comms: list[CommRank] | None = None) -> list[Any]:
    """Run every rank's generator of one `Node`: each phase queues all ranks' launches, then one
    `node.synchronize()` runs them together. `alongside(phase)` may queue other launches (say a GEMM on the
    SMs the communication leaves free) before phase `phase` (0, 1, ...) runs. A kernel fault that waits'
    timeouts caused (the `comms`' timeout records say so) is raised as the `CommTimeout` naming them."""
    results: list = [None] * len(gens)
    live = list(range(len(gens)))
    phase = 0
    while live:
        still = []
        for r in live:
            try:
                next(gens[r])
                still.append(r)
            except StopIteration as stop:
                results[r] = stop.value
        if still:
            if alongside is not None:
                alongside(phase)
            try:
                node.synchronize()
            except KernelFault as e:
                timed_out = _timeouts(comms or [], e)
                raise timed_out from None
            phase += 1
        live = still
    return results


def _timeouts(comms: list[CommRank], fault: KernelFault) -> BaseException:
    """The error to raise for `fault`: a `CommTimeout` naming every rank whose wait timed out (their
    records), else the fault itself."""
    found = [t for t in (c.timeout_error() for c in comms) if t is not None]
    if not found:
        return fault
    if len(found) == 1:
        return found[0]
    return CommTimeout("; ".join(str(t) for t in found))
