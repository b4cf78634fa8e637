"""The collectives `Buffer` uses, each bounded by a timeout that names the call and the ranks waited for.

- `agree(call, facts, complaint)`: one all_gather of every rank's facts (ints that must match: num_experts,
  hidden, ...) and its complaint about its own input (empty when fine). Any complaint, or facts that differ,
  raise `EPInputError` on every rank with every rank's message, before any data moves.
- `gather_counts(call, counts)`: one all_gather of every rank's send counts (per rank, node, expert).
- `exchange_rows(call, rows, send_counts, recv_counts)`: one all_to_all_single of a [N, B] uint8 tensor with uneven
  splits (rows for peer 0 first, then peer 1, ...); returns the received rows and counts per peer.

Each `agree` (the first collective of every call) marks in the default group's rendezvous store how many
calls this rank has entered, so a timeout can say which ranks never came (a private torch API, used only
when it is there).

gloo cannot carry float8 tensors, so every payload travels as bytes (`uint8` views), which also lets one
collective carry payload, scales and metadata together.
"""

from __future__ import annotations

import struct
from datetime import timedelta

import torch
import torch.distributed as dist

from ptxforge.ep import peers
from ptxforge.ep.errors import EPCallMismatchError, EPInputError, EPPeerLostError, EPTimeoutError

MESSAGE_BYTES = 400
CALL_BYTES = 32  # the call's name in an agreement message
MAX_FACTS = 16  # every call's agreement message has the same size, whatever its facts (gloo aborts the
# process when the ranks of a collective pass different sizes: a rank in another call must read as one)


def _ranges(ranks: list[int]) -> str:
    if ranks == list(range(ranks[0], ranks[0] + len(ranks))) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _store_of(group):
    """The default group's rendezvous store (a private torch API; None where it is not there)."""
    if group is not None and group != dist.group.WORLD:
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - then timeouts name the group's ranks only
        return None


def _agreement_blob(call: str, serial: int, facts: dict[str, int], complaint: str) -> bytes:
    """One rank's agreement message, the same size for every call: name, call number, facts, complaint."""
    if len(facts) > MAX_FACTS:
        raise ValueError(f"ptxforge.ep {call}: {len(facts)} facts to agree on, at most {MAX_FACTS}")
    vals = [int(v) for v in facts.values()] + [0] * (MAX_FACTS - len(facts))
    msg = complaint.encode()[:MESSAGE_BYTES]
    return (call.encode()[:CALL_BYTES].ljust(CALL_BYTES, b"\0") + struct.pack(f"<q{MAX_FACTS}q", serial, *vals)
            + struct.pack("<qq", *peers.this_process()) + struct.pack("<H", len(msg))
            + msg.ljust(MESSAGE_BYTES, b"\0"))


def _read_agreement(raw: bytes) -> tuple[str, int, tuple[int, ...], str, tuple[int, int]]:
    """(call, call number, facts' values, complaint, (host, pid)) of an agreement message."""
    call = raw[:CALL_BYTES].rstrip(b"\0").decode(errors="replace")
    serial, *vals = struct.unpack_from(f"<q{MAX_FACTS}q", raw, CALL_BYTES)
    at = CALL_BYTES + 8 * (MAX_FACTS + 1)
    host, pid = struct.unpack_from("<qq", raw, at)
    (n,) = struct.unpack_from("<H", raw, at + 16)
    return call, serial, tuple(vals), raw[at + 18:at + 18 + n].decode(errors="replace"), (host, pid)


def _same_call(read: list) -> None:
    """Raise EPCallMismatchError (the same text on every rank) unless every rank is in the same call: the same
    name and the same number of calls of this Buffer before it."""
    calls = [(m[0], m[1]) for m in read]
    if len(set(calls)) == 1:
        return
    by_call: dict[tuple[str, int], list[int]] = {}
    for r, c in enumerate(calls):
        by_call.setdefault(c, []).append(r)
    where = "; ".join(f"{'rank' if len(rs) == 1 else 'ranks'} {_ranges(rs)} called {name} (call {n} of this "
                      f"Buffer)" for (name, n), rs in by_call.items())
    raise EPCallMismatchError(
        f"ptxforge.ep: the ranks are not in the same call, so no rank moved any data: {where}. Every rank of the "
        f"group must make the same Buffer calls in the same order (a rank skipped a call or made another)")


