"""Release/acquire in hand-written PTX: what a release covers, and flags between warps of one block."""

from __future__ import annotations

import numpy as np

HEAD = """.version 8.0
.target sm_80
.address_size 64
"""

# block 0 writes data[0], releases the flag, then writes data[1]; block 1 acquires the flag and reads both
AFTER_RELEASE = HEAD + """
.visible .entry after_release(.param .u64 data, .param .u64 flag, .param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [flag];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %ctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra CONSUMER;
    st.global.u32 [%rd1], 7;
    st.release.gpu.global.u32 [%rd2], 1;
    st.global.u32 [%rd1+4], 8;
    ret;
CONSUMER:
    ld.acquire.gpu.global.u32 %r2, [%rd2];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra CONSUMER;
    ld.global.u32 %r3, [%rd1];
    st.global.u32 [%rd3], %r3;
    ld.global.u32 %r4, [%rd1+4];
    st.global.u32 [%rd3+4], %r4;
    ret;
}
"""

# warp 0 fills s[0..31] and raises a shared flag; warp 1 waits for it and reads s (one block)
WARP_FLAG = HEAD + """
.visible .entry warp_flag(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<3>;
    .shared .align 4 .b32 s[32];
    .shared .align 4 .b32 flag;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra CONSUMER;
    mov.u32 %r2, s;
    shl.b32 %r3, %r1, 2;
    add.u32 %r2, %r2, %r3;
    st.shared.u32 [%r2], %r1;
    bar.warp.sync -1;
    setp.ne.u32 %p2, %r1, 0;
    @%p2 bra DONE;
    STORE_FLAG;
DONE:
    ret;
CONSUMER:
    LOAD_FLAG;
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra CONSUMER;
    bar.warp.sync -1;
    sub.u32 %r5, %r1, 32;
    mov.u32 %r2, s;
    shl.b32 %r3, %r5, 2;
    add.u32 %r2, %r2, %r3;
    ld.shared.u32 %r6, [%r2];
    mul.wide.u32 %rd2, %r5, 4;
    add.u64 %rd2, %rd1, %rd2;
    st.global.u32 [%rd2], %r6;
    ret;
}
"""


def launch(text, name, grid, block, args):
    import ptxforge as pf
    from ptxforge.emu.sanitizer import SanitizerError

    k = pf.parse(text, filename=f"{name}.ptx").kernel(name)
    try:
        k.launch(grid=grid, block=block, args=args, device="emu", options={"sanitize": True})
    except SanitizerError as e:
        return e
    return None


def test_a_release_covers_only_what_came_before_it():
    out = np.zeros(2, np.uint32)
    err = launch(AFTER_RELEASE, "after_release", (2,), (1,), [np.zeros(2, np.uint32), np.zeros(1, np.uint32), out])
    assert err is not None
    races = [r for r in err.reports if r.kind == "race" and r.allocation.endswith("argument data")]
    assert len(races) == 1 and races[0].offset == 4, str(err)  # data[1], written after the release
    assert races[0].other["instruction"].startswith("st.global.u32 [%rd1+4]")
    assert out[0] == 7


def test_release_acquire_between_warps_of_one_block():
    ok = WARP_FLAG.replace("STORE_FLAG", "st.release.cta.shared.u32 [flag], 1") \
                  .replace("LOAD_FLAG", "ld.acquire.cta.shared.u32 %r4, [flag]")
    out = np.zeros(32, np.uint32)
    assert launch(ok, "warp_flag", (1,), (64,), [out]) is None
    np.testing.assert_array_equal(out, np.arange(32))
    fenced = WARP_FLAG.replace("STORE_FLAG", "fence.acq_rel.cta;\n    st.volatile.shared.u32 [flag], 1") \
                      .replace("LOAD_FLAG", "ld.volatile.shared.u32 %r4, [flag];\n    fence.acq_rel.cta")
    assert launch(fenced, "warp_flag", (1,), (64,), [np.zeros(32, np.uint32)]) is None
    weak = WARP_FLAG.replace("STORE_FLAG", "st.volatile.shared.u32 [flag], 1") \
                    .replace("LOAD_FLAG", "ld.volatile.shared.u32 %r4, [flag]")  # no fences: unordered
    err = launch(weak, "warp_flag", (1,), (64,), [np.zeros(32, np.uint32)])
    assert err is not None and any(r.kind == "race" and r.space == "shared" for r in err.reports), err


