"""The host side of the intranode communication kernels (`ptxforge.kernels.comm`), one rank at a time.

A `CommRank` is one rank's view: its device, the `Fabric` that gives every rank a communication buffer
every other rank's kernels can reach, and the kernels' launch arguments. Dispatch and combine are written
as generators of *phases*: each yields the launches it queued, and whoever drives it runs them before
resuming it. A single process driving every rank of a `Node` (`ptxforge.ep.node_group`) resumes all ranks'
generators after one `node.synchronize()`; a process of a gloo job drives its own rank and waits for its own
launches (which wait for the peers' processes through shared memory).

dispatch: phase 1 runs `intranode_notify` (counts and prefix sums exchanged through the buffers; the CPU then
waits for the counts to size the outputs, as DeepEP does without num_worst_tokens); phase 2 runs
`intranode_dispatch`. combine: one phase, `intranode_notify` (which zeroes the ring counters behind a
barrier of all ranks) then `intranode_combine` on the same stream.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import ml_dtypes
import numpy as np

from ptxforge import environment
from ptxforge.ep.errors import CommTimeout
from ptxforge.kernels import comm as K
from ptxforge.runtime.buffers import DeviceBuffer
from ptxforge.runtime.result import LaunchResult

if TYPE_CHECKING:
    from ptxforge.dsl.kernel import Kernel
    from ptxforge.emu.node import PendingLaunch
    from ptxforge.runtime.device import Device

_SPECIAL: dict = {}


def _special(k, **consts):
    key = (k.name, tuple(sorted(consts.items())))
    if key not in _SPECIAL:
        _SPECIAL[key] = k.specialize(**consts)
    return _SPECIAL[key]


class Fabric(Protocol):
    """Every rank's communication buffer, reachable by every rank's kernels (kernel_backend's `NodeFabric`
    and `IpcFabric`)."""

    size: int
    peer_lost: bool  # a peer's process died: release frees this rank's buffer only

    def ensure(self, rank: int, nbytes: int) -> int: ...

    def addresses(self) -> list[int]: ...

    def own(self, rank: int) -> DeviceBuffer | None: ...

    def release(self) -> None: ...


@dataclass
class Tunables:
    """The kernels' share of DeepEP's Config: channels (num_sms / 2), ring slots, tokens per chunk."""

    num_sms: int
    ring: int
    chunk: int

    @property
    def channels(self) -> int:
        return self.num_sms // 2


@dataclass
class Launched:
    """One kernel launch of a call: which SM each block ran on and the launch's statistics."""

    call: str
    kernel: str
    block_sm: DeviceBuffer
    pending: PendingLaunch[LaunchResult] | LaunchResult  # a stream launch's, or a launch that ran at once

    def result(self) -> LaunchResult:
        return self.pending if isinstance(self.pending, LaunchResult) else self.pending.result()


@dataclass
class Notified:
    """What a dispatch's notify step told this rank, before any data moves."""

    rank_prefix: np.ndarray  # int32 [R, R]: tokens each source rank sends each rank, prefix-summed over sources
    chan_prefix: np.ndarray  # int32 [R, C]
    recv_chan: np.ndarray    # int32 [R, C]
    expert_recv: np.ndarray  # int32 [experts per rank]: tokens this rank's experts receive

    @property
    def matrix(self) -> np.ndarray:
        """int64 [R, R]: tokens rank src sends rank dst (the same on every rank)."""
        return np.diff(self.rank_prefix.astype(np.int64), axis=0, prepend=0)


@dataclass
class DispatchOut:
    recv_x: np.ndarray           # uint8 [N, x_bytes]
    recv_scales: np.ndarray | None
    recv_idx: np.ndarray | None  # int64 [N, K], local ids or -1
    recv_w: np.ndarray | None    # f32 [N, K]
    recv_src: np.ndarray         # int32 [N]
    send_head: np.ndarray        # int32 [T, R]
    rank_prefix: np.ndarray      # int32 [R, R]
    chan_prefix: np.ndarray      # int32 [R, C]
    recv_chan: np.ndarray        # int32 [R, C]
    expert_recv: np.ndarray      # int32 [experts per rank]
    launches: list = field(default_factory=list)


