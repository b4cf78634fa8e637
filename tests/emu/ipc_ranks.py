"""What each rank process runs in the emulator IPC tests (test_ipc.py): one IPC device per process, handles
exchanged through the gloo group, the kernels of node_kernels.py plus a few here."""

import time

import node_kernels as K
import numpy as np
import torch.distributed as dist

from ptxforge import runtime as rt
from ptxforge.emu import WatchdogTimeout
from ptxforge.emu.ipc import ipc_close_mem_handle, ipc_device, ipc_get_mem_handle, ipc_open_mem_handle

CAPACITY = 1 << 24


def gather(obj, world):
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def busy_then_raise():
    """Thread 0 stores into `scratch` until %globaltimer has advanced `ns` nanoseconds (local work that
    takes a while), then sets *flag = 1 (st.release.sys)."""
    return K.kernel("busy_then_raise", ".param .u64 scratch, .param .u64 flag, .param .u64 ns", """
    ld.param.u64 %rd1, [scratch];
    ld.param.u64 %rd2, [flag];
    ld.param.u64 %rd3, [ns];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u64 %rd4, %globaltimer;
    add.u64 %rd5, %rd4, %rd3;
    mov.u32 %r2, 0;
BUSY:
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd1], %r2;
    mov.u64 %rd6, %globaltimer;
    setp.lt.u64 %p2, %rd6, %rd5;
    @%p2 bra BUSY;
    mov.u32 %r3, 1;
    st.release.sys.global.u32 [%rd2], %r3;
DONE:
    ret;""")


def chatter_until():
    """Thread 0 keeps storing into `junk` until *stop != 0: a process that writes but never what others wait for."""
    return K.kernel("chatter", ".param .u64 junk, .param .u64 stop", """
    ld.param.u64 %rd1, [junk];
    ld.param.u64 %rd2, [stop];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, 0;
LOOP:
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd1], %r2;
    ld.acquire.sys.global.u32 %r3, [%rd2];
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra LOOP;
DONE:
    ret;""")


def ring(rank, world, n):
    """Rank r writes its chunk into rank r+1's `recv` through the opened handle, releases r+1's flag at .sys
    scope, acquires its own, and returns what it received."""
    with ipc_device(rank, world, num_sms=4, capacity=CAPACITY) as dev:
        recv = rt.empty(n, np.uint32, device=dev)
        flag = rt.empty(1, np.uint32, device=dev)
        handles = gather((ipc_get_mem_handle(recv), ipc_get_mem_handle(flag)), world)
        nxt = (rank + 1) % world
        dst, dst_flag = (ipc_open_mem_handle(h, device=dev) for h in handles[nxt])
        assert dst == handles[nxt][0].address  # addresses are unique across the job
        out = np.zeros(n, np.uint32)
        K.ring().launch((1,), (128,), [dst, dst_flag, recv, flag, out, np.uint32(rank), np.uint32(n)],
                        device=dev, options={"watchdog_s": 30.0})
        dist.barrier()  # nobody unmaps a peer that may still be writing
        ipc_close_mem_handle(dst, device=dev)
        ipc_close_mem_handle(dst_flag, device=dev)
        return out


def atomics(rank, world, iters, blocks):
    """Every rank adds into counters in rank 0's memory: atom.add, red.add.u64 and a CAS loop, `iters` launches."""
    with ipc_device(rank, world, num_sms=4, capacity=CAPACITY) as dev:
        if rank == 0:
            bufs = [rt.empty(1, np.uint32, device=dev), rt.empty(1, np.uint64, device=dev),
                    rt.empty(1, np.uint32, device=dev)]
            handles = gather([ipc_get_mem_handle(b) for b in bufs], world)
            ptrs = [b.address for b in bufs]
        else:
            handles = gather(None, world)
            ptrs = [ipc_open_mem_handle(h, device=dev) for h in handles[0]]
        k = K.counter_atomics()
        dist.barrier()  # start together: contention
        for _ in range(iters):
            k.launch((blocks,), (64,), [*ptrs, np.uint32(rank)], device=dev, options={"watchdog_s": 30.0})
        dist.barrier()
        out = [int(b.to_host()[0]) for b in bufs] if rank == 0 else None
        dist.barrier()
        return out


def deadlock(rank, world, watchdog_s):
    """Rank 0 waits for a flag nobody writes while rank 1 sits in a barrier: rank 0's watchdog must end it."""
    with ipc_device(rank, world, num_sms=2, capacity=CAPACITY) as dev:
        out = None
        if rank == 0:
            flag = rt.empty(1, np.uint32, device=dev)
            done = rt.empty(1, np.uint32, device=dev)
            t = time.monotonic()
            try:
                K.wait_then_raise().launch((1,), (32,), [flag, done], device=dev, options={"watchdog_s": watchdog_s})
                out = ("no error", time.monotonic() - t)
            except WatchdogTimeout as e:
                out = (str(e), time.monotonic() - t)
        dist.barrier()
        return out


