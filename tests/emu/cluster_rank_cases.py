"""What each rank process runs in test_cluster_procs.py: the single-process Cluster tests' kernels
(cluster_kernels.py) on a `ClusterRank` per process, one case after another in one gloo world."""

import os
import signal
import time
import traceback

import numpy as np
import torch.distributed as dist
from cluster_kernels import all_to_all, barrier_ring, call, module, pointer_table, put_and_exit, ring_put_signal

from ptxforge.emu import ClusterRank, LaunchError, WatchdogTimeout
from ptxforge.emu.nic_procs import PeerStopped
from ptxforge.plan.params import Params

GPUS_PER_NODE = 2
N = 8
BIG = 1 << 19  # u32: a 2 MiB put, two chunks; twice through a 4 MiB ring wraps it


def a2a(rank: ClusterRank, kernel, n: int = N) -> np.ndarray:
    """cluster_kernels.run_a2a on this rank: returns its `out` (npes * n u32)."""
    npes, pe = rank.npes, rank.pe
    send, recv = rank.malloc((npes, n), np.uint32, "send"), rank.malloc((npes, n), np.uint32, "recv")
    sig, out = rank.malloc(1, np.uint64, "sig"), rank.malloc((npes, n), np.uint32, "out")
    q, i = np.meshgrid(np.arange(npes), np.arange(n), indexing="ij")
    send.write(pe * 1000 + q * 100 + i)
    rank.launch(kernel, (1,), (32,), [send.address, recv.address, sig.address, out.address, np.uint32(n)])
    return out.read().reshape(-1)


def a2a_case(transport, adversarial=None, fence=True, links=None):
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=2, transport=transport, adversarial=adversarial,
                         links=links, watchdog_s=30.0) as rank:
            out = a2a(rank, all_to_all(fence=fence))
            result = rank.synchronize()
            return {"out": out, "links": [(t.src, t.dst, t.kind, t.bytes, t.messages, t.modeled_us)
                                          for t in result.links], "transport": rank.transport}
    return run


def ring_case(transport, warps):
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=2, transport=transport, watchdog_s=30.0) as rank:
            n = 32
            send, recv = rank.malloc(n, np.uint32, "send"), rank.malloc(n, np.uint32, "recv")
            sig, out = rank.malloc(1, np.uint64, "sig"), rank.malloc(n, np.uint32, "out")
            send.write(rank.pe * 1000 + np.arange(n))
            rank.launch(ring_put_signal(n, warps), (1,), (32 * warps,),
                        [send.address, recv.address, sig.address, out.address])
            result = rank.synchronize()
            return {"out": out.read(), "links": [(t.src, t.dst, t.kind, t.bytes, t.messages) for t in result.links]}
    return run


def big_case(transport):
    """The ring kernel with a 2 MiB put-with-signal, twice on one ClusterRank: what arrives, summed."""
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, watchdog_s=30.0) as rank:
            send, recv = rank.malloc(BIG, np.uint32, "send"), rank.malloc(BIG, np.uint32, "recv")
            sig, out = rank.malloc(1, np.uint64, "sig"), rank.malloc(32, np.uint32, "out")
            send.write(rank.pe * 1000 + np.arange(BIG))
            sums = []
            for _ in range(2):
                rank.launch(ring_put_signal(BIG, 1), (1,), (32,), [send.address, recv.address, sig.address,
                                                                     out.address])
                rank.synchronize()
                sums.append(int(recv.read().astype(np.uint64).sum()))
                recv.write(0)
                sig.write(0)
                dist.barrier()  # nobody's next put lands before this rank cleared its copy
            return {"rounds": sums, "head": out.read().tolist()}
    return run


def sanitized_ring():
    """The ring under each rank's sanitizer: it passes (reports would raise SanitizerError)."""
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, watchdog_s=30.0) as rank:
            n = 32
            send, recv = rank.malloc(n, np.uint32, "send"), rank.malloc(n, np.uint32, "recv")
            sig, out = rank.malloc(1, np.uint64, "sig"), rank.malloc(n, np.uint32, "out")
            send.write(rank.pe * 1000 + np.arange(n))
            rank.launch(ring_put_signal(n, 1), (1,), (32,), [send.address, recv.address, sig.address, out.address],
                        options={"sanitize": True})
            rank.synchronize()
            return {"out": out.read()}
    return run


