# ruff: noqa: F405 -- the tests write kernels the way users do, with `from ptxforge.dsl import *`
"""What the DSL emits: one instruction per call, the PTX text it prints, round trips through the parser,
and ptxas acceptance of kernels that cover every instruction family of the issue."""

import re

import numpy as np
import pytest
from dsl_helpers import assemble_ok, needs_ptxas

import ptxforge
from ptxforge.dsl import *  # noqa: F403
from ptxforge.dsl import kernel as dsl_kernel
from ptxforge.ptx import ir


def body_lines(k, arch=None) -> list[str]:
    """The kernel's instruction lines, whitespace-normalised (`add.u32 %r3, %r1, %r2;`)."""
    text = k.ptx(arch)
    body = text[text.index("{") + 1:text.rindex("}")]
    return [re.sub(r"\s+", " ", ln.strip()) for ln in body.splitlines()
            if ln.strip() and not ln.strip().startswith(".reg")]


def roundtrip(k, arch=None):
    m = k.module(arch)
    assert ptxforge.parse(k.ptx(arch)) == m
    return m


# --------------------------------------------------------------------------- sugar and typing


def test_operator_sugar_picks_the_instruction_from_the_types():
    @dsl_kernel(arch="sm_80")
    def k(a: ptr(s32), f: ptr(f32), n: u32):
        x, y = ld(a[0]), ld(a[1])
        g = ld(f[0])
        st(a[2], x + y)
        st(a[3], x * y)
        st(a[4], div(x, y))
        st(a[5], rem(x, y))
        st(a[9].cast(u32), n // 3 + n % 5)
        st(a[6], x >> 3)
        st(a[7], (x & 0xFF) | (y ^ x))
        st(f[1], g * 0.5 - g)
        p = x < y
        q = n >= 7
        st(a[8], selp(x, y, p & q))

    lines = body_lines(k)
    for want in ("add.s32", "mul.lo.s32", "div.s32", "rem.s32", "div.u32", "rem.u32", "shr.s32 %r", "and.b32",
                 "xor.b32", "or.b32", "mul.f32", "sub.f32", "setp.lt.s32", "setp.ge.u32", "and.pred", "selp.s32"):
        assert any(ln.startswith(want) for ln in lines), (want, lines)
    assert any("0f3F000000" in ln for ln in lines)  # 0.5 as an exact f32 hex literal
    roundtrip(k)


def test_in_place_ops_update_the_same_register():
    @dsl_kernel(arch="sm_80")
    def k(a: ptr(f32)):
        acc = reg.f32(0.0)
        acc += ld(a[0])
        st(a[1], acc)

    lines = body_lines(k)
    add_line = next(ln for ln in lines if ln.startswith("add.f32"))
    dst, src = re.match(r"add.f32 (%f\d+), (%f\d+),", add_line).groups()
    assert dst == src


def test_one_call_one_instruction_and_unused_parameters_cost_nothing():
    @dsl_kernel(arch="sm_80")
    def k(a: ptr(f32), unused: ptr(f32), n: u32):
        st(a[5], ld(a[4]))

    lines = body_lines(k)
    assert lines == ["ld.param.u64 %rd1, [a];", "ld.global.f32 %f1, [%rd1+16];",
                     "st.global.f32 [%rd1+20], %f1;", "ret;"]


def test_loads_and_stores_with_cache_hints_and_vectors():
    @dsl_kernel(arch="sm_90a")
    def k(src: ptr(f32, align=16), dst: ptr(f32, align=16), i: u32):
        v = ld(src[i], nc=True, L1="no_allocate", L2="256B", v=4)
        st(dst[i], v, cache="cs")
        w = ld(src[0], sem="acquire", scope="gpu")
        st(dst[0], w, sem="release", scope="gpu")
        h = ld(src[8].cast(u32), cache="cg", v=2)
        st(dst[8].cast(u32), h, L1="evict_last")

    lines = body_lines(k)
    assert any(ln.startswith("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%f1, %f2, %f3, %f4}, [%rd")
               for ln in lines)
    for want in ("st.global.cs.v4.f32", "ld.acquire.gpu.global.f32", "st.release.gpu.global.f32",
                 "ld.global.cg.v2.u32", "st.global.L1::evict_last.v2.u32"):
        assert any(ln.startswith(want) for ln in lines), want
    roundtrip(k)


def test_half_bf16_and_fp8_arithmetic_and_conversions():
    @dsl_kernel(arch="sm_90a")
    def k(h: ptr(f16), b: ptr(bf16), f: ptr(f32), q: ptr(u32)):
        x = ld(h[0])
        st(h[1], fma(x, x, x))
        y = ld(b[0])
        st(b[1], y + y)
        st(f[0], cvt(x, f32) + cvt(y, f32))
        st(b[2], cvt(ld(f[1]), bf16))
        pair = cvt_pack(ld(f[2]), ld(f[3]), e4m3x2)
        back = cvt(pair, f16x2)
        lo, hi = unpack(back, type=f16)
        st(h[4], lo)
        st(h[5], hi)
        st(q[0], pack(pair, cvt_pack(ld(f[4]), ld(f[5]), e5m2x2)).view(u32))
        st(q[1], cvt(ld(f[6]), s32).view(u32))
        st(f[7], cvt(ld(q[2]), f32))
        st(h[6], 1.5)

    lines = body_lines(k)
    for want in ("fma.rn.f16", "add.bf16", "cvt.f32.f16", "cvt.f32.bf16", "cvt.rn.bf16.f32",
                 "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e4m3x2", "cvt.rn.satfinite.e5m2x2.f32",
                 "cvt.rzi.s32.f32", "cvt.rn.f32.u32", "ld.global.b16", "mov.b16 %rs"):
        assert any(ln.startswith(want) for ln in lines), want
    roundtrip(k)


def test_atomics_barriers_fences():
    @dsl_kernel(arch="sm_90a")
    def k(c: ptr(u32), f: ptr(f32), h: ptr(f16x2)):
        old = atom("add", c[0], 1)
        atom("max", c[1], old, sem="relaxed", scope="gpu")
        atom_cas(c[2], 0, tid.x)
        red("add", f[0], 1.0)
        red("or", c[3], old)
        red("add", h[0], ld(h[1]))
        bar_sync()
        bar_sync(1, 64)
        fence("acq_rel", "gpu")
        fence("sc", "sys")
        membar("cta")
        fence_proxy_async()
        s = shared(u32, 4)
        atom("inc", s[0], 9)

    lines = body_lines(k)
    for want in ("atom.global.add.u32", "atom.relaxed.gpu.global.max.u32", "atom.global.cas.b32",
                 "red.global.add.f32", "red.global.or.b32", "red.global.add.noftz.f16x2", "bar.sync 0;",
                 "bar.sync 1, 64;", "fence.acq_rel.gpu;", "fence.sc.sys;", "membar.cta;",
                 "fence.proxy.async.shared::cta;", "atom.shared.inc.u32"):
        assert any(ln.startswith(want) for ln in lines), want
    roundtrip(k)


def test_warp_level_instructions():
    @dsl_kernel(arch="sm_80")
    def k(out: ptr(u32)):
        v = laneid.get()
        st(out[0], shfl_up(v, 1) + shfl_idx(v, 0) + shfl_xor(v, 4) + shfl_down(v, 2, mask=0xFFFF))
        p = v < 16
        st(out[1], ballot(p))
        st(out[2], selp(1, 0, vote_all(p), type=u32) + selp(1, 0, vote_any(~p), type=u32))
        st(out[3], redux("add", v) + redux("max", v) + redux("xor", v))
        st(out[4], match_any(v) + match_all(v)[0] + activemask())

    lines = body_lines(k)
    for want in ("shfl.sync.up.b32", "shfl.sync.idx.b32", "shfl.sync.bfly.b32", "shfl.sync.down.b32",
                 "vote.sync.ballot.b32", "vote.sync.all.pred", "vote.sync.any.pred %p", "redux.sync.add.u32",
                 "redux.sync.max.u32", "redux.sync.xor.b32", "match.any.sync.b32", "match.all.sync.b32",
                 "activemask.b32", "mov.u32 %r1, %laneid;"):
        assert any(ln.startswith(want) for ln in lines), want
    assert any("vote.sync.any.pred" in ln and ", !%p" in ln for ln in lines)  # ~p costs no instruction
    assert any(ln.endswith(", 65535;") for ln in lines)
    roundtrip(k)


def test_control_flow_becomes_branches():
    @dsl_kernel(arch="sm_80")
    def k(out: ptr(u32), n: u32):
        acc = reg.u32(0)
        for i in range_(n):
            with if_(i < 10):
                acc += i
            with else_():
                acc += 1
        for j in range_(0, 8, 2):  # constant bounds: no entry test
            acc += j
        with while_(lambda: acc > 100):
            acc -= 3
        st(out[0], acc)

    lines = body_lines(k)
    assert sum(1 for ln in lines if ln.startswith("@%p") and " bra " in ln) == 3  # two back edges + entry test
    assert sum(1 for ln in lines if ln.startswith("@!%p") and " bra " in ln) == 2  # if_ and while_ exits
    assert sum(1 for ln in lines if ln.startswith("bra.uni")) == 2  # else_ skip and while_ back edge
    roundtrip(k)
    out = np.zeros(1, np.uint32)
    k.launch(grid=(1,), block=(1,), args=[out, np.uint32(13)], device="emu")
    acc = sum(i if i < 10 else 1 for i in range(13)) + sum(range(0, 8, 2))
    while acc > 100:
        acc -= 3
    assert out[0] == acc


def test_guard_predicates_instructions():
    @dsl_kernel(arch="sm_80")
    def k(out: ptr(u32)):
        with guard(laneid == 0):
            st(out[0], 1)
        with guard(~(laneid == 0)):
            st(out[1], 2)

    lines = body_lines(k)
    assert any(ln.startswith("@%p1 st.global.u32") for ln in lines)
    assert any(ln.startswith("@!%p2 st.global.u32") for ln in lines)


# --------------------------------------------------------------------------- memory spaces, functions, escape hatch


def test_shared_memory_static_dynamic_and_2d():
    @dsl_kernel(arch="sm_80")
    def k(out: ptr(f32)):
        tile = shared(f32, (8, 32), align=128, name="tile")
        dyn = dynamic_shared(f32)
        st(tile[tid.y, tid.x], 1.0)
        st(tile[2, 3], 2.0)
        st(dyn[tid.x], ld(tile[tid.y, 5]))
        bar_sync()
        st(out[tid.x], ld(dyn[tid.x]))

    m = roundtrip(k)
    vars_ = {v.name: v for v in m.variables}
    assert vars_["k_tile"].align == 128 and vars_["k_tile"].array == (256,) and vars_["k_tile"].type == ".f32"
    assert vars_["dynamic_smem"].linkage == ".extern" and vars_["dynamic_smem"].array == (None,)
    assert any(ln == "st.shared.f32 [k_tile+268], %f2;" for ln in body_lines(k))  # (2*32+3)*4
    out = np.zeros(32, np.float32)
    k.launch(grid=(1,), block=(32, 8), args=[out], device="emu", shared_mem=32 * 4)
    np.testing.assert_array_equal(out, 1.0)


def test_device_function_call():
    @func
    def axpb(x: f32, a: f32, b: f32) -> f32:
        return fma(x, a, b)

    @dsl_kernel(arch="sm_80")
    def k(v: ptr(f32)):
        st(v[tid.x], axpb(ld(v[tid.x]), 2.0, 1.0))

    m = roundtrip(k)
    f = m.function("axpb")
    assert f.kind == "func" and [p.type for p in f.params] == [".f32"] * 3 and f.returns[0].type == ".f32"
    assert any(isinstance(s, ir.Block) for s in m.function("k").body)
    v = np.arange(8, dtype=np.float32)
    k.launch(grid=(1,), block=(8,), args=[v], device="emu")
    np.testing.assert_array_equal(v, np.arange(8) * 2 + 1)


def test_raw_escape_hatch_is_parsed_and_checked():
    @dsl_kernel(arch="sm_80")
    def k(out: ptr(u32)):
        x = reg.u32(5)
        raw("mul.lo.u32 {x}, {x}, 3;\n add.u32 {x}, {x}, {y};", x=x, y=laneid)
        st(out[laneid], x)

    lines = body_lines(k)
    assert "mul.lo.u32 %r1, %r1, 3;" in lines
    out = np.zeros(4, np.uint32)
    k.launch(grid=(1,), block=(4,), args=[out], device="emu")
    np.testing.assert_array_equal(out, 15 + np.arange(4))

    with pytest.raises(DSLError, match="raw: "):
        @dsl_kernel(arch="sm_80")
        def bad(out: ptr(u32)):
            raw("add.u32 %nope, ;")


def test_version_follows_the_features_used():
    @dsl_kernel
    def k(a: ptr(f32)):
        st(a[0], ld(a[0]))

    assert k.module("sm_80").version == (7, 0)
    assert k.module("sm_90a").version == (8, 0)
    assert k.module("sm_100a").version == (8, 6)

    @dsl_kernel
    def k2(a: ptr(f32)):
        st(a[0], ld(a[0], L2="evict_last", v=4)[0])  # .L2::evict_* needs PTX 8.8 (and sm_100)

    with pytest.raises(DSLArchError):
        k2.ptx()
    assert k2.module("sm_100a").version == (8, 8)


def test_specialize_and_link():
    @dsl_kernel(arch="sm_80")
    def scale(a: ptr(f32), factor=2.0):
        st(a[tid.x], ld(a[tid.x]) * factor)

    triple = scale.specialize(factor=3.0)
    assert triple.name == "scale_factor3_0"
    m = link([scale, triple])
    assert [f.name for f in m.kernels] == ["scale", "scale_factor3_0"]
    a = np.ones(4, np.float32)
    triple.launch(grid=(1,), block=(4,), args=[a], device="emu")
    np.testing.assert_array_equal(a, 3.0)


# --------------------------------------------------------------------------- tensor cores, async copies, ptxas


def coverage_sm90a():
    @dsl_kernel(arch="sm_90a", maxntid=256, minnctapersm=1)
    def cover(g: ptr(bf16, align=16), out: ptr(f32, align=16)):
        sa = shared(bf16, (16, 16), align=128, name="sa")
        bars = mbarriers(2)
        with if_(tid.x == 0):
            mbarrier_init(bars[0], 1)
            mbarrier_init(bars[1], 128)
            fence_mbarrier_init()
        bar_sync()
        cp_async(sa[tid.x >> 1, (tid.x & 1) << 3], g + (tid.x << 3))
        cp_async_commit()
        cp_async_wait(0)
        cp_async_mbarrier_arrive(bars[1])
        with if_(elect_sync()):
            mbarrier_arrive_expect_tx(bars[0], 512)
            cp_async_bulk(sa[0, 0], g, 512, bars[0])
        mbarrier_wait(bars[0], 0)
        mbarrier_arrive(bars[1])
        af = ldmatrix(sa[laneid & 15, (laneid >> 4) << 3], x=4)
        bf = ldmatrix(sa[laneid & 7, 0], x=2, trans=True)
        acc = reg.f32[4].fill(0.0)
        mma_sync(acc, af, bf, acc)
        with if_(tid.x < 128):
            setmaxnreg(40, inc=False)
        with else_():
            setmaxnreg(232, inc=True)
        desc = wgmma_descriptor(sa[0, 0], lbo=128, sbo=256)
        d = reg.f32[4].fill(0.0)
        wgmma_fence()
        wgmma_mma_async(d, desc, desc, shape="m64n8k16", atype=bf16, scale_d=0)
        wgmma_commit()
        wgmma_wait(0)
        st(out[tid.x << 3], (acc[0], acc[1], acc[2], acc[3]))
        st(out[(tid.x << 3) + 4], tuple(d))
    return cover


def test_tensor_core_and_async_copy_instructions():
    k = coverage_sm90a()
    lines = body_lines(k)
    for want in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster;", "cp.async.cg.shared.global",
                 "cp.async.commit_group;", "cp.async.wait_group 0;", "cp.async.mbarrier.arrive.noinc.shared.b64",
                 "elect.sync _|%p", "mbarrier.arrive.expect_tx.shared::cta.b64",
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", "mbarrier.try_wait.parity",
                 "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "setmaxnreg.dec.sync.aligned.u32 40;",
                 "setmaxnreg.inc.sync.aligned.u32 232;", "wgmma.fence.sync.aligned;",
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", "wgmma.commit_group.sync.aligned;",
                 "wgmma.wait_group.sync.aligned 0;"):
        assert any(ln.startswith(want) for ln in lines), want
    roundtrip(k)


