"""Where things sit in the internode kernels' two buffers per GPU, and what their timeout records say.

Ranks: `nodes` x `gpus` (G per node); rank = node * G + local. Channels: `channels` (num_sms / 2).

RDMA buffer (a symmetric object, reached from other nodes only through the NIC):

    barrier   u64 at 0: the notify's RDMA barrier, raised by nvshmem_uint64_atomic_add from the GPUs with the
              same local index on every node (never reset: each call waits for `nodes` more)
    notify    `nodes` rows of NOTIFY words (s32), row m put there by node m's GPU of this local index
    counters  per (channel, node n) a u64 tail (raised by node n's sender after a fence: slots in the receive
              ring from node n) and a u64 head (raised by node n's consumer: slots of the send ring to node n
              it has taken)
    send      per (channel, node n) a staging ring the NIC reads (a put's source until nvshmem_quiet)
    recv      per (channel, node n) a receive ring node n's puts write

NVLink buffer (one per GPU, reached by this node's GPUs with plain pointers):

    barrier   u32 at 0 (the notify's NVLink barrier), then at ERROR_OFF the timeout record
    notify    R rows of NOTIFY words: row s is rank s's counts (forwarded after the RDMA exchange)
    local     per channel, words the warps of one GPU hand each other (staged / retired slots of the send
              rings, per forwarder warp and source node the tokens it has passed on)
    counters  per (channel, local GPU i) u32 head, u32 tail of the ring GPU i writes here
    rings     per (channel, local GPU i) `nvl_ring` slots

A notify row of rank s: tokens to each rank [R], tokens per expert [E], then inclusive channel prefix
counts towards each rank [R * C] and towards each node [N * C].
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.kernels import comm

HEADER_BYTES = 64
ERROR_OFF = 16
KERNELS = ("notify", "dispatch", "combine")
# (kernel, role) -> the counter the wait polls (what its timeout message names)
COUNTERS = {
    ("notify", "rdma_barrier"): "the RDMA barrier (arrivals of this local index's GPU on every node)",
    ("notify", "nvl_barrier"): "the NVLink barrier (arrivals of this node's GPUs)",
    ("dispatch", "sender"): "the send ring's retired count towards the peer's node (room to stage a token)",
    ("dispatch", "coordinator"): "the RDMA senders' staged count towards the peer's node",
    ("dispatch", "rdma_room"): "the RDMA head the peer's forwarder returned (room in its receive ring)",
    ("dispatch", "forwarder"): "the RDMA tail the peer raised (tokens in this GPU's receive ring)",
    ("dispatch", "nvl_room"): "the NVLink head of the peer (room in its receive ring)",
    ("dispatch", "forward_progress"): "the forwarder warps' progress on the peer's tokens",
    ("dispatch", "nvl_receiver"): "the NVLink tail the peer's forwarder published",
    ("combine", "nvl_sender"): "the NVLink head of the forwarding peer (room in its receive ring)",
    ("combine", "forwarder"): "the NVLink tail the peer published (expert outputs to sum)",
    ("combine", "rdma_room"): "the RDMA head the peer's receiver returned (room in its receive ring)",
    ("combine", "rdma_receiver"): "the RDMA tail the peer's forwarder raised (node sums in the receive ring)",
}
ROLES = tuple(dict.fromkeys(role for _, role in COUNTERS))
TIMEOUT_ARGS = ("node", "gpu", "channel", "peer", "block", "warp", "wanted", "seen")
TIMEOUT_WORDS = 2 + len(TIMEOUT_ARGS)
# the record's first word while its claimant fills it (the kernel's index + 1 is stored last): another rank's
# timeout can stop the cluster mid-fill, and a half-written record must not be read as a whole one
TIMEOUT_CLAIMED = 0xFFFFFFFF
TIMEOUT_FORMATS = {key: f"ptxforge.ep: node %u GPU %u: the internode {key[0]} kernel timed out: channel %u, peer GPU "
                        f"%u, block %u warp %u waited on {text}: wanted %u, saw %u\n"
                   for key, text in COUNTERS.items()}
DEFAULT_TIMEOUT_S = comm.DEFAULT_TIMEOUT_S
FORMAT_BYTES, FORMAT_OFFSETS = comm.format_table(TIMEOUT_FORMATS)


def align(n: int, a: int = 16) -> int:
    return -(-n // a) * a


def describe_timeout(record: list[int]) -> str | None:
    """The message a timeout record (TIMEOUT_WORDS u32) stands for; None for an empty record or one its
    claimant had not finished writing (first word TIMEOUT_CLAIMED)."""
    kernel, role = record[0] - 1, record[1]
    if not (0 <= kernel < len(KERNELS) and 0 <= role < len(ROLES)):
        return None
    fmt = TIMEOUT_FORMATS.get((KERNELS[kernel], ROLES[role]))
    if fmt is None:
        return None
    return (fmt % tuple(record[2:2 + len(TIMEOUT_ARGS)])).rstrip("\n")


@dataclass(frozen=True)
class Topology:
    nodes: int
    gpus: int        # per node
    experts: int
    channels: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus

    @property
    def notify_words(self) -> int:
        return self.ranks + self.experts + (self.ranks + self.nodes) * self.channels

    @property
    def rank_chan_word(self) -> int:
        return self.ranks + self.experts

    @property
    def node_chan_word(self) -> int:
        return self.ranks + self.experts + self.ranks * self.channels


@dataclass(frozen=True)
class DispatchSlot(comm.DispatchSlot):
    """One token in a dispatch ring (RDMA and NVLink rings alike): payload, scales, top-k ids and weights,
    then its source token, source rank, the bit set of the node's GPUs that want it and its row on each."""

    gpus: int

    @property
    def meta_off(self) -> int:
        """The intranode slot's source word, followed here by the source rank, the GPU bit set and the rows."""
        return self.src_off

    @property
    def nbytes(self) -> int:
        return align(self.meta_off + 4 * (3 + self.gpus))

    @property
    def payload_bytes(self) -> int:
        return self.x_bytes + 4 * self.scale_words


