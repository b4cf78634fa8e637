"""Hand-written PTX kernels for the Cluster tests: NVSHMEM's device API declared as nvcc declares it."""

import numpy as np

import ptxforge as pf
from ptxforge.emu import Cluster

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
DECLS = """
.extern .func (.param .b32 func_retval0) nvshmem_my_pe ();
.extern .func (.param .b32 func_retval0) nvshmem_n_pes ();
.extern .func nvshmem_putmem_nbi (.param .b64 p0, .param .b64 p1, .param .b64 p2, .param .b32 p3);
.extern .func nvshmemx_putmem_nbi_warp (.param .b64 p0, .param .b64 p1, .param .b64 p2, .param .b32 p3);
.extern .func nvshmemx_putmem_nbi_block (.param .b64 p0, .param .b64 p1, .param .b64 p2, .param .b32 p3);
.extern .func nvshmemx_putmem_signal_nbi (.param .b64 p0, .param .b64 p1, .param .b64 p2, .param .b64 p3,
    .param .b64 p4, .param .b32 p5, .param .b32 p6);
.extern .func nvshmemx_putmem_signal_nbi_warp (.param .b64 p0, .param .b64 p1, .param .b64 p2, .param .b64 p3,
    .param .b64 p4, .param .b32 p5, .param .b32 p6);
.extern .func nvshmemx_signal_op (.param .b64 p0, .param .b64 p1, .param .b32 p2, .param .b32 p3);
.extern .func nvshmem_uint64_atomic_add (.param .b64 p0, .param .b64 p1, .param .b32 p2);
.extern .func nvshmem_fence ();
.extern .func nvshmem_quiet ();
.extern .func nvshmem_barrier_all ();
.extern .func (.param .b64 func_retval0) nvshmem_ptr (.param .b64 p0, .param .b32 p1);
.extern .func (.param .b64 func_retval0) nvshmem_signal_wait_until (.param .b64 p0, .param .b32 p1, .param .b64 p2);
"""
REGS = """
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<32>;
"""
SIGNAL_ADD, CMP_GE = 10, 5


def call(name: str, args: list[tuple[str, str]] = (), ret: tuple[str, str] | None = None) -> str:
    """A call as nvcc writes it: each argument in its own .param, the result read back from retval0."""
    lines = ["    {"]
    names = []
    for i, (ty, value) in enumerate(args):
        lines += [f"    .param {ty} param{i};", f"    st.param{ty} [param{i}], {value};"]
        names.append(f"param{i}")
    if ret is not None:
        lines.append(f"    .param {ret[0]} retval0;")
        lines.append(f"    call.uni (retval0), {name}, ({', '.join(names)});")
        lines.append(f"    ld.param{ret[0]} {ret[1]}, [retval0];")
    else:
        lines.append(f"    call.uni {name}, ({', '.join(names)});")
    lines.append("    }")
    return "\n".join(lines)


def module(name: str, params: str, body: str) :
    text = HEAD + DECLS + f".visible .entry {name}({params})\n{{{REGS}{body}\n}}\n"
    return pf.parse(text, filename=f"{name}.ptx").kernel(name)


def all_to_all(fence: bool = True, reuse: bool = False, extra_wait: int = 0, quiet: bool = True,
               signal: str = "signal_op") :
    """Thread t < npes puts row t of `send` (n u32) into slot my_pe of `recv` on PE t, then signals PE t's
    `sig` (+1); thread 0 waits for sig >= npes + extra_wait, the block copies `recv` to `out`.

    Planted bugs: fence=False (the signal is not ordered after the data), reuse=True (the send row is
    overwritten before quiet), extra_wait (a count that never arrives)."""
    put = call("nvshmem_putmem_nbi", [(".b64", "%rd7"), (".b64", "%rd9"), (".b64", "%rd10"), (".b32", "%r3")])
    if signal == "signal_op":
        sig = call("nvshmemx_signal_op", [(".b64", "%rd3"), (".b64", "1"), (".b32", str(SIGNAL_ADD)),
                                          (".b32", "%r3")])
    else:
        sig = call("nvshmem_uint64_atomic_add", [(".b64", "%rd3"), (".b64", "1"), (".b32", "%r3")])
    return module("a2a", ".param .u64 send, .param .u64 recv, .param .u64 sig, .param .u64 out, .param .u32 n", f"""
    ld.param.u64 %rd1, [send];
    ld.param.u64 %rd2, [recv];
    ld.param.u64 %rd3, [sig];
    ld.param.u64 %rd4, [out];
    ld.param.u32 %r9, [n];
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    mov.u32 %r3, %tid.x;
    setp.ge.u32 %p1, %r3, %r2;
    @%p1 bra SIGNALLED;
    mul.lo.u32 %r4, %r1, %r9;
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd2, %rd6;
    mul.lo.u32 %r5, %r3, %r9;
    mul.wide.u32 %rd8, %r5, 4;
    add.s64 %rd9, %rd1, %rd8;
    mul.wide.u32 %rd10, %r9, 4;
{put}
{"    st.global.u32 [%rd9], 3735928559;" if reuse else ""}
{call("nvshmem_fence") if fence else ""}
{sig}
SIGNALLED:
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra WAITED;
    add.u32 %r6, %r2, {extra_wait};
    cvt.u64.u32 %rd11, %r6;
{call("nvshmem_signal_wait_until", [(".b64", "%rd3"), (".b32", str(CMP_GE)), (".b64", "%rd11")], (".b64", "%rd12"))}
WAITED:
    bar.sync 0;
    mul.lo.u32 %r7, %r2, %r9;
    mov.u32 %r5, %r3;
    mov.u32 %r8, %ntid.x;
COPY:
    setp.ge.u32 %p3, %r5, %r7;
    @%p3 bra DONE;
    mul.wide.u32 %rd13, %r5, 4;
    add.s64 %rd14, %rd2, %rd13;
    ld.global.u32 %r10, [%rd14];
    add.s64 %rd15, %rd4, %rd13;
    st.global.u32 [%rd15], %r10;
    add.u32 %r5, %r5, %r8;
    bra COPY;
DONE:
{call("nvshmem_quiet") if quiet else ""}
    ret;""")


