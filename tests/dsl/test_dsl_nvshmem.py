"""NVSHMEM's device API from the DSL: nvcc's declarations and .param layout, run on an emulated cluster."""

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.dsl import DSLTypeError, bar_sync, bitcast, cvt, if_, kernel, ld, mul_wide, ptr, range_, st, tid
from ptxforge.dsl import types as T
from ptxforge.dsl.nvshmem import (
    NVSHMEM_CMP_GE,
    NVSHMEM_SIGNAL_ADD,
    nvshmem_fence,
    nvshmem_my_pe,
    nvshmem_n_pes,
    nvshmem_putmem_nbi,
    nvshmem_quiet,
    nvshmem_signal_wait_until,
    nvshmemx_signal_op,
)
from ptxforge.emu import Cluster
from ptxforge.toolchain import find_tool

NVCC_PTX = Path(__file__).parent.parent / "emu" / "data" / "nvshmem_a2a.sm_90.O3.ptx"


@kernel(arch="sm_90")
def dsl_a2a(send: ptr(T.u32), recv: ptr(T.u32), sig: ptr(T.u64), out: ptr(T.u32), n: T.u32):
    me = bitcast(nvshmem_my_pe(), T.u32)
    npes = bitcast(nvshmem_n_pes(), T.u32)
    t = tid.x
    with if_(t < npes):
        nvshmem_putmem_nbi(recv + me * n, send + t * n, mul_wide(n, 4), t)
        nvshmem_fence()
        nvshmemx_signal_op(sig, 1, NVSHMEM_SIGNAL_ADD, t)
    with if_(t == 0):
        nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, cvt(npes, T.u64))
    bar_sync()
    for i in range_(t, npes * n, 32):  # (launched with 32 threads)
        st(out[i], ld(recv[i]))
    nvshmem_quiet()


def _signatures(module):
    return {f.name: ([p.type for p in f.params], [r.type for r in f.returns]) for f in module.functions
            if f.body is None}


def test_the_dsl_declares_nvshmem_as_nvcc_does():
    ours = _signatures(pf.parse(dsl_a2a.ptx()))
    nvcc = _signatures(pf.parse(NVCC_PTX.read_text()))  # nvcc 13.0 from NVSHMEM's C prototypes
    for name in ("nvshmem_my_pe", "nvshmem_n_pes", "nvshmem_signal_wait_until", "nvshmem_quiet"):
        assert ours[name] == nvcc[name]
    # as nvcc declares `void f(void *, const void *, size_t, int)` and `void f(uint64_t *, uint64_t, int, int)`
    assert ours["nvshmem_putmem_nbi"] == ([".b64", ".b64", ".b64", ".b32"], [])
    assert ours["nvshmemx_signal_op"] == ([".b64", ".b64", ".b32", ".b32"], [])
    assert ours["nvshmem_fence"] == ([], [])


def _have_ptxas() -> bool:
    try:
        find_tool("ptxas")
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _have_ptxas(), reason="ptxas is not installed")
def test_ptxas_accepts_the_dsl_kernel_as_relocatable_code():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "a2a.ptx"
        src.write_text(dsl_a2a.ptx())
        r = subprocess.run([str(find_tool("ptxas")), "-arch=sm_90", "-c", str(src), "-o", str(Path(tmp) / "a.o")],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("seed", [None, 4])
def test_a_dsl_all_to_all_runs_exactly_on_two_nodes(seed):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=seed, sanitize=seed is not None)
    n = 4
    send, recv = cluster.malloc((4, n), np.uint32, "send"), cluster.malloc((4, n), np.uint32, "recv")
    sig, out = cluster.malloc(1, np.uint64, "sig"), cluster.malloc((4, n), np.uint32, "out")
    for pe in range(4):
        send.write(pe, pe * 100 + np.arange(4 * n).reshape(4, n))
    pending = [dsl_a2a.launch((1,), (32,), [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe),
                                            np.uint32(n)], device=d, stream=d.stream())
               for pe, d in enumerate(cluster.devices)]
    cluster.synchronize()
    for p in pending:
        p.result()
    for q in range(4):  # slot p of PE q holds PE p's row q
        assert out.read(q).tolist() == [[p * 100 + q * n + i for i in range(n)] for p in range(4)]


def test_an_argument_of_the_wrong_width_is_a_dsl_type_error():
    with pytest.raises(DSLTypeError, match=r"nvshmem_putmem_nbi: argument nelems takes a 64-bit integer"):
        @kernel(arch="sm_90")
        def bad(a: ptr(T.u32), n: T.u32):
            nvshmem_putmem_nbi(a, a, n, 0)
    with pytest.raises(DSLTypeError, match=r"nvshmem_fence takes 0 argument\(s\) \(\), got 1"):
        @kernel(arch="sm_90")
        def bad2(a: ptr(T.u32)):
            nvshmem_fence(a)
