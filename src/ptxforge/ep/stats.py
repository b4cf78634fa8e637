"""Byte accounting for `Buffer.stats()`: what each call sent and received, per peer, split into intra-node and
inter-node traffic and into payload (the activations), scales (FP8 scale factors) and meta (top-k ids,
weights, source indices). Rows a rank sends itself are counted as `local`, not as traffic."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ptxforge.ep.rows import RowFormat


@dataclass
class Traffic:
    payload: int = 0
    scales: int = 0
    meta: int = 0

    @property
    def total(self) -> int:
        return self.payload + self.scales + self.meta

    def add(self, rows: int, fmt: RowFormat) -> None:
        self.payload += rows * fmt.bytes_of("payload")
        self.scales += rows * fmt.bytes_of("scales")
        self.meta += rows * fmt.bytes_of("meta")

    def __iadd__(self, o: Traffic) -> Traffic:
        self.payload += o.payload
        self.scales += o.scales
        self.meta += o.meta
        return self


@dataclass
class CallStats:
    """One dispatch or combine on one rank."""

    call: str
    serial: int
    form: str  # "bf16", "fp8" or "fp8-ue8m0"
    rank: int
    sent: dict[int, Traffic] = field(default_factory=dict)
    recv: dict[int, Traffic] = field(default_factory=dict)
    local: Traffic = field(default_factory=Traffic)
    intra_node_sent: Traffic = field(default_factory=Traffic)
    inter_node_sent: Traffic = field(default_factory=Traffic)
    intra_node_recv: Traffic = field(default_factory=Traffic)
    inter_node_recv: Traffic = field(default_factory=Traffic)
    control_bytes: int = 0  # agreement and count messages
    # measured, where the kernels ran across nodes: bytes sent each peer per link ("rdma", "nvlink"), set when the
    # call's kernels end
    links: dict[str, dict[int, int]] = field(default_factory=dict)

    def record(self, direction: str, peer: int, rows: int, fmt: RowFormat, same_node: bool) -> None:
        if rows == 0:
            return
        t = Traffic()
        t.add(rows, fmt)
        if peer == self.rank:
            self.local += t
            return
        per_peer = self.sent if direction == "sent" else self.recv
        per_peer.setdefault(peer, Traffic())
        per_peer[peer] += t
        getattr(self, f"{'intra' if same_node else 'inter'}_node_{direction}").__iadd__(t)

    @property
    def wire_sent(self) -> int:
        return self.intra_node_sent.total + self.inter_node_sent.total

    def as_dict(self) -> dict:
        d = asdict(self)
        d["wire_sent"] = self.wire_sent
        return d