@needs_ptxas
def test_ptxas_accepts_the_coverage_kernels():
    assemble_ok(coverage_sm90a().ptx(), "sm_90a")

    @dsl_kernel(arch="sm_80")
    def cover80(g: ptr(bf16, align=16), out: ptr(f32, align=16)):
        sa = shared(bf16, (16, 16), name="sa")
        bars = mbarriers(1)
        with if_(tid.x == 0):
            mbarrier_init(bars[0], 32)
        bar_sync()
        cp_async(sa[tid.x >> 1, (tid.x & 1) << 3], g + (tid.x << 3))
        cp_async_mbarrier_arrive(bars[0])
        mbarrier_wait(bars[0], 0)  # test_wait before sm_90
        af = ldmatrix(sa[laneid & 15, (laneid >> 4) << 3], x=4)
        bf = ldmatrix(sa[laneid & 7, 0], x=2, trans=True)
        acc = reg.f32[4].fill(0.0)
        mma_sync(acc, af, bf, acc)
        st(out[tid.x << 2], tuple(acc))

    assert any(ln.startswith("mbarrier.test_wait.parity.shared.b64") for ln in body_lines(cover80))
    assemble_ok(cover80.ptx(), "sm_80")
    assemble_ok(cover80.ptx("sm_89"), "sm_89")


