"""Bytes per link and per SM role for one dispatch or combine of one micro-batch on one GPU.

Dispatch over several nodes takes two hops (DeepSeek-V3 report, section 3.2.2): a token crosses the
scale-out link (IB) once per node it reaches, to the GPU with the same in-node index, which forwards it
over NVLink to the GPUs holding its experts (the copy for the forwarding GPU itself stays in its memory: NVLink
carries `Params.nvlink_copies_per_token` copies a token). The SMs of the communication kernel copy every byte at each
stage, so one IB byte costs several SM copies:

    deepep-v1 (DeepEP's normal kernels, the 20-SM design): sender warps copy each token into one send
    buffer per node it goes to; forwarder warps read the scale-out receive buffer and write each NVLink
    copy into the destination GPU's receive buffer; receiver warps copy from that buffer into the output.
    Even SMs forward, odd SMs send and receive (`sm_layout="paired"`).
    deepep-v2 (DeepEP V2's `ElasticBuffer`): one send-buffer copy per token (the NIC reads it once per
    node), a direct write for the own node's copy, forwarders write straight into the output: no
    receiver copy. Every SM does every job (`sm_layout="pooled"`).

Combine mirrors dispatch in BF16 with reductions: NVLink senders copy expert outputs to the forwarding
GPU, forwarders sum the copies of each token into one scale-out copy per node, receivers sum those into
the output. With one node there is no forwarding: senders write NVLink copies directly.

All volumes are for the busiest GPU: the per-GPU mean times `imbalance` (max/mean received copies).
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.plan.params import Params

NVLINK = "nvlink"


@dataclass(frozen=True)
class Role:
    """One kind of copy work: the bytes its warps read and write. `group` is the half of a paired layout
    that runs it (0: forwarders / intranode senders, 1: the rest)."""

    name: str
    group: int
    read_bytes: float
    write_bytes: float


@dataclass(frozen=True)
class Phase:
    """Dispatch or combine: bytes per copy, bytes sent per link, the SM roles, and fixed latency."""

    name: str
    bytes_per_copy: int
    copies: dict[str, float]        # link -> token copies per token sent over it
    link_bytes: dict[str, float]    # link -> bytes the busiest GPU sends over it
    link_gbs: dict[str, float]
    roles: tuple[Role, ...]
    latency_us: float

    @property
    def link_us(self) -> dict[str, float]:
        return {k: self.link_bytes[k] / (self.link_gbs[k] * 1e3) for k in self.link_bytes}

    @property
    def bound_link(self) -> str:
        """The link with the longest time; on a tie the scale-out link (the report's design keeps the
        NVLink fan-out at or under the IB time, so IB is the link that binds)."""
        times = self.link_us
        top = max(times.values())
        tied = [k for k, v in times.items() if v >= top * (1 - 1e-9)]
        return next((k for k in tied if k != NVLINK), tied[0])

    @property
    def link_time_us(self) -> float:
        return max(self.link_us.values(), default=0.0)

    @property
    def read_bytes(self) -> float:
        return sum(r.read_bytes for r in self.roles)

    @property
    def write_bytes(self) -> float:
        return sum(r.write_bytes for r in self.roles)

    def sm_us(self, p: Params) -> float:
        """SM-microseconds of copy work: the time one SM would need; with a paired layout, twice the
        busier half's (each half gets half of the SMs)."""
        rr, wr = p.sm_read_gbs * 1e3, p.sm_write_gbs * 1e3
        if p.sm_layout == "pooled":
            return max(self.read_bytes / rr, self.write_bytes / wr)
        halves = []
        for g in (0, 1):
            rs = [r for r in self.roles if r.group == g]
            halves.append(max(sum(r.read_bytes for r in rs) / rr, sum(r.write_bytes for r in rs) / wr))
        return 2 * max(halves)

    def sm_time_us(self, p: Params, sms: int) -> float:
        return self.sm_us(p) / sms

    def sms_exact(self, p: Params) -> float:
        """The (fractional) SM count whose copy rate equals the bounding link's rate."""
        t = self.link_time_us
        return self.sm_us(p) / t if t > 0 else 0.0

    def time_us(self, p: Params, sms: int) -> float:
        """Wall time with `sms` SMs: the slower of the links and the SMs, plus the fixed latency."""
        return max(self.link_time_us, self.sm_time_us(p, sms)) + self.latency_us

    def utilization(self, p: Params, sms: int) -> dict[str, float]:
        """Busy share of each link with `sms` SMs."""
        t = self.time_us(p, sms)
        return {k: (v / t if t else 0.0) for k, v in self.link_us.items()}