def expected_a2a(npes: int, n: int) -> np.ndarray:
    """out[q] on PE q: slot p holds PE p's row q: p * 1000 + q * 100 + i."""
    p, q, i = np.meshgrid(np.arange(npes), np.arange(npes), np.arange(n), indexing="ij")
    return (p * 1000 + q * 100 + i).astype(np.uint32).transpose(1, 0, 2).reshape(npes, npes * n)


def run_a2a(kernel, cluster: Cluster, n: int = 8, block: int = 32, errors: list | None = None):
    """Launch `kernel` (all_to_all) on every PE of `cluster`; returns (out per PE, the sync result). With
    `errors`, each launch's own error is appended there instead of the first being raised."""
    npes = len(cluster.devices)
    send = cluster.malloc((npes, n), np.uint32, name="send")
    recv = cluster.malloc((npes, n), np.uint32, name="recv")
    sig = cluster.malloc(1, np.uint64, name="sig")
    out = cluster.malloc((npes, n), np.uint32, name="out")
    for pe in range(npes):
        q, i = np.meshgrid(np.arange(npes), np.arange(n), indexing="ij")
        send.write(pe, pe * 1000 + q * 100 + i)
    pending = [kernel.launch((1,), (block,), [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe),
                                              np.uint32(n)], device=dev, stream=dev.stream())
               for pe, dev in enumerate(cluster.devices)]
    if errors is not None:
        try:
            cluster.synchronize()
        except Exception:
            errors += [p.error for p in pending if p.error is not None]
        return out.to_host().reshape(npes, npes * n), None
    result = cluster.synchronize()
    for p in pending:
        p.result()
    return out.to_host().reshape(npes, npes * n), result


def ring_put_signal(n: int = 32, warps: int = 1):
    """Each of `warps` warps puts its n / warps u32 of `send` into `recv` of PE (me + 1) % npes with a
    put-with-signal (warp form; one warp: NVSHMEM_SIGNAL_SET 1, more: NVSHMEM_SIGNAL_ADD 1 each, no fence
    between them), thread 0 waits for its own signal == warps, then the block copies `recv` to `out`."""
    part = n // warps
    sig_op = "9" if warps == 1 else "10"
    return module("ring", ".param .u64 send, .param .u64 recv, .param .u64 sig, .param .u64 out", f"""
    ld.param.u64 %rd1, [send];
    ld.param.u64 %rd2, [recv];
    ld.param.u64 %rd3, [sig];
    ld.param.u64 %rd4, [out];
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    add.u32 %r3, %r1, 1;
    rem.u32 %r3, %r3, %r2;
    mov.u32 %r4, %tid.x;
    shr.u32 %r6, %r4, 5;
    setp.ge.u32 %p1, %r6, {warps};
    @%p1 bra SENT;
    mul.wide.u32 %rd9, %r6, {4 * part};
    add.s64 %rd10, %rd1, %rd9;
    add.s64 %rd11, %rd2, %rd9;
{call("nvshmemx_putmem_signal_nbi_warp", [(".b64", "%rd11"), (".b64", "%rd10"), (".b64", str(4 * part)),
                                          (".b64", "%rd3"), (".b64", "1"), (".b32", sig_op), (".b32", "%r3")])}
SENT:
    setp.ne.u32 %p2, %r4, 0;
    @%p2 bra WAITED;
{call("nvshmem_signal_wait_until", [(".b64", "%rd3"), (".b32", "0"), (".b64", str(warps))], (".b64", "%rd5"))}
WAITED:
    bar.sync 0;
    setp.ge.u32 %p3, %r4, {n};
    @%p3 bra DONE;
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.u32 %r5, [%rd7];
    add.s64 %rd8, %rd4, %rd6;
    st.global.u32 [%rd8], %r5;
DONE:
{call("nvshmem_quiet")}
    ret;""")