class CommRank:
    """Rank `rank` of `world`: launches on `device` (an emulated GPU: a Node's, or a process's own)."""

    def __init__(self, rank: int, world: int, device: Device, fabric: Fabric,
                 timeout_s: float = K.DEFAULT_TIMEOUT_S) -> None:
        self.rank, self.world, self.device, self.fabric = rank, world, device, fabric
        self.timeout_s = timeout_s  # each wait of the kernels (a spin on a peer's counter) is bounded by it
        self.epoch = 0  # notify barriers passed with the current buffer
        self._streams: dict = {}  # num_sms -> (stream or None, its SM budget record)
        self.sm_budget: dict | None = None  # how the last launch was held to its SM budget (see `stream`)
        self._temps: list = []  # device arrays of the call in progress
        self.launches: list[Launched] = []  # the kernels of the last dispatch and the last combine

    # ------------------------------------------------------------------ plumbing
    def buf(self, array: np.ndarray, name: str) -> DeviceBuffer:
        """A device copy of `array` (an empty array gets one zero element: the kernel reads none of it)."""
        a = np.ascontiguousarray(array)
        if a.size == 0:
            a = np.zeros(1, a.dtype)
        b = DeviceBuffer.from_array(a, device=self.device, name=name)
        self._temps.append(b)
        return b

    def empty(self, shape: tuple[int, ...], dtype: Any, name: str) -> DeviceBuffer:
        """A zeroed device array; `host(buf, shape)` reads it back (zero rows are allowed)."""
        shape = tuple(int(s) for s in shape)
        b = DeviceBuffer((max(1, int(np.prod(shape))),), dtype, device=self.device, name=name)
        b.logical_shape = shape  # type: ignore[attr-defined]  # read back by _host
        self._temps.append(b)
        return b

    def _free_temps(self) -> None:
        """Free the call's arrays (its results were copied to the host)."""
        for b in self._temps:
            b.free()
        self._temps = []

    def stream(self, num_sms: int) -> Any:
        """Where the kernels of an SM budget of `num_sms` run, made once per budget: a stream on SMs
        0..num_sms-1 (emulated node GPUs); on a CUDA GPU, the stream of a green context of at least num_sms
        SMs where the driver has them (`ptxforge.runtime.cuda_green`); else None (each launch runs at once
        and its grid of num_sms persistent blocks is the budget). `sm_budget` records which was used:
        {"num_sms", "how": "SM partition" | "green context" | "persistent grid", "sms": SMs the kernels
        may use (None: not confined beyond the grid), "why": why not a green context on a GPU}.
        PTXFORGE_GREEN_CONTEXTS=0 in the environment keeps a GPU on the persistent grid."""
        if num_sms not in self._streams:
            self._streams[num_sms] = self._budget(num_sms)
        s, self.sm_budget = self._streams[num_sms]
        return s

    def _budget(self, num_sms: int) -> tuple[Any, dict]:
        dev = self.device
        if dev.streams_supported:
            sms = min(num_sms, dev.num_sms)
            return dev.stream(sms=range(0, sms)), {"num_sms": num_sms, "how": "SM partition", "sms": sms, "why": ""}
        if dev.kind == "cuda":
            from ptxforge.runtime.cuda_green import green_stream_or_none  # the GPU path only

            if not environment.green_contexts():
                return None, {"num_sms": num_sms, "how": "persistent grid", "sms": None,
                              "why": "PTXFORGE_GREEN_CONTEXTS=0"}
            gs, why = green_stream_or_none(dev, num_sms)  # type: ignore[arg-type]  # kind "cuda": a CudaDevice
            if gs is not None:
                return gs, {"num_sms": num_sms, "how": "green context", "sms": gs.sms, "why": ""}
            return None, {"num_sms": num_sms, "how": "persistent grid", "sms": None, "why": why}
        return None, {"num_sms": num_sms, "how": "persistent grid", "sms": None, "why": ""}

    def close_streams(self) -> None:
        """Destroy the green contexts made for this rank's SM budgets (the emulator's streams need nothing)."""
        streams, self._streams = self._streams, {}
        for s, _ in streams.values():
            if s is not None and hasattr(s, "close"):
                s.close()

    def launch(self, call: str, kern: Kernel, grid: int, block: int, args: list, num_sms: int) -> Launched:
        block_sm = DeviceBuffer((grid,), np.uint32, device=self.device, name="block_sm")
        s = self.stream(num_sms)
        kw = {"stream": s} if s is not None else {}
        p = kern.launch(grid=(grid,), block=(block,), args=_with_block_sm(args, block_sm), device=self.device, **kw)
        got = Launched(call, kern.name, block_sm, p)
        self.launches.append(got)
        return got

    def _timeout_ns(self) -> np.uint64:
        t = float(self.timeout_s)
        if not t > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        return np.uint64(min(int(t * 1e9), 2**64 - 1))

    def formats(self) -> DeviceBuffer:
        """The timeout messages' printf formats on this rank's device (made once)."""
        if getattr(self, "_formats", None) is None:
            self._formats = DeviceBuffer.from_array(np.frombuffer(K.FORMAT_BYTES, np.uint8), device=self.device,
                                                    name="timeout formats")
        return self._formats

    def timeout_error(self) -> CommTimeout | None:
        """After a kernel fault: the `CommTimeout` this rank's timeout record describes, or None (no wait of
        this rank timed out, or its memory cannot be read, as on a GPU after a trap)."""
        own = self.fabric.own(self.rank)
        if own is None:
            return None
        try:
            raw = own.to_host().view(np.uint8)[K.ERROR_OFF:K.ERROR_OFF + 4 * K.TIMEOUT_WORDS]
        except Exception:  # noqa: BLE001  # a GPU context lost with the trap: nothing to read
            return None
        line = describe_timeout(raw.copy().view(np.uint32).tolist())
        if line is None:
            return None
        return CommTimeout(f"{line}; each wait is bounded by timeout_s = {self.timeout_s:g} s (Buffer(timeout_s=...), "
                           f"NodeGroup(timeout_s=...)); the kernel trapped: a peer that stopped, or a protocol error")

    def dispatch_layout(self, x_bytes: int, scale_words: int, k: int, has_weights: bool, num_experts: int,
                        tun: Tunables) -> K.CommLayout:
        """The buffer a dispatch of rows of `x_bytes` (+ scale words, k ids and weights) needs."""
        slot = K.DispatchSlot(x_bytes, scale_words, k, has_weights)
        return K.CommLayout(self.world, num_experts, tun.channels, tun.ring, slot.nbytes)

    def combine_layout(self, hidden: int, k: int, num_experts: int, tun: Tunables) -> K.CommLayout:
        """The buffer a combine of BF16 rows of `hidden` (+ k weights) needs."""
        return K.CommLayout(self.world, num_experts, tun.channels, tun.ring, K.combine_slot_bytes(hidden, k))

    def grows(self, layout: K.CommLayout) -> bool:
        """Whether `layout` needs a larger buffer than every rank has (`ensure` then is a collective)."""
        return layout.nbytes > self.fabric.size

    def ensure(self, layout: K.CommLayout) -> None:
        """Every rank's buffer holds `layout` (a collective: every rank calls it with the same layout)."""
        generation = self.fabric.ensure(self.rank, layout.nbytes)
        if generation != getattr(self, "generation", None):  # fresh buffers: their barrier starts at 0
            self.generation, self.epoch = generation, 0
        self.peers = self.buf(np.asarray(self.fabric.addresses(), np.uint64), "peer buffers")

    def _notify(self, in_rank: np.ndarray, per_expert: np.ndarray, layout: K.CommLayout, per_channel: int,
                tun: Tunables, call: str):
        self.epoch += 1
        r, c, e = self.world, tun.channels, layout.experts
        out = {n: self.empty(s, np.int32, n) for n, s in (("rank_prefix", (r, r)), ("chan_prefix", (r, c)),
                                                           ("recv_chan", (r, c)),
                                                           ("expert_recv", (max(1, e // r),)))}
        args = [self.buf(in_rank.astype(np.uint8), "is_token_in_rank"), self.buf(per_expert.astype(np.int32),
                                                                                 "tokens per expert"),
                self.peers, out["rank_prefix"], out["chan_prefix"], out["recv_chan"], out["expert_recv"],
                self.formats(), np.uint32(in_rank.shape[0]), np.uint32(per_channel), np.uint32(self.rank),
                np.uint32(r), np.uint32(c), np.uint32(e), np.uint32(e // r), np.uint32(self.epoch),
                np.uint32(layout.notify_off), np.uint32(layout.counters_off), np.uint32(layout.counters_bytes // 4),
                self._timeout_ns()]
        self.launch(call, K.intranode_notify, 1, K.NOTIFY_THREADS, args, tun.num_sms)
        return out

    # ------------------------------------------------------------------ dispatch
    def _forget(self, call: str) -> None:
        for la in self.launches:
            if la.call == call:
                la.block_sm.free()
        self.launches = [la for la in self.launches if la.call != call]

    def dispatch(self, x: np.ndarray, scales: np.ndarray | None, topk_idx: np.ndarray | None,
                 topk_w: np.ndarray | None, in_rank: np.ndarray, per_expert: np.ndarray, num_experts: int,
                 tun: Tunables, bug: str = "",
                 on_notified: Callable[[Notified], object] | None = None) -> Generator[None, None, DispatchOut]:
        """Generator: yields twice (after queuing notify, then dispatch); returns a `DispatchOut`.

        x: uint8 [T, x_bytes] (the payload's bytes); scales: uint32 [T, words] or None; topk_idx int64 [T, K];
        topk_w f32 [T, K]; in_rank bool [T, R]; per_expert int [E]. `on_notified` sees what the notify step
        told this rank (`Notified`: the counts, the same matrix on every rank) before the data moves."""
        self._forget("dispatch")
        self._free_temps()  # what a call that raised left behind
        t_, xb = x.shape
        k_ = topk_idx.shape[1] if topk_idx is not None else 0
        sw = scales.shape[1] if scales is not None else 0
        slot = K.DispatchSlot(xb, sw, k_, topk_w is not None)
        layout = self.dispatch_layout(xb, sw, k_, topk_w is not None, num_experts, tun)
        self.ensure(layout)
        per_channel = max(1, -(-t_ // tun.channels))
        notified = self._notify(in_rank, per_expert, layout, per_channel, tun, "dispatch")
        yield
        epr = num_experts // self.world
        told = Notified(_host(notified["rank_prefix"]), _host(notified["chan_prefix"]), _host(notified["recv_chan"]),
                        _host(notified["expert_recv"])[:epr])
        if on_notified is not None:
            on_notified(told)
        rank_prefix = told.rank_prefix
        n = int(rank_prefix[-1, self.rank])
        out = {"recv_x": self.empty((n, xb), np.uint8, "recv_x"), "recv_src": self.empty((n,), np.int32, "recv_src"),
               "send_head": self.empty((t_, self.world), np.int32, "send_head"),
               "recv_scales": self.empty((n, max(sw, 1)), np.uint32, "recv_scales"),
               "recv_idx": self.empty((n, max(k_, 1)), np.int64, "recv_topk_idx"),
               "recv_w": self.empty((n, max(k_, 1)), np.float32, "recv_topk_weights")}
        kern = _special(K.intranode_dispatch, R=self.world, UNIT=K.copy_unit(xb), HAS_SCALES=scales is not None,
                        HAS_TOPK=topk_idx is not None, HAS_W=topk_w is not None, BUG=bug)
        dummy = self.empty((1,), np.uint32, "unused")
        args = [self.buf(x, "x"), self.buf(scales, "x scales") if scales is not None else dummy,
                self.buf(topk_idx, "topk_idx") if topk_idx is not None else dummy,
                self.buf(topk_w, "topk_weights") if topk_w is not None else dummy,
                self.buf(in_rank.astype(np.uint8), "is_token_in_rank"), notified["rank_prefix"],
                notified["chan_prefix"], notified["recv_chan"], self.peers, out["recv_x"], out["recv_scales"],
                out["recv_idx"], out["recv_w"], out["recv_src"], out["send_head"], self.formats(),
                np.uint32(t_), np.uint32(per_channel), np.uint32(self.rank), np.uint32(xb), np.uint32(sw),
                np.uint32(k_), np.uint32(tun.ring), np.uint32(tun.chunk), np.uint32(slot.nbytes),
                np.uint32(slot.scales_off), np.uint32(slot.idx_off), np.uint32(slot.w_off), np.uint32(slot.src_off),
                np.uint32(layout.counters_off), np.uint32(layout.ring_off), np.int64(self.rank * epr),
                np.int64((self.rank + 1) * epr), self._timeout_ns()]
        self.launch("dispatch", kern, tun.num_sms, 32 * self.world, args, tun.num_sms)
        yield
        host = {k: _host(v) for k, v in out.items()}
        result = DispatchOut(host["recv_x"], host["recv_scales"][:, :sw] if scales is not None else None,
                           host["recv_idx"][:, :k_] if topk_idx is not None else None,
                           host["recv_w"][:, :k_] if topk_w is not None else None, host["recv_src"],
                           host["send_head"], rank_prefix, told.chan_prefix, told.recv_chan, told.expert_recv,
                           [la for la in self.launches if la.call == "dispatch"])
        self._free_temps()
        return result

    # ------------------------------------------------------------------ combine
    def combine(self, x: np.ndarray, w: np.ndarray | None, biases: list, in_rank: np.ndarray,
                rank_prefix: np.ndarray, recv_chan: np.ndarray, num_experts: int,
                tun: Tunables) -> Generator[None, None, tuple[np.ndarray, np.ndarray | None]]:
        """Generator: yields once (notify + combine queued); returns (bf16 [T, H] as ml_dtypes, f32 [T, K] or
        None). x: bf16 rows [N, H] as ml_dtypes.bfloat16 in the dispatch's receive order."""
        self._forget("combine")
        self._free_temps()
        t_ = in_rank.shape[0]
        h = x.shape[1]
        k_ = w.shape[1] if w is not None else 0
        slot_bytes = K.combine_slot_bytes(h, k_)
        layout = self.combine_layout(h, k_, num_experts, tun)
        self.ensure(layout)
        per_channel = max(1, -(-t_ // tun.channels))
        self._notify(in_rank, np.zeros(num_experts, np.int32), layout, per_channel, tun, "combine")
        out = self.empty((t_, h), ml_dtypes.bfloat16, "combined_x")
        out_w = self.empty((t_, max(k_, 1)), np.float32, "combined_topk_weights")
        dummy = self.empty((1,), np.uint32, "unused")
        kern = _special(K.intranode_combine, R=self.world, UNIT=K.copy_unit(2 * h), NUM_BIAS=len(biases),
                        HAS_W=w is not None)
        bias_bufs = [self.buf(b, f"bias {i}") for i, b in enumerate(biases)] + [dummy] * (2 - len(biases))
        wbuf = self.buf(w, "combine weights") if w is not None else dummy
        args = [self.buf(x.view(np.uint8), "combine x"), wbuf, *bias_bufs,
                self.buf(in_rank.astype(np.uint8), "is_token_in_rank"), self.buf(rank_prefix.astype(np.int32),
                                                                                 "rank_prefix_matrix"),
                self.buf(recv_chan.astype(np.int32), "recv_channel_prefix_matrix"), self.peers, out, out_w,
                self.formats(), np.uint32(t_), np.uint32(per_channel), np.uint32(self.rank), np.uint32(h),
                np.uint32(k_), np.uint32(tun.ring), np.uint32(tun.chunk), np.uint32(slot_bytes),
                np.uint32(K._align(2 * h)),
                np.uint32(layout.counters_off), np.uint32(layout.ring_off), self._timeout_ns()]
        self.launch("combine", kern, tun.num_sms, 32 * self.world, args, tun.num_sms)
        yield
        result = _host(out), (_host(out_w)[:, :k_].copy() if w is not None else None)
        self._free_temps()
        return result

    # ------------------------------------------------------------------ the SM map
    def sm_map(self) -> list[dict]:
        """For each kernel of the last dispatch and combine: per block, its SM, role and thread-instructions."""
        rows = []
        for la in self.launches:
            res = la.result()
            sms = la.block_sm.to_host().tolist()
            per_sm = np.asarray(res.per_sm)
            for b, sm in enumerate(sms):
                if la.kernel.startswith("intranode_notify"):
                    role, channel = "notify", None
                else:
                    role, channel = ("sender" if b % 2 == 0 else "receiver"), b // 2
                rows.append({"call": la.call, "kernel": la.kernel, "block": b, "sm": int(sm), "role": role,
                             "channel": channel, "thread_instructions": int(per_sm[sm]) if sm < per_sm.size else 0})
        return rows


def describe_timeout(record: list[int]) -> str | None:
    """The line a timeout record (comm.py's TIMEOUT_WORDS u32) stands for, the kernel's printf format filled
    in; None for an empty or unreadable record."""
    kernel, role = record[0] - 1, record[1]
    if not (0 <= kernel < len(K.KERNELS) and 0 <= role < len(K.ROLES)):
        return None
    fmt = K.TIMEOUT_FORMATS.get((K.KERNELS[kernel], K.ROLES[role]))
    if fmt is None:
        return None
    return (fmt % tuple(record[2:2 + len(K.TIMEOUT_ARGS[K.ROLES[role]])])).rstrip("\n")


def _host(b: DeviceBuffer) -> np.ndarray:
    """A copy of device array `b` in its logical shape."""
    shape = b.logical_shape  # type: ignore[attr-defined]  # set by CommRank.empty
    return b.to_host()[:int(np.prod(shape))].reshape(shape).copy()


def _with_block_sm(args: list, block_sm) -> list:
    """The kernels take block_sm right after their last pointer argument, before the scalars."""
    i = next(j for j, a in enumerate(args) if isinstance(a, np.generic))
    return [*args[:i], block_sm, *args[i:]]