def mistakes():
    """Options and symmetric allocations that differ between ranks: every rank raises, naming them."""
    def run(rank_, world):
        errors = []
        try:
            ClusterRank(None, 3, sms=1)
        except LaunchError as e:
            errors.append(str(e))
        try:
            ClusterRank(None, 2, sms=1 + (rank_ == 2))
        except LaunchError as e:
            errors.append(str(e))
        with ClusterRank(None, GPUS_PER_NODE, sms=1) as rank:
            try:
                rank.malloc(8 if rank.pe != 1 else 9, np.uint32, "recv")
            except LaunchError as e:
                errors.append(str(e))
        return errors
    return run


def barrier_case(transport):
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, watchdog_s=30.0) as rank:
            value, slot, out = (rank.malloc(1, np.uint32, name) for name in ("value", "slot", "out"))
            rank.launch(barrier_ring(), (1,), (32,), [value.address, slot.address, out.address])
            rank.synchronize()
            return {"out": int(out.read()[0])}
    return run


def in_flight_case(transport):
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, adversarial=2, watchdog_s=30.0) as rank:
            value, slot = rank.malloc(1, np.uint32, "value"), rank.malloc(1, np.uint32, "slot")
            rank.launch(put_and_exit(), (1,), (32,), [value.address, slot.address])
            result = rank.synchronize()
            return {"slot": int(slot.read()[0]), "pending": rank.network.pending(),
                    "rdma": result.bytes("rdma"), "nvlink": result.bytes("nvlink")}
    return run


def pointer_case(transport):
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, watchdog_s=30.0) as rank:
            buf, out = rank.malloc(4, np.uint32, "buf"), rank.malloc(rank.npes, np.uint64, "out")
            rank.launch(pointer_table(), (1,), (32,), [buf.address, out.address])
            rank.synchronize()
            return {"ptrs": out.read().tolist(), "bases": buf.bases}
    return run


def waits_forever_everywhere(transport):
    """Every rank waits for one signal more than arrives (a wrong count): each rank's own watchdog stops it."""
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, watchdog_s=1.0) as rank:
            t = time.monotonic()
            try:
                a2a(rank, all_to_all(extra_wait=1))
                rank.synchronize()
                return {"error": None}
            except (WatchdogTimeout, PeerStopped) as e:
                return {"error": str(e), "type": type(e).__name__, "s": time.monotonic() - t}
            finally:
                dist.barrier()
    return run


def one_waits_forever(transport):
    """Only rank 3 waits (for a signal nobody sends); the others end their work and wait in synchronize:
    every rank raises, naming rank 3's wait."""
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=1, transport=transport, watchdog_s=1.0) as rank:
            sig = rank.malloc(1, np.uint64, "sig")
            t = time.monotonic()
            try:
                if rank.pe == 3:
                    rank.launch(wait_for(7), (1,), (32,), [sig.address])
                rank.synchronize()
                return {"error": None}
            except (WatchdogTimeout, PeerStopped) as e:
                return {"error": str(e), "type": type(e).__name__, "s": time.monotonic() - t}
            finally:
                dist.barrier()
    return run


def wait_for(value: int):
    """Thread 0 waits until its `sig` >= value."""
    return module("waitfor", ".param .u64 sig", f"""
    ld.param.u64 %rd1, [sig];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
{call("nvshmem_signal_wait_until", [(".b64", "%rd1"), (".b32", "5"), (".b64", str(value))], (".b64", "%rd2"))}
DONE:
    ret;""")