def pointer_table():
    """Thread t < npes writes nvshmem_ptr(buf, t) into out[t]."""
    return module("ptrs", ".param .u64 buf, .param .u64 out", f"""
    ld.param.u64 %rd1, [buf];
    ld.param.u64 %rd2, [out];
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
{call("nvshmem_ptr", [(".b64", "%rd1"), (".b32", "%r1")], (".b64", "%rd3"))}
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd5, %rd2, %rd4;
    st.global.u64 [%rd5], %rd3;
DONE:
    ret;""")


def barrier_ring():
    """Thread 0 puts my_pe + 1 into `slot` of the next PE, calls nvshmem_barrier_all, then copies its own
    `slot` to `out` (the barrier completes every PE's puts first)."""
    return module("bring", ".param .u64 value, .param .u64 slot, .param .u64 out", f"""
    ld.param.u64 %rd1, [value];
    ld.param.u64 %rd2, [slot];
    ld.param.u64 %rd3, [out];
    mov.u32 %r9, %tid.x;
    setp.ne.u32 %p1, %r9, 0;
    @%p1 bra DONE;
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    add.u32 %r3, %r1, 1;
    st.global.u32 [%rd1], %r3;
    rem.u32 %r4, %r3, %r2;
{call("nvshmem_putmem_nbi", [(".b64", "%rd2"), (".b64", "%rd1"), (".b64", "4"), (".b32", "%r4")])}
{call("nvshmem_barrier_all")}
    ld.global.u32 %r5, [%rd2];
    st.global.u32 [%rd3], %r5;
DONE:
    ret;""")


def nvlink_flag(release: str = "st.release.sys.global.u32"):
    """Over NVLink with plain pointers (nvshmem_ptr): thread 0 of PE p writes p * 10 + 7 into `data` of its
    same-node partner PE p ^ 1, raises the partner's `flag` with `release`, spins (ld.acquire.sys) on its own
    flag and copies its own `data` to `out`."""
    return module("nvl", ".param .u64 data, .param .u64 flag, .param .u64 out", f"""
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [flag];
    ld.param.u64 %rd3, [out];
    mov.u32 %r9, %tid.x;
    setp.ne.u32 %p1, %r9, 0;
    @%p1 bra DONE;
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
    xor.b32 %r2, %r1, 1;
{call("nvshmem_ptr", [(".b64", "%rd1"), (".b32", "%r2")], (".b64", "%rd4"))}
{call("nvshmem_ptr", [(".b64", "%rd2"), (".b32", "%r2")], (".b64", "%rd5"))}
    mad.lo.u32 %r3, %r1, 10, 7;
    st.global.u32 [%rd4], %r3;
    mov.u32 %r4, 1;
    {release} [%rd5], %r4;
SPIN:
    ld.acquire.sys.global.u32 %r5, [%rd2];
    setp.eq.u32 %p2, %r5, 0;
    @%p2 bra SPIN;
    ld.global.u32 %r6, [%rd1];
    st.global.u32 [%rd3], %r6;
DONE:
    ret;""")


def launch_all(kernel, cluster: Cluster, args_of, block: int = 32):
    """Launch `kernel` on every PE with args_of(pe); returns the sync result (each launch's error raised)."""
    pending = [kernel.launch((1,), (block,), args_of(pe), device=dev, stream=dev.stream())
               for pe, dev in enumerate(cluster.devices)]
    result = cluster.synchronize()
    for p in pending:
        p.result()
    return result


def put_and_exit():
    """Thread 0 puts its `value` (my_pe + 1) into `slot` of PE (me + 1) % npes and exits: no quiet, no wait."""
    return module("put_exit", ".param .u64 value, .param .u64 slot", f"""
    ld.param.u64 %rd1, [value];
    ld.param.u64 %rd2, [slot];
    mov.u32 %r9, %tid.x;
    setp.ne.u32 %p1, %r9, 0;
    @%p1 bra DONE;
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    add.u32 %r3, %r1, 1;
    st.global.u32 [%rd1], %r3;
    rem.u32 %r4, %r3, %r2;
{call("nvshmem_putmem_nbi", [(".b64", "%rd2"), (".b64", "%rd1"), (".b64", "4"), (".b32", "%r4")])}
DONE:
    ret;""")


