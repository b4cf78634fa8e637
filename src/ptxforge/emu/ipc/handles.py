"""Emulator IPC handles: the analog of cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle.

    h = ipc_get_mem_handle(buf)                 # on the owner: a small picklable record
    dist.all_gather_object(handles, h)          # any channel between the processes
    ptr = ipc_open_mem_handle(handles[peer], device=dev)   # on another rank: a plain integer address
    kernel.launch(..., [ptr, ...], device=dev)  # ld/st/atom/red through it reach the owner's memory
    ipc_close_mem_handle(ptr, device=dev)

Addresses are unique across the job (rank r's memory starts at `rank_base(r)`), so the opened pointer has
the same value as the owner's buffer address. A handle covers one allocation; opening it maps the owner's
segment (once per peer) and makes exactly that allocation reachable: an access past its end is a fault
naming the owning rank and the buffer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.ipc import segment as S
from ptxforge.emu.ipc.memory import STRIDE, IpcError, IpcMemory, Mapping
from ptxforge.emu.launch import EmuDevice
from ptxforge.emu.memory import GLOBAL_BASE, Allocation

if TYPE_CHECKING:
    from typing import Any

    from ptxforge.emu.ipc import IpcDevice


@dataclass(frozen=True)
class EmuIpcHandle:
    """Names one allocation of rank `rank`'s emulated GPU: picklable, meaningful on any rank of the job."""

    segment: str  # the /dev/shm file holding the owner's memory
    rank: int  # the owning rank
    world: int
    address: int  # the allocation's base address (the same on every rank)
    offset: int  # its byte offset in the segment
    nbytes: int
    export: int  # the owner's export id (a freed allocation's handle goes stale)
    name: str = ""

    def __repr__(self) -> str:
        return (f"EmuIpcHandle({self.name or 'allocation'} of rank {self.rank}, {self.nbytes} bytes at "
                f"{self.address:#x})")


def _memory(device, what: str) -> IpcMemory:
    mem = device.memory if isinstance(device, EmuDevice) else None  # any object may come: an IPC device's is IPC
    if not isinstance(mem, IpcMemory):
        raise IpcError(f"{what} needs an IPC device (ptxforge.emu.ipc.ipc_device(rank, world)), not {device!r}")
    mem._check_open()
    return mem


def ipc_get_mem_handle(buf: Any, device: IpcDevice | None = None) -> EmuIpcHandle:
    """A handle to the allocation holding `buf` (a DeviceBuffer of an IPC device, or an address on `device`)."""
    address = getattr(buf, "address", buf)
    device = getattr(buf, "device", device)
    mem = _memory(device, "ipc_get_mem_handle")
    alloc = mem.find(int(address))
    if alloc is None or alloc.gpu != mem.rank:
        owner = mem.rank_of(int(address))
        whose = "" if owner is None or owner == mem.rank else f" (it is rank {owner}'s; get the handle there)"
        raise IpcError(f"ipc_get_mem_handle: {int(address):#x} is not in a live allocation of rank "
                       f"{mem.rank}{whose}")
    export = mem.exported.get(alloc.base)
    if export is None:
        table = S.exports(mem.own.words)
        free = (table[:, 0] == 0).nonzero()[0]
        if not free.size:
            raise IpcError(f"rank {mem.rank} exports {S.MAX_EXPORTS} allocations already: free some first")
        export = mem.next_export
        mem.next_export += 1
        row = table[int(free[0])]
        row[1], row[2] = alloc.offset - mem.rank * STRIDE, alloc.size
        row[0] = export  # last: a reader sees a complete entry
        mem.exported[alloc.base] = export
    return EmuIpcHandle(mem.name, mem.rank, mem.world, alloc.base, alloc.offset - mem.rank * STRIDE, alloc.size,
                        export, alloc.name)


