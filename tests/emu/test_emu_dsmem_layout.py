"""Shared addresses laid out as Hopper does: the CTA's %cluster_ctarank at bit 24 of its shared addresses, so
`generic ^ (1 << 24)` reaches the peer of a 2-CTA cluster and `cvta`, `mapa` and `getctarank` agree with it."""

from pathlib import Path

import numpy as np
import pytest
from conformance import hw_ops
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu.memory import SHARED_WINDOW

FLAVORS = ["sm_90a.O3", "sm_90a.G"]
NB = 4  # two clusters of two CTAs


def _run(name, flavor, **kw):
    m = corpus_module("dsmem_layout_sm90", flavor)
    inp = np.random.default_rng(5).integers(0, 500, NB * 64).astype(np.int32)
    out = np.full(NB * 64, -1, np.int32)
    addrs = np.zeros(NB * 4, np.uint64)
    m.kernel(name).launch(grid=(NB,), block=(64,), args=[inp, out, addrs], options=kw)
    rank = np.arange(NB) % 2
    want = 1000 * rank[:, None] + inp.reshape(NB, 64) + np.arange(1, 65)
    np.testing.assert_array_equal(out.reshape(NB, 64), want)  # each CTA's buf got exactly its peer's adds
    return addrs.reshape(NB, 4).astype(np.int64), rank


@pytest.mark.parametrize("flavor", FLAVORS)
def test_peer_reached_with_xor_of_bit_24(flavor):
    a, rank = _run("dsmem_xor_peer", flavor)
    generic, shared, peer_rank = a[:, 0], a[:, 1], a[:, 2]
    assert (a[:, 3] == rank).all()
    assert (generic - SHARED_WINDOW == shared).all()  # cvta: the generic window plus the 32-bit address
    assert (shared >> 24 == rank).all() and len(set((shared & 0xFFFFFF).tolist())) == 1
    assert (generic[rank == 1] - generic[rank == 0] == 1 << 24).all()
    assert (peer_rank == rank ^ 1).all()  # getctarank of the XOR'ed pointer names the peer


@pytest.mark.parametrize("flavor", FLAVORS)
def test_peer_reached_with_mapa(flavor):
    a, rank = _run("dsmem_mapa_peer", flavor, sanitize=True)
    generic_peer, peer32, self32 = a[:, 0], a[:, 1], a[:, 2]
    assert (peer32 >> 24 == rank ^ 1).all() and (self32 >> 24 == rank).all()
    assert (peer32 & 0xFFFFFF == self32 & 0xFFFFFF).all()
    assert (generic_peer == SHARED_WINDOW + peer32).all()


SYMBOL = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    .shared .align 4 .b8 pad[16];
    .shared .align 4 .b8 v[4];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ctaid.x;
    mul.wide.u32 %rd2, %r1, 24;
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r2, v;
    cvt.u64.u32 %rd4, %r2;
    st.global.u64 [%rd3], %rd4;
    cvta.shared.u64 %rd5, v;
    st.global.u64 [%rd3+8], %rd5;
    getctarank.shared::cluster.u32 %r3, v+4;
    cvt.u64.u32 %rd4, %r3;
    st.global.u64 [%rd3+16], %rd4;
    ret;
}
"""


def test_a_shared_symbol_carries_the_cta_rank_only_in_a_cluster():
    k = pf.parse(SYMBOL, filename="sym.ptx").kernel("k")
    out = np.zeros((4, 3), np.uint64)
    k.launch(grid=(4,), block=(32,), args=[out], cluster=(4, 1, 1))
    off = int(out[0, 0])
    assert [list(map(int, r)) for r in out] == [[r << 24 | off, SHARED_WINDOW + (r << 24 | off), r] for r in range(4)]
    out[:] = 0
    k.launch(grid=(4,), block=(32,), args=[out])  # no cluster: every CTA is rank 0, plain offsets
    assert (out[:, 0] == off).all() and (out[:, 1] == SHARED_WINDOW + off).all() and (out[:, 2] == 0).all()


RECORDING = Path(__file__).resolve().parents[1] / "conformance" / "data" / "hw_reference_h200.npz"


def _layout_facts(a):
    """What must agree with the GPU, whatever its window base: per CTA the rank bits of the 32-bit addresses,
    the step between the ranks' generic addresses, getctarank, and the generic mapa's distance from cvta."""
    xor, mapa = a.astype(np.int64)
    return {"rank": xor[:, 3].tolist(), "shared_rank_bits": (xor[:, 1] >> 24).tolist(),
            "generic_step": (xor[1::2, 0] - xor[0::2, 0]).tolist(), "getctarank": xor[:, 2].tolist(),
            "mapa_peer_rank_bits": (mapa[:, 1] >> 24).tolist(), "mapa_self_rank_bits": (mapa[:, 2] >> 24).tolist(),
            "generic_minus_shared": len(set((xor[:, 0] - xor[:, 1]).tolist())) == 1 and
            (mapa[:, 0] - mapa[:, 1] == xor[0, 0] - xor[0, 1]).all()}


def test_layout_is_the_documented_hopper_one_or_the_recorded_h200s():
    got = _layout_facts(hw_ops.run_dsmem_layout("emu"))
    hw = np.load(RECORDING)
    if "dsmem/layout" in hw.files:
        assert got == _layout_facts(hw["dsmem/layout"])
    else:  # not recorded yet (scripts/gpu_collect.py records it): the layout the PTX ISA and SASS show
        assert got == {"rank": [0, 1, 0, 1], "shared_rank_bits": [0, 1, 0, 1], "generic_step": [1 << 24] * 2,
                       "getctarank": [1, 0, 1, 0], "mapa_peer_rank_bits": [1, 0, 1, 0],
                       "mapa_self_rank_bits": [0, 1, 0, 1], "generic_minus_shared": True}
