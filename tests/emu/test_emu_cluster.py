"""Thread-block clusters of several CTAs on the emulator: cluster special registers, barrier.cluster,
mapa / getctarank and distributed shared memory (ld/st/atom/st.async on another CTA's shared memory)."""

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu import LaunchError, MemoryFault

FLAVORS = ["sm_90a.O3", "sm_90a.G"]
rng = np.random.default_rng(11)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_ring_exchange(flavor):
    """__cluster_dims__(4,1,1): rank r reads slot (r+1)%4 = that rank's r*100 + in[its block]."""
    m = corpus_module("cluster_sm90", flavor)
    nb = 12
    inp = rng.integers(0, 50, nb).astype(np.int32)
    out = np.full(4 * nb, -1, np.int32)
    m.kernel("cluster_ring_exchange").launch(grid=(nb,), block=(32,), args=[inp, out], options={"num_sms": 2})
    b = np.arange(nb)
    rank, cid = b % 4, b // 4
    peer = cid * 4 + (rank + 1) % 4
    want = np.stack([rank, np.full(nb, 4), (peer % 4) * 100 + inp[peer], cid], 1)
    np.testing.assert_array_equal(out.reshape(nb, 4), want)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_dsmem_reduce(flavor):
    """Every CTA of a 2-CTA cluster atomically adds its block sum into rank 0's shared accumulator."""
    m = corpus_module("cluster_sm90", flavor)
    nb = 6
    inp = rng.integers(-1000, 1000, nb * 128).astype(np.int32)
    out = np.zeros(nb // 2, np.int32)
    m.kernel("cluster_dsmem_reduce").launch(grid=(nb,), block=(128,), args=[inp, out])
    np.testing.assert_array_equal(out, inp.reshape(nb // 2, 256).sum(1))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_push_slots_cluster_chosen_at_launch(flavor):
    """st.shared::cluster push into every CTA: each holds {1, ..., nranks}; without a cluster, {1}."""
    m = corpus_module("cluster_sm90", flavor)
    k = m.kernel("cluster_push_slots")
    out = np.zeros(4 * 8, np.int32)
    k.launch(grid=(4,), block=(64,), args=[out], cluster=(2, 1, 1))
    want = np.zeros((4, 8), np.int32)
    want[:, :2] = [1, 2]
    np.testing.assert_array_equal(out.reshape(4, 8), want)
    out[:] = 0
    k.launch(grid=(4,), block=(64,), args=[out])  # no cluster: one-CTA clusters as before
    want[:, 1] = 0
    np.testing.assert_array_equal(out.reshape(4, 8), want)


def test_st_async_and_red_async_to_the_peer():
    """hopper_misc st_async_exchange: st.async / red.async complete bytes on the peer's mbarrier."""
    m = corpus_module("hopper_misc_sm90", "sm_90a.O3")
    inp = rng.integers(0, 1 << 20, 4 * 32).astype(np.int32)
    out = np.zeros(4 * 33, np.int32)
    m.kernel("st_async_exchange").launch(grid=(4,), block=(32,), args=[inp, out], options={"watchdog_s": 20})
    got = out.reshape(4, 33)
    peer = np.arange(4) ^ 1
    np.testing.assert_array_equal(got[:, :32], inp.reshape(4, 32)[peer])
    np.testing.assert_array_equal(got[:, 32], 32)


def test_cluster_shape_errors():
    m = corpus_module("cluster_sm90", "sm_90a.O3")
    inp, out = np.zeros(8, np.int32), np.zeros(32, np.int32)
    with pytest.raises(LaunchError, match=r"grid \(6, 1, 1\) is not a whole number of clusters \(4, 1, 1\)"):
        m.kernel("cluster_ring_exchange").launch(grid=(6,), block=(32,), args=[inp, out])
    with pytest.raises(LaunchError, match="reqnctapercluster"):
        m.kernel("cluster_ring_exchange").launch(grid=(8,), block=(32,), args=[inp, out], cluster=(2, 1, 1))
    with pytest.raises(LaunchError, match="limit is 16"):
        m.kernel("cluster_push_slots").launch(grid=(32,), block=(32,), args=[out], cluster=(32, 1, 1))


HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# A (2,2,1) cluster over a (4,2,1) grid: each thread 0 records its cluster registers, then reads
# rank (r+1)%4's `tag` through a generic mapa and getctarank, and atomically adds 1 to rank 0's `cnt`.
SREGS = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<30>;
    .reg .b64 %rd<8>;
    .shared .align 4 .u32 tag;
    .shared .align 4 .u32 cnt;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %cluster_ctarank;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ctaid.y;
    mov.u32 %r5, %nctaid.x;
    mad.lo.u32 %r6, %r4, %r5, %r3;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SKIP;
    mad.lo.u32 %r7, %r6, 16, 1000;
    st.shared.u32 [tag], %r7;
    st.shared.u32 [cnt], 0;
SKIP:
    barrier.cluster.arrive.relaxed;
    barrier.cluster.wait;
    @%p1 bra DONE;
    mul.wide.u32 %rd2, %r6, 64;
    add.u64 %rd2, %rd1, %rd2;
    mov.u32 %r8, %cluster_ctaid.x;
    mov.u32 %r9, %cluster_ctaid.y;
    mov.u32 %r10, %clusterid.x;
    mov.u32 %r11, %clusterid.y;
    mov.u32 %r12, %nclusterid.x;
    mov.u32 %r13, %cluster_nctaid.y;
    mov.u32 %r14, %cluster_nctarank;
    mov.pred %p0, %is_explicit_cluster;
    selp.u32 %r15, 1, 0, %p0;
    st.global.v4.u32 [%rd2], {%r2, %r8, %r9, %r10};
    st.global.v4.u32 [%rd2+16], {%r11, %r12, %r13, %r14};
    add.u32 %r16, %r2, 1;
    rem.u32 %r16, %r16, %r14;
    mov.u64 %rd3, tag;
    cvta.shared.u64 %rd3, %rd3;
    mapa.u64 %rd4, %rd3, %r16;
    ld.u32 %r17, [%rd4];
    getctarank.u64 %r18, %rd4;
    getctarank.shared::cluster.u32 %r19, tag;
    mov.u32 %r20, cnt;
    mov.u32 %r21, 0;
    mapa.shared::cluster.u32 %r22, %r20, %r21;
    atom.shared::cluster.add.u32 %r23, [%r22], 1;
    st.global.v4.u32 [%rd2+32], {%r15, %r17, %r18, %r19};
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    ld.shared.u32 %r24, [cnt];
    st.global.u32 [%rd2+48], %r24;
    bra.uni END;
DONE:
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
END:
    ret;
}
"""


def test_two_dimensional_cluster_registers_and_remote_access():
    k = pf.parse(SREGS, filename="hand.ptx").kernel("k")
    out = np.zeros((8, 16), np.uint32)
    k.launch(grid=(4, 2), block=(64,), args=[out], cluster=(2, 2, 1), options={"num_sms": 1})  # one cluster per wave
    for by in range(2):
        for bx in range(4):
            row = out[by * 4 + bx]
            cx, cy = bx % 2, by % 2
            rank = cx + 2 * cy
            pr = (rank + 1) % 4
            pb = (bx - cx + pr % 2) + 4 * (by - cy + pr // 2)
            assert list(row[:8]) == [rank, cx, cy, bx // 2, by // 2, 2, 2, 4]
            assert list(row[8:12]) == [1, 1000 + 16 * pb, pr, rank]
            assert (row[12] == 4) == (rank == 0)  # rank 0 counted all four atomics


REMOTE = HEAD + """
.visible .entry k(.param .u32 rank, .param .u32 off)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .shared .align 4 .b8 buf[64];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [off];
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r4, %tid.x;
    setp.ne.u32 %p1, %r4, 5;
    @%p1 bra END;
    mapa.shared::cluster.u32 %r5, %r3, %r1;
    ld.shared::cluster.u32 %r6, [%r5];
END:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ret;
}
"""


def test_remote_out_of_bounds_is_a_memory_fault():
    k = pf.parse(REMOTE, filename="hand.ptx").kernel("k")
    k.launch(grid=(4,), block=(32,), args=[1, 60], cluster=(2, 1, 1))  # in bounds
    with pytest.raises(MemoryFault, match="shared window of CTA rank 1 of this cluster is 64 bytes") as e:
        k.launch(grid=(4,), block=(32,), args=[1, 64], cluster=(2, 1, 1))
    err = e.value
    assert err.thread == (5, 0, 0) and err.block == (0, 0, 0) and err.ptx_line == 20
    assert "hand.ptx:20" in str(err) and "ld.shared::cluster" in str(err)
    with pytest.raises(MemoryFault, match="CTA rank 2 is outside this cluster of 2"):
        k.launch(grid=(4,), block=(32,), args=[2, 0], cluster=(2, 1, 1))


def test_sanitizer_clean_across_cluster_barriers():
    """barrier.cluster orders shared-memory accesses for the race checker; remote accesses are in bounds."""
    from ptxforge.emu.sanitizer import Sanitizer

    m = corpus_module("cluster_sm90", "sm_90a.O3")
    inp = rng.integers(-1000, 1000, 4 * 128).astype(np.int32)
    out = np.zeros(2, np.int32)
    m.kernel("cluster_dsmem_reduce").launch(grid=(4,), block=(128,), args=[inp, out],
                                            options={"sanitize": Sanitizer(shuffle_seed=3)})  # shuffled cluster order
    np.testing.assert_array_equal(out, inp.reshape(2, 256).sum(1))
    out = np.zeros(32, np.int32)
    m.kernel("cluster_push_slots").launch(grid=(4,), block=(64,), args=[out], cluster=(2, 1, 1),
                                          options={"sanitize": True})
    assert (out.reshape(4, 8)[:, :2] == [1, 2]).all()