def compiled(k, dev):
    """`k` compiled for `dev` now, so that nothing slow happens between a rank's handshake and its launch."""
    dev.image(k.module).compiled(k.function)
    return k


def waits_for_busy_peer(rank, world, busy_s, watchdog_s):
    """Rank 0 spins (watchdog_s short) on a flag rank 1 sets after `busy_s` seconds of its own stores."""
    with ipc_device(rank, world, num_sms=2, capacity=CAPACITY) as dev:
        if rank == 0:
            k = compiled(K.wait_then_raise(), dev)
            flag = rt.empty(1, np.uint32, device=dev)
            done = rt.empty(1, np.uint32, device=dev)
            gather(ipc_get_mem_handle(flag), world)
            t = time.monotonic()
            k.launch((1,), (32,), [flag, done], device=dev, options={"watchdog_s": watchdog_s})
            out = (int(done.to_host()[0]), time.monotonic() - t)
        else:
            k = compiled(busy_then_raise(), dev)
            scratch = rt.empty(1, np.uint32, device=dev)
            peer_flag = ipc_open_mem_handle(gather(None, world)[0], device=dev)
            k.launch((1,), (32,), [scratch, peer_flag, np.uint64(int(busy_s * 1e9))], device=dev)
            out = int(scratch.to_host()[0])
        dist.barrier()
        return out


def chatter_is_not_progress(rank, world, watchdog_s):
    """Rank 1 keeps writing into rank 0's memory, never the flag rank 0 waits on: rank 0 still stops, after
    the bound of 10 x watchdog_s; then it raises rank 1's stop flag."""
    with ipc_device(rank, world, num_sms=2, capacity=CAPACITY) as dev:
        if rank == 0:
            k = compiled(K.wait_then_raise(), dev)
            flag, done, junk, stop = (rt.empty(1, np.uint32, device=dev) for _ in range(4))
            gather((ipc_get_mem_handle(junk), ipc_get_mem_handle(stop)), world)
            deadline = time.monotonic() + 60
            while not junk.to_host()[0] and time.monotonic() < deadline:  # rank 1's chatter has begun
                time.sleep(0.005)
            t = time.monotonic()
            try:
                k.launch((1,), (32,), [flag, done], device=dev, options={"watchdog_s": watchdog_s})
                out = ("no error", time.monotonic() - t)
            except WatchdogTimeout as e:
                out = (str(e), time.monotonic() - t)
            stop.copy_from(np.ones(1, np.uint32))
        else:
            k = compiled(chatter_until(), dev)
            hj, hs = gather(None, world)[0]
            junk, stop = ipc_open_mem_handle(hj, device=dev), ipc_open_mem_handle(hs, device=dev)
            k.launch((1,), (32,), [junk, stop], device=dev, options={"watchdog_s": 60.0})
            out = None
        dist.barrier()
        return out


def forget_to_close(rank, world):
    """A rank of a gloo job (ptxforge.ep.spawn) that never closes its device; returns the segment's name."""
    dev = ipc_device(rank, world, capacity=CAPACITY)
    rt.empty(16, np.uint32, device=dev)
    dist.barrier()
    return dev.segment


def all_to_all(rank, world, path, chunk, rounds):
    """The corpus all-to-all (nvcc PTX) across processes: peer pointers in device tables (DeepEP's
    buffer_ptrs[]), opened from the handles; `rounds` rounds with tags; returns what each round received."""
    import ptxforge as pf

    k = pf.parse_file(path).kernel("node_all_to_all")
    with ipc_device(rank, world, num_sms=16, capacity=CAPACITY) as dev:
        recv = rt.empty(world * chunk, np.int32, device=dev)
        flags = rt.empty(world, np.int32, device=dev)
        handles = gather((ipc_get_mem_handle(recv), ipc_get_mem_handle(flags)), world)
        opened = [(recv.address, flags.address) if r == rank else
                  tuple(ipc_open_mem_handle(h, device=dev) for h in handles[r]) for r in range(world)]
        recv_ptrs = rt.to_device(np.asarray([o[0] for o in opened], np.uint64), device=dev)
        flag_ptrs = rt.to_device(np.asarray([o[1] for o in opened], np.uint64), device=dev)
        token = np.arange(world * chunk, dtype=np.int32).reshape(world, chunk)
        outs = []
        for tag in range(1, rounds + 1):
            send = (rank * 1_000_000 + token + tag * 7).astype(np.int32)
            out = np.zeros(world * chunk, np.int32)
            k.launch((world,), (128,), [send, recv_ptrs, flag_ptrs, out, np.int32(rank), np.int32(world),
                                        np.int32(chunk), np.int32(tag)], device=dev, options={"watchdog_s": 30.0})
            outs.append(out)
            dist.barrier()  # the next round's stores into a peer's recv wait until that peer has read it
        return outs
