"""NVSHMEM's device API, provided by the emulator to PTX that declares it `.extern .func` (as vprintf is).

Names, argument order and types are NVSHMEM's (the unmangled C functions of its device library, with the
.param layout nvcc emits for them), so the same PTX links against libnvshmem_device on a real cluster:

    nvshmem_my_pe() -> s32                 nvshmem_n_pes() -> s32
    nvshmem_putmem_nbi(dest, source, nelems, pe)            and nvshmemx_putmem_nbi_warp / _block
    nvshmemx_putmem_signal_nbi(dest, source, nelems, sig_addr, signal, sig_op, pe)   and _warp / _block
    nvshmemx_signal_op(sig_addr, signal, sig_op, pe)        sig_op: NVSHMEM_SIGNAL_SET 9, _ADD 10
    nvshmem_uint64_atomic_add(dest, value, pe)              non-fetching
    nvshmem_fence()  nvshmem_quiet()  nvshmem_barrier_all()
    nvshmem_ptr(dest, pe) -> u64           a plain pointer on an NVLink peer (same node), else 0
    nvshmem_signal_wait_until(sig_addr, cmp, cmp_value) -> u64   cmp: EQ 0, NE 1, GT 2, LE 3, LT 4, GE 5

Addresses are symmetric: a kernel passes the address of its own PE's copy (`SymmetricBuffer.address(pe)`)
and the NIC finds the target's copy at the same offset (symmetric_heap.py). Thread forms act per calling
thread, warp forms once per warp, block forms once per block (with the arguments of its first calling
thread; lanes that disagree are an error). `nvshmem_fence` and `nvshmem_quiet` act for the calling thread's
operations (a warp's or block's put belongs to each of its threads).

The two calls that block, `nvshmem_signal_wait_until` and `nvshmem_barrier_all`, are PTX functions of our own
(nvshmem_library.py) that spin on the non-blocking test builtins below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.errors import KernelTrap, MemoryFault
from ptxforge.emu.nic import AMO_ADD, SIGNAL_ADD, SIGNAL_SET, NicOp, Site

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.nic import Fabric

    Builtin = Callable[[LaneState, npt.NDArray[np.intp], list[int], list[int]], npt.NDArray[Any] | None]

CMP = {0: "==", 1: "!=", 2: ">", 3: "<=", 4: "<", 5: ">="}
SIG_OPS = {SIGNAL_SET: "NVSHMEM_SIGNAL_SET", SIGNAL_ADD: "NVSHMEM_SIGNAL_ADD"}


def _u64(st: LaneState, pvar: int, lanes: np.ndarray) -> list[int]:
    return np.ascontiguousarray(st.pvars[pvar][lanes, :8]).view(np.uint64)[:, 0].tolist()


def _s32(st: LaneState, pvar: int, lanes: np.ndarray) -> list[int]:
    return np.ascontiguousarray(st.pvars[pvar][lanes, :4]).view(np.int32)[:, 0].tolist()


def _fabric(st: LaneState, name: str) -> tuple[Fabric, int]:
    net = st.mem.device.network
    gpu = st.machine.gpu
    if net is None:
        where = "a lone device" if gpu is None else f"GPU {gpu} of a Node"
        raise KernelTrap(f"{name}: NVSHMEM's device API runs on the GPUs of a ptxforge.emu.Cluster; this launch "
                         f"runs on {where}")
    return net, int(gpu)


def _site(st: LaneState, lane: int, net: Fabric, gpu: int) -> Site:
    file, line, text = st.call_site
    thread, block = st.machine.lane_coords(lane)
    return Site(file, line, text, gpu, gpu // net.gpus_per_node, block, thread)


def _fault(e: MemoryFault, lane: int) -> MemoryFault:
    e._lane = lane  # the machine adds the PTX line, thread and block
    return e


def _groups(st: LaneState, lanes: np.ndarray, size: int) -> list[np.ndarray]:
    """The calling lanes split by warp (size 32) or block (size lanes_per_block); size 1: each lane."""
    if size == 1:
        return [lanes[i: i + 1] for i in range(lanes.size)]
    keys = lanes // size
    return [lanes[keys == k] for k in np.unique(keys)]


def _uniform(st: LaneState, group: np.ndarray, args: list[int], name: str, unit: str) -> None:
    for i, pv in enumerate(args):
        raw = np.ascontiguousarray(st.pvars[pv][group, :8])
        if (raw != raw[0]).any():
            raise _fault(MemoryFault(f"{name}: the threads of one {unit} pass different values for argument {i} "
                                     f"(a {unit}-collective call takes one set of arguments)", kind="invalid"),
                         int(group[0]))


def _pe(net: Fabric, pe: int, name: str, lane: int) -> int:
    if not 0 <= pe < len(net.nics):
        raise _fault(MemoryFault(f"{name}: PE {pe} does not exist (the cluster has PEs 0-{len(net.nics) - 1})",
                                 kind="invalid"), lane)
    return pe


def _put(name: str, unit: int, signal: bool) -> Builtin:
    def put(st, lanes, args, rets):
        net, gpu = _fabric(st, name)
        size = {0: 1, 1: 32}.get(unit, st.machine.lanes_per_block)
        for g in _groups(st, lanes, size):
            if size > 1:
                _uniform(st, g, args, name, "warp" if size == 32 else "block")
            lane = int(g[0])
            one = np.array([lane])
            dest, source, nbytes = (_u64(st, a, one)[0] for a in args[:3])
            pe = _pe(net, _s32(st, args[-1], one)[0], name, lane)
            try:
                target = net.heap.translate(dest, gpu, pe, name, nbytes)
                op = NicOp("put_signal" if signal else "put", gpu, pe, target, source, nbytes,
                           site=_site(st, lane, net, gpu), issuers=_threads(st, g))
                net.check_range(op.dst_addr, nbytes, f"{name}: dest on PE {pe}")
                src = net.check_range(source, nbytes, f"{name}: source")
                per_node = net.gpus_per_node
                if src.gpu is not None and src.gpu // per_node != gpu // per_node:
                    raise MemoryFault(f"{name}: source {source:#x} is in {src.name}, on node {src.gpu // per_node}; "
                                      f"a put sends from its own node's memory (node {gpu // per_node})",
                                      kind="invalid", address=source, size=nbytes)
                if signal:
                    sig, value = _u64(st, args[3], one)[0], _u64(st, args[4], one)[0]
                    op.sig_op = _sig_op(_s32(st, args[5], one)[0], name, lane)
                    op.sig_addr, op.sig_value = net.heap.translate(sig, gpu, pe, name, 8), value
            except MemoryFault as e:
                raise _fault(e, lane) from None
            net.issue(op)
        return None
    return put


def _sig_op(code: int, name: str, lane: int) -> int:
    if code not in SIG_OPS:
        raise _fault(MemoryFault(f"{name}: sig_op {code} is neither NVSHMEM_SIGNAL_SET ({SIGNAL_SET}) nor "
                                 f"NVSHMEM_SIGNAL_ADD ({SIGNAL_ADD})", kind="invalid"), lane)
    return code


def _signal_op(name: str, atomic: bool) -> Builtin:
    def signal(st, lanes, args, rets):
        net, gpu = _fabric(st, name)
        for lane in lanes.tolist():
            one = np.array([lane])
            addr, value = _u64(st, args[0], one)[0], _u64(st, args[1], one)[0]
            pe = _pe(net, _s32(st, args[-1], one)[0], name, lane)
            code = AMO_ADD if atomic else _sig_op(_s32(st, args[2], one)[0], name, lane)
            try:
                target = net.heap.translate(addr, gpu, pe, name, 8)
            except MemoryFault as e:
                raise _fault(e, lane) from None
            net.issue(NicOp("atomic_add" if atomic else "signal", gpu, pe, target, 0, 0, sig_addr=target,
                            sig_value=value, sig_op=SIGNAL_ADD if atomic else code, site=_site(st, lane, net, gpu),
                            issuers=_threads(st, one)))
        return None
    return signal


def _my_pe(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    return np.full(lanes.size, _fabric(st, "nvshmem_my_pe")[1], np.int32)


def _n_pes(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    return np.full(lanes.size, len(_fabric(st, "nvshmem_n_pes")[0].nics), np.int32)


def _threads(st: LaneState, lanes: np.ndarray) -> frozenset[int]:
    """The calling lanes as per-PE thread keys (block * 1024 + thread): what fence and quiet act for."""
    m = st.machine
    per = m.lanes_per_block
    return frozenset(int(m.block_ids[lane // per]) * 1024 + lane % per for lane in np.asarray(lanes).tolist())


def _fence(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    net, gpu = _fabric(st, "nvshmem_fence")
    net.fence(gpu, _threads(st, lanes))


def _quiet(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    net, gpu = _fabric(st, "nvshmem_quiet")
    net.quiet(gpu, _threads(st, lanes))


def _ptr(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    net, gpu = _fabric(st, "nvshmem_ptr")
    out = np.zeros(lanes.size, np.uint64)
    for i, (addr, pe) in enumerate(zip(_u64(st, args[0], lanes), _s32(st, args[1], lanes), strict=True)):
        lane = int(lanes[i])
        pe = _pe(net, pe, "nvshmem_ptr", lane)
        if pe // net.gpus_per_node == gpu // net.gpus_per_node:
            try:
                out[i] = net.heap.translate(addr, gpu, pe, "nvshmem_ptr")
            except MemoryFault as e:
                raise _fault(e, lane) from None
    return out


def _wait_test(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    """`__ptxforge_nvshmem_test(sig_addr, cmp, cmp_value) -> u32`: whether the signal satisfies the comparison
    (nvshmem_signal_wait_until spins on it); a warp that waits in vain is noted for the watchdog."""
    net, gpu = _fabric(st, "nvshmem_signal_wait_until")
    addrs, cmps, wants = _u64(st, args[0], lanes), _s32(st, args[1], lanes), _u64(st, args[2], lanes)
    loaded = M.load(st.mem, "global", np.asarray(addrs, np.uint64), np.uint64, 1, lanes)[0]
    seen = np.asarray(loaded, np.uint64).reshape(-1).tolist()
    out = np.zeros(lanes.size, np.uint32)
    m = st.machine
    for i, lane in enumerate(lanes.tolist()):
        c = cmps[i]
        if c not in CMP:
            raise _fault(MemoryFault(f"nvshmem_signal_wait_until: cmp {c} is not one of NVSHMEM_CMP_EQ..GE (0-5)",
                                     kind="invalid"), lane)
        ok = _compare(seen[i], c, wants[i])
        out[i] = ok
        slot = lane // m.lanes_per_block
        key = (gpu, int(m.block_ids[slot]), (lane % m.lanes_per_block) // 32)
        if ok:
            net.waiting.pop(key, None)
        else:
            _, block = m.lane_coords(lane)
            net.waiting[key] = (f"node {gpu // net.gpus_per_node} GPU {gpu} block {block} warp {key[2]}: "
                                f"nvshmem_signal_wait_until on {net.heap.describe(addrs[i], gpu)} wants a value "
                                f"{CMP[c]} {wants[i]} and sees {seen[i]}")
    if lanes.size and not out.any():
        st.spun = True  # a poll in vain: let the other warps run (machine.py)
    return out


def _compare(seen: int, cmp: int, want: int) -> bool:
    return {0: seen == want, 1: seen != want, 2: seen > want, 3: seen <= want, 4: seen < want,
            5: seen >= want}[cmp]


def _barrier_arrive(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    """`__ptxforge_nvshmem_barrier_arrive() -> u64`: the calling thread's PE arrives at nvshmem_barrier_all;
    returns the barrier generation to wait for."""
    net, gpu = _fabric(st, "nvshmem_barrier_all")
    target = None if lanes.size > 1 else net.barrier_arrive(gpu)
    if target is None:
        raise _fault(MemoryFault(f"nvshmem_barrier_all: called by more than one thread of PE {gpu} (the thread "
                                 f"form is called by one thread per PE)", kind="invalid"), int(lanes[-1]))
    return np.full(lanes.size, target, np.uint64)


def _barrier_test(st: LaneState, lanes: np.ndarray, args: list[int], rets: list[int]) -> Any:
    """`__ptxforge_nvshmem_barrier_test(generation) -> u32`: whether every PE arrived."""
    net, gpu = _fabric(st, "nvshmem_barrier_all")
    want = _u64(st, args[0], lanes)
    out = np.asarray([net.barrier_reached(w) for w in want], np.uint32)
    m = st.machine
    for lane in lanes.tolist():
        slot = lane // m.lanes_per_block
        key = (gpu, int(m.block_ids[slot]), (lane % m.lanes_per_block) // 32)
        if out.all():
            net.waiting.pop(key, None)
        else:
            net.waiting[key] = (f"node {gpu // net.gpus_per_node} GPU {gpu} block {m.lane_coords(lane)[1]} warp "
                                f"{key[2]}: nvshmem_barrier_all waits for PE(s) {net.barrier_missing()} to arrive")
    if lanes.size and not out.any():
        st.spun = True
    return out


DEVICE_API: dict[str, Builtin] = {
    "nvshmem_my_pe": _my_pe, "nvshmem_n_pes": _n_pes,
    "nvshmem_putmem_nbi": _put("nvshmem_putmem_nbi", 0, False),
    "nvshmemx_putmem_nbi_warp": _put("nvshmemx_putmem_nbi_warp", 1, False),
    "nvshmemx_putmem_nbi_block": _put("nvshmemx_putmem_nbi_block", 2, False),
    "nvshmemx_putmem_signal_nbi": _put("nvshmemx_putmem_signal_nbi", 0, True),
    "nvshmemx_putmem_signal_nbi_warp": _put("nvshmemx_putmem_signal_nbi_warp", 1, True),
    "nvshmemx_putmem_signal_nbi_block": _put("nvshmemx_putmem_signal_nbi_block", 2, True),
    "nvshmemx_signal_op": _signal_op("nvshmemx_signal_op", False),
    "nvshmem_uint64_atomic_add": _signal_op("nvshmem_uint64_atomic_add", True),
    "nvshmem_fence": _fence, "nvshmem_quiet": _quiet, "nvshmem_ptr": _ptr,
    "__ptxforge_nvshmem_test": _wait_test,
    "__ptxforge_nvshmem_barrier_arrive": _barrier_arrive,
    "__ptxforge_nvshmem_barrier_test": _barrier_test,
}


def lookup(name: str) -> Builtin | None:
    return DEVICE_API.get(name)
