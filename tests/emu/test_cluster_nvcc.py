"""nvcc's own PTX for NVSHMEM's device API runs on the emulated cluster: the calling convention is nvcc's.

data/nvshmem_a2a.sm_90.O3.ptx is `nvcc -ptx -O3 -arch=sm_90 -rdc=true data/nvshmem_a2a.cu` (nvcc 13.0), which
declares NVSHMEM's C prototypes. On a real cluster the same PTX links against NVSHMEM's device library
(not run here: no GPU); ptxas already accepts it as relocatable code with the calls unresolved.
"""

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from cluster_kernels import expected_a2a

import ptxforge as pf
from ptxforge.emu import Cluster
from ptxforge.toolchain import find_tool

DATA = Path(__file__).parent / "data"
PTX = DATA / "nvshmem_a2a.sm_90.O3.ptx"


def _have_ptxas() -> bool:
    try:
        find_tool("ptxas")
    except Exception:
        return False
    return True


@pytest.mark.parametrize("sanitize", [False, True])
def test_nvccs_all_to_all_over_two_nodes_is_exact(sanitize):
    k = pf.parse(PTX.read_text(), filename=PTX.name).kernel("a2a")
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, sanitize=sanitize, adversarial=1)
    n = 8
    send, recv = cluster.malloc((4, n), np.uint32, "send"), cluster.malloc((4, n), np.uint32, "recv")
    sig, out = cluster.malloc(1, np.uint64, "sig"), cluster.malloc((4, n), np.uint32, "out")
    for pe in range(4):
        q, i = np.meshgrid(np.arange(4), np.arange(n), indexing="ij")
        send.write(pe, pe * 1000 + q * 100 + i)
    pending = [k.launch((1,), (128,), [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe),
                                      np.int32(n)], device=d, stream=d.stream())
               for pe, d in enumerate(cluster.devices)]
    result = cluster.synchronize()
    for p in pending:
        p.result()
    assert np.array_equal(out.to_host().reshape(4, 4 * n), expected_a2a(4, n))
    assert {(t.bytes, t.messages) for t in result.links} == {(4 * n + 8, 1)}  # one put per warp, with its signal


@pytest.mark.skipif(not _have_ptxas(), reason="ptxas is not installed")
def test_ptxas_accepts_the_same_ptx_as_relocatable_code_with_nvshmem_unresolved():
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([str(find_tool("ptxas")), "-arch=sm_90", "-c", str(PTX), "-o", str(Path(tmp) / "a2a.o")],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
