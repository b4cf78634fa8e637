"""Bulk and tensor reductions (cp.reduce.async.bulk{.tensor}) from two real processes into the same elements
of rank 0's IPC memory: each element's reduction is atomic, so no update may be lost between the processes."""

import numpy as np
import pytest
import torch.distributed as dist

import ptxforge as pf
from ptxforge import runtime as rt
from ptxforge.emu.ipc import ipc_close_mem_handle, ipc_device, ipc_get_mem_handle, ipc_open_mem_handle, live_segments
from ptxforge.ep.spawn import run_ranks

N = 4096  # u32 elements: one 16 KiB bulk reduction (a 64 x 64 box for the tensor form) per iteration
ITERS = 400  # per rank; an unlocked read-modify-write of 4096 elements loses updates long before that
CAPACITY = 1 << 24

# Both kernels: the block fills shared memory with (rank + 1) * (i % 7 + 1), then thread 0 reduces it
# (add) into the same 4096 global u32 elements `iters` times. ptxas -arch=sm_90 accepts them.
FILL = """
    ld.param.u32 %r1, [iters];
    ld.param.u32 %r2, [rank];
    add.u32 %r3, %r2, 1;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, src;
FILL:
    rem.u32 %r6, %r4, 7;
    add.u32 %r6, %r6, 1;
    mul.lo.u32 %r6, %r6, %r3;
    shl.b32 %r7, %r4, 2;
    add.u32 %r7, %r5, %r7;
    st.shared.u32 [%r7], %r6;
    add.u32 %r4, %r4, 128;
    setp.lt.u32 %p1, %r4, 4096;
    @%p1 bra FILL;
    bar.sync 0;
    fence.proxy.async.shared::cta;
    mov.u32 %r4, %tid.x;
    setp.ne.u32 %p2, %r4, 0;
    @%p2 bra DONE;
    mov.u32 %r8, 0;
    mov.u32 %r9, 0;
LOOP:"""
TAIL = """
    cp.async.bulk.commit_group;
    add.u32 %r8, %r8, 1;
    setp.lt.u32 %p3, %r8, %r1;
    @%p3 bra LOOP;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}
"""
DECLS = """
    .shared .align 128 .b8 src[16384];
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<4>;"""
PTX = f""".version 8.0
.target sm_90
.address_size 64

.visible .entry bulk_reduce_loop(.param .u64 dst, .param .u32 iters, .param .u32 rank)
{{{DECLS}
    ld.param.u64 %rd1, [dst];{FILL}
    cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r5], 16384;{TAIL}
.visible .entry tensor_reduce_loop(.param .align 64 .b8 tmap[128], .param .u32 iters, .param .u32 rank)
{{{DECLS}
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd1, %rd1;{FILL}
    cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd1, {{%r9, %r9}}], [%r5];{TAIL}"""


def _reduce_into_rank0(rank, world, form, iters):
    """Rank 0 exports a zeroed buffer of N u32; every rank (rank 0 too) reduces into it `iters` times at once."""
    with ipc_device(rank, world, num_sms=2, capacity=CAPACITY) as dev:
        mod = pf.parse(PTX, filename="bulk_reduce_loop.ptx")
        k = mod.kernel(f"{form}_reduce_loop")
        dev.image(k.module).compiled(k.function)  # nothing slow between the handshake and the launch
        buf = rt.empty(N, np.uint32, device=dev) if rank == 0 else None
        handles = [None] * world
        dist.all_gather_object(handles, ipc_get_mem_handle(buf) if rank == 0 else None)
        dst = buf.address if rank == 0 else ipc_open_mem_handle(handles[0], device=dev)
        target = dst if form == "bulk" else rt.tensor_map(dst, np.uint32, (64, 64), (64 * 4,), (64, 64))
        dist.barrier()  # start together: the two processes' reductions overlap
        k.launch((1,), (128,), [target, np.uint32(iters), np.uint32(rank)], device=dev, options={"watchdog_s": 60.0})
        dist.barrier()  # every rank's reductions are done before rank 0 reads
        out = buf.to_host() if rank == 0 else None
        if rank != 0:
            ipc_close_mem_handle(dst, device=dev)
        dist.barrier()  # rank 0 keeps its memory until the peer has closed its handle
        return out, dev.segment


@pytest.mark.parametrize("form", ["bulk", "tensor"])
def test_two_processes_bulk_reducing_into_the_same_elements_lose_no_update(form):
    world = 2
    results = run_ranks(_reduce_into_rank0, world, form, ITERS, timeout_s=180)
    got = results[0][0]
    per_iteration = sum(r + 1 for r in range(world)) * (np.arange(N, dtype=np.uint32) % 7 + 1)
    want = (ITERS * per_iteration).astype(np.uint32)
    lost = int((want.astype(np.int64) - got.astype(np.int64)).sum())  # an update lost anywhere shows as a shortfall
    assert lost == 0 and np.array_equal(got, want), (
        f"{form}: {np.count_nonzero(got != want)} of {N} elements wrong, {lost} short of {int(want.sum())} in all")
    assert not {seg for _, seg in results} & set(live_segments())  # both ranks' segments are gone