def cases():
    out = {}
    for tr in ("shm", "dist"):
        out[f"a2a-{tr}"] = a2a_case(tr, links=Params())
        out[f"ring1-{tr}"] = ring_case(tr, 1)
        out[f"ring4-{tr}"] = ring_case(tr, 4)
        out[f"big-{tr}"] = big_case(tr)
        out[f"barrier-{tr}"] = barrier_case(tr)
        out[f"in-flight-{tr}"] = in_flight_case(tr)
        out[f"waits-forever-{tr}"] = waits_forever_everywhere(tr)
        out[f"one-waits-{tr}"] = one_waits_forever(tr)
    out["pointers-shm"] = pointer_case("shm")
    out["sanitized-ring"] = sanitized_ring()
    out["mistakes"] = mistakes()
    out["remote-pointer-argument"] = remote_pointer(False)
    out["remote-pointer-in-kernel"] = remote_pointer(True)
    for seed in range(2):
        out[f"adversarial-fenced-{seed}"] = a2a_case("shm", adversarial=seed)
        out[f"adversarial-unfenced-{seed}"] = a2a_case("shm", adversarial=seed, fence=False)
    out["adversarial-unfenced-0-again"] = a2a_case("shm", adversarial=0, fence=False)
    out["adversarial-host-write"] = host_write_on_one_rank()
    return out


def every_case(rank, world):
    """Each case in turn, the same order on every rank; a case's exception comes back as its traceback."""
    results = {}
    for name, fn in cases().items():
        t = time.monotonic()
        try:
            results[name] = {"ok": True, "value": fn(rank, world), "s": time.monotonic() - t}
        except Exception:  # noqa: BLE001 - reported per case by the test
            results[name] = {"ok": False, "error": traceback.format_exc()}
        dist.barrier()
    return results


def host_write_on_one_rank():
    """Adversarial (lockstep) mode: rank 0 alone writes a buffer from the host, then every rank allocates and runs
    the all-to-all. A host write is not a NIC round, so rank 0 does not wait for rounds the others never run."""
    def run(rank_, world):
        with ClusterRank(None, GPUS_PER_NODE, sms=2, adversarial=3, watchdog_s=10.0) as rank:
            extra = rank.malloc(4, np.uint32, "extra")
            if rank.pe == 0:
                extra.write(7)
            out = a2a(rank, all_to_all())
            rank.synchronize()
            return {"out": out}
    return run


def remote_pointer(in_kernel: bool):
    """Rank 0 loads from node 1's copy of a symmetric object through a plain pointer (passed as an argument, or
    computed in the kernel): an error naming both nodes and the NIC on rank 0, the same error on every rank."""
    def run(rank_, world):
        k = module("rd", ".param .u64 p, .param .u64 delta, .param .u64 out", """
    ld.param.u64 %rd1, [p];
    ld.param.u64 %rd2, [delta];
    ld.param.u64 %rd3, [out];
    add.s64 %rd4, %rd1, %rd2;
    ld.global.u32 %r1, [%rd4];
    st.global.u32 [%rd3], %r1;
    ret;""")
        with ClusterRank(None, GPUS_PER_NODE, sms=1, watchdog_s=10.0) as rank:
            buf = rank.malloc(4, np.uint32, "buf")
            far = buf.bases[2]
            try:
                if rank.pe == 0:
                    args = [buf.address, far - buf.address, buf.address] if in_kernel else [far, 0, buf.address]
                    rank.launch(k, (1,), (1,), args)
                rank.synchronize()
                return {"error": None}
            except Exception as e:  # noqa: BLE001 - the test reads its type and text
                return {"error": str(e), "type": type(e).__name__}
            finally:
                dist.barrier()
    return run


def adversarial_seeds(rank, world, seeds):
    """The all-to-all with and without its fence for `seeds` seeds: this rank's out per (fence, seed)."""
    out = {}
    for fence in (True, False):
        for seed in range(seeds):
            out[(fence, seed)] = a2a_case("shm", adversarial=seed, fence=fence)(rank, world)["out"]
            dist.barrier()
    return out


def dead_peer(rank, world, transport):
    """Rank 1 (node 1) dies while rank 0 (node 0) waits in a kernel for its signal: rank 0 raises, naming it."""
    with ClusterRank(None, 1, sms=1, transport=transport, watchdog_s=30.0) as cr:
        sig = cr.malloc(1, np.uint64, "sig")
        if rank == 1:
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGKILL)
        t = time.monotonic()
        try:
            cr.launch(wait_for(1), (1,), (32,), [sig.address])
            return {"error": None}
        except PeerStopped as e:
            return {"error": str(e), "s": time.monotonic() - t}