class Transport:
    """Collectives over `group` (None: the default group) with a per-collective timeout in seconds."""

    def __init__(self, group: dist.ProcessGroup | None, timeout_s: float, tag: str = "") -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout_s = float(timeout_s)
        backend = dist.get_backend(group)
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self.control_bytes = 0  # bytes of agreement and count messages sent, for the stats
        self.store, self.tag, self.entered = _store_of(group), tag, 0
        self.processes: list[tuple[int, int]] = []  # each rank's (host, pid), learnt at every agreement

    def _arrive(self, call: str) -> None:
        """Note in the rendezvous store how many calls this rank has entered (and which), so that a rank
        that times out can say which ranks never came."""
        self.entered += 1
        if self.store is not None:
            self.store.set(f"ptxforge.ep/{self.tag}/{self.rank}", f"{self.entered} {call}")

    def _absent(self) -> str:
        if self.store is None:
            return ""
        behind = []
        for r in range(self.size):
            key = f"ptxforge.ep/{self.tag}/{r}"
            if r == self.rank:
                continue
            try:
                n, last = self.store.get(key).decode().split(" ", 1) if self.store.check([key]) else ("0", "none")
            except Exception:  # noqa: BLE001 - the store is a diagnostic aid only
                return ""
            if int(n) < self.entered:
                behind.append(f"rank {r} (its last was call {n}, {last})")
        if behind:
            return (f"; this is call {self.entered} of this Buffer and these ranks never entered it: "
                    + ", ".join(behind))
        return f"; every rank entered call {self.entered}, so one is stuck or dead inside it"

    def _wait(self, work, call: str, what: str) -> None:
        try:
            work.wait(timeout=timedelta(seconds=self.timeout_s))
        except RuntimeError as e:
            if peers.connection_lost(e):
                peers.reclaim_segments()
                raise self.lost(call, what, e) from None
            others = [r for r in range(self.size) if r != self.rank]
            raise EPTimeoutError(
                f"ptxforge.ep {call}: rank {self.rank} waited {self.timeout_s:g} s in {what} for ranks "
                f"{_ranges(others)} of the group and they did not all arrive{self._absent()} (did every rank make "
                f"the same calls in the same order?). The process group cannot be used after this. ({e})") from None

    def lost(self, call: str, what: str, error: BaseException) -> EPPeerLostError:
        """The error for a connection to a peer that closed during `what` of `call` (`error`: gloo's)."""
        return EPPeerLostError(f"ptxforge.ep {call}: rank {self.rank} lost its connection to a peer in {what} "
                               f"({peers.which_gone(self.processes, self.rank)}). The process group cannot be used "
                               f"after this. ({str(error).strip()[:300]})")

    def agree(self, call: str, facts: dict[str, int], complaint: str = "") -> list[dict[str, int]]:
        """All ranks' facts; raises EPInputError on every rank if any rank complains or the facts differ, and
        EPCallMismatchError if the ranks are in different calls (a rank skipped one or called another)."""
        self._arrive(call)
        mine = torch.frombuffer(bytearray(_agreement_blob(call, self.entered, facts, complaint)),
                                dtype=torch.uint8).to(self.device)
        everyone = [torch.empty_like(mine) for _ in range(self.size)]
        self._wait(dist.all_gather(everyone, mine, group=self.group, async_op=True), call,
                   "the input-agreement all_gather")
        self.control_bytes += mine.numel() * (self.size - 1)
        read = [_read_agreement(bytes(t.cpu().numpy())) for t in everyone]
        self.processes = [m[4] for m in read]
        _same_call(read)
        all_facts, problems = [], []
        for r, (_, _, vals, text, _) in enumerate(read):
            if text:
                problems.append(f"rank {r}: {text}")
            all_facts.append(dict(zip(facts, vals, strict=False)))
        if not problems:
            for name in facts:
                seen = [f[name] for f in all_facts]
                if len(set(seen)) > 1:
                    per = ", ".join(f"rank {r}: {v}" for r, v in enumerate(seen))
                    problems.append(f"the ranks disagree on {name} ({per})")
        if problems:
            raise EPInputError(f"ptxforge.ep {call}: bad input, so no rank moved any data: " + "; ".join(problems))
        return all_facts

    def gather_counts(self, call: str, counts: list[int]) -> torch.Tensor:
        """Every rank's `counts` (the same length on every rank, agreed before): int64 [ranks, len]."""
        mine = torch.tensor(counts, dtype=torch.int64, device=self.device)
        everyone = [torch.empty_like(mine) for _ in range(self.size)]
        self._wait(dist.all_gather(everyone, mine, group=self.group, async_op=True), call, "the count all_gather")
        self.control_bytes += 8 * len(counts) * (self.size - 1)
        return torch.stack(everyone).cpu()

    def take_control_bytes(self) -> int:
        n, self.control_bytes = self.control_bytes, 0
        return n

    def exchange_rows(self, call: str, rows: torch.Tensor, send_counts: list[int],
                      recv_counts: list[int]) -> torch.Tensor:
        """rows [sum(send_counts), B] uint8, grouped by destination rank -> [sum(recv_counts), B] by source."""
        out = torch.empty((sum(recv_counts), rows.shape[1]), dtype=torch.uint8, device=rows.device)
        if rows.shape[1] == 0:
            return out
        self._wait(dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv_counts,
                                          input_split_sizes=send_counts, group=self.group, async_op=True),
                   call, "the data all_to_all")
        return out

    def exchange_counts(self, call: str, send_counts: list[int]) -> list[int]:
        """How many rows each peer will send this rank, from how many it sends each (one all_to_all of ints)."""
        mine = torch.tensor(send_counts, dtype=torch.int64, device=self.device)
        out = torch.empty_like(mine)
        self._wait(dist.all_to_all_single(out, mine, group=self.group, async_op=True), call, "the count all_to_all")
        self.control_bytes += 8 * (self.size - 1)
        return out.cpu().tolist()

    def exchange_rows_async(self, call: str, rows: torch.Tensor, send_counts: list[int],
                            recv_counts: list[int]) -> Pending:
        """`exchange_rows` started on the process group's thread; `wait()` on the result gives the rows."""
        out = torch.empty((sum(recv_counts), rows.shape[1]), dtype=torch.uint8, device=rows.device)
        work = None
        if rows.shape[1]:
            work = dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv_counts,
                                          input_split_sizes=send_counts, group=self.group, async_op=True)
        return Pending(self, call, work, out, keep=rows)


class Pending:
    """Rows on their way: `wait()` waits (bounded by the transport's timeout) and returns them."""

    def __init__(self, transport: Transport, call: str, work: dist.Work | None, out: torch.Tensor,
                 keep: torch.Tensor) -> None:
        self.transport, self.call, self.work, self.out = transport, call, work, out
        self.keep: torch.Tensor | None = keep  # the send rows must live until the collective ends

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            work, self.work = self.work, None
            self.transport._wait(work, self.call, "the data all_to_all")
        self.keep = None
        return self.out