def collective_put(form: str = "block", per_thread_dest: bool = False):
    """Every thread calls nvshmemx_putmem_nbi_{form}: `n` u32 of `send` into `recv` of PE (me + 1) % npes
    (per_thread_dest: each thread passes its own dest, which a collective call forbids); then quiet and
    nvshmem_barrier_all by thread 0, and the block copies `recv` to `out` (n = the block size)."""
    dest = "%rd6" if per_thread_dest else "%rd2"
    return module("coll", ".param .u64 send, .param .u64 recv, .param .u64 out", f"""
    ld.param.u64 %rd1, [send];
    ld.param.u64 %rd2, [recv];
    ld.param.u64 %rd3, [out];
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    add.u32 %r3, %r1, 1;
    rem.u32 %r3, %r3, %r2;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %ntid.x;
    mul.wide.u32 %rd4, %r5, 4;
    mul.wide.u32 %rd5, %r4, 4;
    add.s64 %rd6, %rd2, %rd5;
{call(f"nvshmemx_putmem_nbi_{form}", [(".b64", dest), (".b64", "%rd1"), (".b64", "%rd4"), (".b32", "%r3")])}
    setp.ne.u32 %p1, %r4, 0;
    @%p1 bra WAITED;
{call("nvshmem_barrier_all")}
WAITED:
    bar.sync 0;
    add.s64 %rd7, %rd2, %rd5;
    ld.global.u32 %r6, [%rd7];
    add.s64 %rd8, %rd3, %rd5;
    st.global.u32 [%rd8], %r6;
    ret;""")


def barrier_by_every_thread():
    """Every thread calls nvshmem_barrier_all (the thread form wants one thread per PE)."""
    return module("ball", ".param .u64 unused", f"""
{call("nvshmem_barrier_all")}
    ret;""")


def all_to_all_fenced_by_thread0():
    """all_to_all whose fence is called by thread 0 alone, between the other threads' puts and their signals
    (bar.sync around it): NVSHMEM's fence orders the calling thread's operations only, so thread t's signal is
    not ordered after thread t's put (t > 0)."""
    put = call("nvshmem_putmem_nbi", [(".b64", "%rd7"), (".b64", "%rd9"), (".b64", "%rd10"), (".b32", "%r3")])
    sig = call("nvshmemx_signal_op", [(".b64", "%rd3"), (".b64", "1"), (".b32", str(SIGNAL_ADD)), (".b32", "%r3")])
    return module("a2a", ".param .u64 send, .param .u64 recv, .param .u64 sig, .param .u64 out, .param .u32 n", f"""
    ld.param.u64 %rd1, [send];
    ld.param.u64 %rd2, [recv];
    ld.param.u64 %rd3, [sig];
    ld.param.u64 %rd4, [out];
    ld.param.u32 %r9, [n];
{call("nvshmem_my_pe", ret=(".b32", "%r1"))}
{call("nvshmem_n_pes", ret=(".b32", "%r2"))}
    mov.u32 %r3, %tid.x;
    setp.ge.u32 %p1, %r3, %r2;
    mul.lo.u32 %r4, %r1, %r9;
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd2, %rd6;
    mul.lo.u32 %r5, %r3, %r9;
    mul.wide.u32 %rd8, %r5, 4;
    add.s64 %rd9, %rd1, %rd8;
    mul.wide.u32 %rd10, %r9, 4;
    @%p1 bra PUT_DONE;
{put}
PUT_DONE:
    bar.sync 0;
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra FENCED;
{call("nvshmem_fence")}
FENCED:
    bar.sync 0;
    @%p1 bra SIGNALLED;
{sig}
SIGNALLED:
    @%p2 bra WAITED;
    cvt.u64.u32 %rd11, %r2;
{call("nvshmem_signal_wait_until", [(".b64", "%rd3"), (".b32", str(CMP_GE)), (".b64", "%rd11")], (".b64", "%rd12"))}
WAITED:
    bar.sync 0;
    mul.lo.u32 %r7, %r2, %r9;
    mov.u32 %r5, %r3;
    mov.u32 %r8, %ntid.x;
COPY:
    setp.ge.u32 %p3, %r5, %r7;
    @%p3 bra DONE;
    mul.wide.u32 %rd13, %r5, 4;
    add.s64 %rd14, %rd2, %rd13;
    ld.global.u32 %r10, [%rd14];
    add.s64 %rd15, %rd4, %rd13;
    st.global.u32 [%rd15], %r10;
    add.u32 %r5, %r5, %r8;
    bra COPY;
DONE:
{call("nvshmem_quiet")}
    ret;""")