def ipc_open_mem_handle(handle: EmuIpcHandle, device: IpcDevice) -> int:
    """Map the peer allocation `handle` names into `device`; returns its address (valid in kernels on
    `device`, and accepted as an integer pointer argument). Open twice, close twice."""
    if not isinstance(handle, EmuIpcHandle):
        raise IpcError(f"ipc_open_mem_handle takes an EmuIpcHandle, not {type(handle).__name__}")
    mem = _memory(device, "ipc_open_mem_handle")
    h = handle
    what = f"{h.name or 'allocation'} of rank {h.rank}"
    if h.rank == mem.rank:
        raise IpcError(f"ipc_open_mem_handle: the handle of {what} was opened on its own owner (rank {mem.rank}); "
                       f"use the buffer's address ({h.address:#x}) directly")
    if h.world != mem.world or not 0 <= h.rank < mem.world:
        raise IpcError(f"ipc_open_mem_handle: the handle of {what} comes from a job of {h.world} ranks; this "
                       f"device is rank {mem.rank} of {mem.world}")
    if h.address != GLOBAL_BASE + h.rank * STRIDE + h.offset:
        raise IpcError(f"ipc_open_mem_handle: the handle of {what} is corrupt (address {h.address:#x} "
                       f"does not match its offset {h.offset})")
    mp = mem.peers.get(h.rank)
    if mp is not None and mp.name != h.segment:
        if mp.opened and not mp.closed:
            raise IpcError(f"ipc_open_mem_handle: rank {h.rank}'s segment {mp.name} is still open here, but the "
                           f"handle of {what} names {h.segment}: a handle from another device of that rank")
        mem.unmap_peer(mp)  # the old device of that rank is gone (closed) or nothing of it is open
        mp = None
    if mp is None:
        mp = _map(mem, h, what)
    if mp.closed:
        raise IpcError(f"ipc_open_mem_handle: {what}: rank {h.rank} closed its device (segment {h.segment})")
    table = S.exports(mp.words)
    row = table[table[:, 0] == h.export]
    if not row.size or int(row[0, 1]) != h.offset or int(row[0, 2]) != h.nbytes:
        if not mp.opened:
            mem.unmap_peer(mp)
        raise IpcError(f"ipc_open_mem_handle: stale handle: {what} ({h.nbytes} bytes at {h.address:#x}) was "
                       f"freed after the handle was made")
    hit = mp.opened.get(h.export)
    if hit is not None:
        hit[1] += 1
        return h.address
    _drop_freed(mem, mp, table, h)
    alloc = Allocation(h.address, h.nbytes, h.address - GLOBAL_BASE, f"{h.name or 'allocation'} of rank {h.rank}",
                       gpu=h.rank)
    mem._insert(alloc)
    mp.opened[h.export] = [alloc, 1]
    return h.address


def _drop_freed(mem: IpcMemory, mp: Mapping, table, h: EmuIpcHandle) -> None:
    """Forget the opened allocations of `mp` that overlap the one `h` names: their owner freed them (live
    allocations never overlap), as when a rank grows a buffer and hands out the new one's handle without
    the peers closing the old."""
    live = set(table[:, 0].tolist())
    for export, (alloc, _) in list(mp.opened.items()):
        if export not in live and alloc.base < h.address + h.nbytes and h.address < alloc.base + alloc.size:
            del mp.opened[export]
            super(IpcMemory, mem).free(alloc)


def _map(mem: IpcMemory, h: EmuIpcHandle, what: str) -> Mapping:
    try:
        fd, size = S.open_existing(h.segment)
    except FileNotFoundError:
        raise IpcError(f"ipc_open_mem_handle: {what}: its segment {h.segment} no longer exists (rank {h.rank} "
                       f"closed its device or its process exited)") from None
    try:
        if not S.HEADER <= size <= STRIDE or h.offset + h.nbytes > size:
            raise IpcError(f"ipc_open_mem_handle: {what}: segment {h.segment} has {size} bytes, not a rank's "
                           f"memory holding {h.nbytes} bytes at offset {h.offset}")
        mem.vm.map_file(h.rank * STRIDE, fd, size)
    except BaseException:
        os.close(fd)
        raise
    words = mem.arena[h.rank * STRIDE: h.rank * STRIDE + S.HEADER].view(np.uint64)
    mp = Mapping(h.segment, h.rank, fd, size, words)
    mem.peers[h.rank] = mp
    if int(words[S.W_MAGIC]) != S.MAGIC or int(words[S.W_RANK]) != h.rank or int(words[S.W_WORLD]) != h.world:
        mem.unmap_peer(mp)
        raise IpcError(f"ipc_open_mem_handle: {what}: segment {h.segment} is not rank {h.rank}'s memory of a "
                       f"{h.world}-rank job")
    return mp


def ipc_close_mem_handle(handle: EmuIpcHandle | int, device: IpcDevice) -> None:
    """Close one open of a peer allocation (by the address `ipc_open_mem_handle` returned, or its handle);
    the peer's segment is unmapped when nothing of it is open any more."""
    mem = _memory(device, "ipc_close_mem_handle")
    address = handle.address if isinstance(handle, EmuIpcHandle) else int(handle)
    for mp in list(mem.peers.values()):
        for export, hit in list(mp.opened.items()):
            alloc, count = hit
            if alloc.base != address:
                continue
            if count > 1:
                hit[1] -= 1
                return
            del mp.opened[export]
            super(IpcMemory, mem).free(alloc)
            if not mp.opened:
                mem.unmap_peer(mp)
            return
    raise IpcError(f"ipc_close_mem_handle: no IPC handle is open at {address:#x} on rank {mem.rank}")