# block 0 writes a global word and raises a flag at SCOPE; block 1 acquires it at SCOPE and reads the word
SCOPED = """.version 8.0
.target sm_90
.address_size 64
.visible .entry scoped(.param .u64 data, .param .u64 flag, .param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [flag];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %ctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra CONSUMER;
    st.global.u32 [%rd1], 7;
    st.release.SCOPE.global.u32 [%rd2], 1;
    ret;
CONSUMER:
    setp.ne.u32 %p1, %r1, 1;
    @%p1 bra DONE;
WAIT:
    ld.acquire.SCOPE.global.u32 %r2, [%rd2];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra WAIT;
    ld.global.u32 %r3, [%rd1];
    st.global.u32 [%rd3], %r3;
DONE:
    ret;
}
"""


def test_cluster_scope_orders_the_ctas_of_one_cluster_only():
    import ptxforge as pf
    from ptxforge.emu.sanitizer import SanitizerError

    def run(scope, cluster):
        k = pf.parse(SCOPED.replace("SCOPE", scope), filename="scoped.ptx").kernel("scoped")
        out = np.zeros(1, np.uint32)
        try:
            k.launch(grid=(2,), block=(32,), args=[np.zeros(1, np.uint32), np.zeros(1, np.uint32), out],
                     device="emu", options={"sanitize": True}, cluster=cluster)
        except SanitizerError as e:
            assert out[0] == 7
            return e
        assert out[0] == 7
        return None

    assert run("cluster", (2, 1, 1)) is None  # both CTAs in one cluster
    assert run("gpu", (2, 1, 1)) is None
    err = run("cluster", (1, 1, 1))  # two clusters of one CTA each: .cluster does not reach
    races = [r for r in err.reports if r.kind == "race"]
    assert races and races[0].other.get("scope") == ".gpu", str(err)
    err = run("cta", (2, 1, 1))
    races = [r for r in err.reports if r.kind == "race"]
    assert races and races[0].other.get("scope") == ".cluster", str(err)


# each CTA of a 2-CTA cluster writes 32 words of global memory, then reads the other CTA's words
CLUSTER_EXCHANGE = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 data, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.u32 %r3, %r1, 32, %r2;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd1, %rd3;
    st.global.u32 [%rd4], %r3;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    xor.b32 %r4, %r3, 32;
    mul.wide.u32 %rd3, %r4, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r5, [%rd4];
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r5;
    ret;
}
"""


def test_barrier_cluster_orders_global_memory_across_the_ctas_of_a_cluster():
    import ptxforge as pf
    from ptxforge.emu.sanitizer import SanitizerError

    def run(text):
        k = pf.parse(text, filename="cluster_exchange.ptx").kernel("k")
        out = np.zeros(64, np.uint32)
        try:
            k.launch(grid=(2,), block=(32,), args=[np.zeros(64, np.uint32), out], device="emu",
                     options={"sanitize": True},
                     cluster=(2, 1, 1))
        except SanitizerError as e:
            return e, out
        return None, out

    err, out = run(CLUSTER_EXCHANGE)
    assert err is None, str(err)
    np.testing.assert_array_equal(out, np.arange(64) ^ 32)
    err, _ = run(CLUSTER_EXCHANGE.replace("    barrier.cluster.arrive;\n    barrier.cluster.wait;\n", ""))
    assert err is not None and err.reports[0].kind == "race"