@dataclass(frozen=True)
class CombineSlot:
    """One token in a combine ring: BF16 values, then the f32 top-k weights."""

    hidden: int
    topk: int

    @property
    def w_off(self) -> int:
        return align(2 * self.hidden)

    @property
    def nbytes(self) -> int:
        return align(self.w_off + 4 * self.topk)


@dataclass(frozen=True)
class RdmaLayout:
    topo: Topology
    ring: int
    slot_bytes: int

    @property
    def notify_off(self) -> int:
        return HEADER_BYTES

    @property
    def counters_off(self) -> int:
        return align(self.notify_off + 4 * self.topo.nodes * self.topo.notify_words, 128)

    @property
    def counters_bytes(self) -> int:
        return 16 * self.topo.channels * self.topo.nodes

    def counter(self, channel: int, node: int, head: bool) -> int:
        return self.counters_off + 16 * (channel * self.topo.nodes + node) + (8 if head else 0)

    @property
    def send_off(self) -> int:
        return align(self.counters_off + self.counters_bytes, 128)

    @property
    def ring_bytes(self) -> int:
        return self.ring * self.slot_bytes

    @property
    def recv_off(self) -> int:
        return self.send_off + self.topo.channels * self.topo.nodes * self.ring_bytes

    @property
    def nbytes(self) -> int:
        return self.recv_off + self.topo.channels * self.topo.nodes * self.ring_bytes


@dataclass(frozen=True)
class NvlLayout:
    topo: Topology
    ring: int
    slot_bytes: int

    @property
    def notify_off(self) -> int:
        return HEADER_BYTES

    @property
    def local_off(self) -> int:
        return align(self.notify_off + 4 * self.topo.ranks * self.topo.notify_words, 128)

    @property
    def local_words(self) -> int:
        """Per channel: staged[N], retired[N], then progress[G warps][N]."""
        return (2 + self.topo.gpus) * self.topo.nodes

    @property
    def counters_off(self) -> int:
        return align(self.local_off + 4 * self.topo.channels * self.local_words, 128)

    @property
    def counters_bytes(self) -> int:
        return 8 * self.topo.channels * self.topo.gpus

    @property
    def ring_off(self) -> int:
        return align(self.counters_off + self.counters_bytes, 128)

    @property
    def nbytes(self) -> int:
        return self.ring_off + self.topo.channels * self.topo.gpus * self.ring * self.slot_bytes