# --------------------------------------------------------------------------- semantics on the emulator


def test_sugar_semantics_match_numpy_on_the_emulator():
    @dsl_kernel(arch="sm_80")
    def ints(a: ptr(u32), b: ptr(u32), s: ptr(s32), out: ptr(u32), sout: ptr(s32)):
        i = tid.x
        x, y, z = ld(a[i]), ld(b[i]), ld(s[i])
        y1 = (y & 0xFFFF) + 1  # a non-zero divisor
        st(out[i * 8 + 0], x + y)
        st(out[i * 8 + 1], x - y)
        st(out[i * 8 + 2], x * y)
        st(out[i * 8 + 3], x // y1)
        st(out[i * 8 + 4], x % y1)
        st(out[i * 8 + 5], (x << (y & 31)) ^ (x >> 3))
        st(out[i * 8 + 6], selp(x, y, x < y))
        st(out[i * 8 + 7], (~x) | (x & y))
        st(sout[i * 2 + 0], z >> 5)
        st(sout[i * 2 + 1], selp(z, -z, z >= 0))

    rng = np.random.default_rng(3)
    n = 64
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(-2**31, 2**31, n).astype(np.int32)
    s[0] = -2**31 + 1
    out, sout = np.zeros(n * 8, np.uint32), np.zeros(n * 2, np.int32)
    ints.launch(grid=(1,), block=(n,), args=[a, b, s, out, sout], device="emu")
    x, y = a.astype(np.uint64), b.astype(np.uint64)
    m = np.uint64(0xFFFFFFFF)
    y1 = (y & np.uint64(0xFFFF)) + np.uint64(1)
    ref = np.stack([(x + y) & m, (x - y) & m, (x * y) & m, x // y1, x % y1,
                    ((x << (y & np.uint64(31))) & m) ^ (x >> np.uint64(3)), np.where(x < y, x, y),
                    (~x & m) | (x & y)], 1).astype(np.uint32)
    np.testing.assert_array_equal(out.reshape(n, 8), ref)
    np.testing.assert_array_equal(sout.reshape(n, 2), np.stack([s >> 5, np.abs(s)], 1))