def _fanout(p: Params) -> float:
    """NVLink copies per node copy (at most one per GPU of the node)."""
    return min(p.experts_per_node, float(p.gpus_per_node))


def _latency(p: Params, nbytes: int) -> float:
    # the first chunk of every channel is stored and forwarded once per hop before the pipeline is full
    lat = p.nvlink_latency_us + p.chunk_tokens * nbytes / (p.nvlink_gbs * 1e3)
    if p.nodes > 1:
        lat += p.scaleout_latency_us + p.chunk_tokens * nbytes / (p.scaleout_gbs * 1e3)
    return lat


def dispatch(p: Params) -> Phase:
    """The dispatch phase of `p`."""
    B = p.dispatch_bytes_per_copy
    tb = p.tokens * B * p.imbalance      # one copy of every token, bytes
    f = _fanout(p)
    roles: tuple[Role, ...]
    if p.nodes > 1:
        n, r = p.node_copies, p.remote_share
        copies = {p.scaleout_name: n * r, NVLINK: p.nvlink_copies_per_token}
        if p.kernel_design == "deepep-v1":
            roles = (Role("send: token -> one send buffer per node", 1, tb, n * tb),
                     Role("forward: scale-out buffer -> NVLink peers", 0, n * tb, n * f * tb),
                     Role("receive: NVLink buffer -> output", 1, n * f * tb, n * f * tb))
        else:
            roles = (Role("send: token -> one send buffer, own node direct", 0, tb, tb * (1 + n / p.nodes)),
                     Role("forward: scale-out buffer -> NVLink peers' output", 0, n * tb, n * f * tb))
    else:
        copies = {NVLINK: p.nvlink_copies_per_token}
        if p.kernel_design == "deepep-v1":
            roles = (Role("send: token -> NVLink peers' buffers", 0, tb, f * tb),
                     Role("receive: NVLink buffer -> output", 1, f * tb, f * tb))
        else:
            roles = (Role("send: token -> NVLink peers' output", 0, tb, f * tb),)
    return _phase("dispatch", p, B, copies, roles)


def combine(p: Params) -> Phase:
    """The combine phase of `p` (the same copy structure for both kernel designs)."""
    B = p.combine_bytes_per_copy
    tb = p.tokens * B * p.imbalance
    f = _fanout(p)
    roles: tuple[Role, ...]
    if p.nodes > 1:
        n, r = p.node_copies, p.remote_share
        copies = {p.scaleout_name: n * r, NVLINK: p.nvlink_copies_per_token}
        roles = (Role("send: expert output -> forwarding GPU over NVLink", 1, n * f * tb, n * f * tb),
                 Role("forward: sum NVLink copies -> one scale-out copy per node", 0, n * f * tb, n * tb),
                 Role("receive: sum node copies -> output", 1, n * tb, tb))
    else:
        copies = {NVLINK: p.nvlink_copies_per_token}
        roles = (Role("send: expert output -> source GPU over NVLink", 0, f * tb, f * tb),
                 Role("receive: sum copies -> output", 1, f * tb, tb))
    return _phase("combine", p, B, copies, roles)


def _phase(name: str, p: Params, B: int, copies: dict[str, float], roles: tuple[Role, ...]) -> Phase:
    gbs = {NVLINK: p.nvlink_gbs}
    if p.nodes > 1:
        gbs[p.scaleout_name] = p.scaleout_gbs
    link_bytes = {k: p.tokens * B * p.imbalance * c for k, c in copies.items()}
    return Phase(name, B, copies, link_bytes, gbs, roles, _latency(p, B))
