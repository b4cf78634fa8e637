"""The global shadow: per allocation, made on first touch, per access-size granule, still byte-accurate."""

from __future__ import annotations

import numpy as np

HEAD = """.version 8.0
.target sm_80
.address_size 64
"""

# thread 0 reads 16 bytes (granules of 16); then every thread stores its own byte (granules split to 1) and
# thread RACER also stores byte 2; after a barrier thread 0 reads word 0 and copies it to word 16
MIXED = HEAD + """
.visible .entry mixed(.param .u64 p, .param .u32 racer)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r10, [racer];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra BYTES;
    ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd1];
BYTES:
    bar.sync 0;
    cvt.u64.u32 %rd2, %r1;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u8 [%rd3], %r1;
    setp.ne.u32 %p2, %r1, %r10;
    @%p2 bra AFTER;
    st.global.u8 [%rd1+2], %r1;
AFTER:
    bar.sync 0;
    @%p1 bra DONE;
    ld.global.u32 %r6, [%rd1];
    st.global.u32 [%rd1+64], %r6;
DONE:
    ret;
}
"""

# thread 0 stores 16 bytes; every thread then reads its own byte (SYNC: with a barrier between)
WIDE_THEN_BYTES = HEAD + """
.visible .entry wide_then_bytes(.param .u64 p, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b16 %h<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [p];
    ld.param.u64 %rd4, [out];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra READ;
    st.global.v4.u32 [%rd1], {%r1, %r1, %r1, %r1};
READ:
    SYNC
    cvt.u64.u32 %rd2, %r1;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.u8 %h1, [%rd3];
    add.u64 %rd5, %rd4, %rd2;
    st.global.u8 [%rd5], %h1;
    ret;
}
"""

# out[i] = a[i] + b[i] for i < n; `unused` is never touched
VADD = HEAD + """
.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 out, .param .u64 unused, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [out];
    ld.param.u32 %r5, [n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    setp.ge.s32 %p1, %r4, %r5;
    @%p1 bra DONE;
    mul.wide.s32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}
"""


def _launch(text, name, grid, block, args, sanitizer=True):
    import ptxforge as pf
    from ptxforge.emu.sanitizer import SanitizerError

    k = pf.parse(text, filename=f"{name}.ptx").kernel(name)
    try:
        k.launch(grid=grid, block=block, args=args, device="emu", options={"sanitize": sanitizer})
    except SanitizerError as e:
        return e
    return None


def test_bytes_of_one_word_from_different_threads_do_not_race_after_a_wide_read():
    p = np.zeros(20, np.uint32)
    assert _launch(MIXED, "mixed", (1,), (64,), [p, np.uint32(1000)]) is None
    assert p.view(np.uint8)[:64].tolist() == list(range(64))
    assert p[16] == 0x03020100
    assert _launch(MIXED, "mixed", (1,), (64,), [np.zeros(20, np.uint32), np.uint32(2)]) is None  # its own byte


def test_a_race_on_one_byte_of_a_split_granule_names_that_byte_and_both_threads():
    err = _launch(MIXED, "mixed", (1,), (64,), [np.zeros(20, np.uint32), np.uint32(33)])
    assert err is not None
    assert len(err.reports) == 1, str(err)
    r = err.reports[0]
    assert (r.kind, r.space, r.access, r.size, r.offset, r.count) == ("race", "global", "write", 1, 2, 1), str(err)
    assert r.thread == (33, 0, 0) and r.other["thread"] == (2, 0, 0) and r.other["race"] == "write-write"
    assert r.instruction.startswith("st.global.u8 [%rd1+2]")


def test_bytes_read_from_a_wide_store_race_byte_by_byte_without_a_barrier():
    out = np.zeros(64, np.uint8)
    err = _launch(WIDE_THEN_BYTES.replace("SYNC", ""), "wide_then_bytes", (1,), (64,),
                  [np.zeros(16, np.uint32), out])
    assert err is not None
    races = [r for r in err.reports if r.kind == "race"]
    assert len(races) == 1, str(err)
    r = races[0]
    # thread 0 reads its own byte; threads 1..15 read bytes thread 0 wrote; 16..63 read bytes nobody wrote
    assert (r.access, r.size, r.offset, r.count, r.thread) == ("read", 1, 1, 15, (1, 0, 0)), str(err)
    assert r.other["race"] == "write-read" and r.other["thread"] == (0, 0, 0)
    assert _launch(WIDE_THEN_BYTES.replace("SYNC", "bar.sync 0;"), "wide_then_bytes", (1,), (64,),
                   [np.zeros(16, np.uint32), np.zeros(64, np.uint8)]) is None


def test_shadow_state_is_per_touched_allocation_and_word_and_dropped_when_the_launch_ends():
    from ptxforge.emu.sanitizer import Sanitizer

    n = 1 << 16
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    out = np.zeros(n, np.float32)
    unused = np.zeros(1 << 20, np.uint8)
    san = Sanitizer()
    held = []
    release = san.release

    def spy():
        gs = san.global_sh
        if gs is not None:
            held.append((gs.bytes, sorted(sh.granule for _, sh in gs.by_offset.values())))
        release()
    san.release = spy
    for _ in range(2):
        assert _launch(VADD, "vadd", (n // 256,), (256,), [a, b, out, unused, np.int32(n)], sanitizer=san) is None
        np.testing.assert_array_equal(out, a + 1)
        assert san.global_sh is None  # released by finish(): nothing waits for the garbage collector
    nbytes, granules = held[-1]
    assert granules == [4, 4, 4]  # a, b and out, one entry per word; `unused` has none
    # a and b: flags and the reader columns; out: flags and the writer columns (17 bytes per word)
    assert nbytes == 3 * (n * 17), nbytes


def test_split_groups_lanes_by_allocation_and_finds_consecutive_granules():
    from ptxforge.emu import memory as M
    from ptxforge.emu.sanitizer.global_shadow import GlobalShadow

    dev = M.DeviceMemory()
    x = dev.alloc(1024, "x")
    y = dev.alloc(1024, "y")
    gs = GlobalShadow(dev, races=True)
    idx = x.offset + 8 * np.arange(16, dtype=np.int64)
    (sh, pos, S, per), = gs.split(idx, 8)
    assert pos is None and S == slice(0, 16) and per == 1 and sh.granule == 8 and sh.total == 128
    (sh2, _, S2, per2), = gs.split(idx[::-1].copy(), 8)  # same granules, not in order: an index array
    assert sh2 is sh and S2.tolist() == list(range(15, -1, -1)) and per2 == 1
    (sh3, _, S3, per3), = gs.split(np.asarray([x.offset + 3], np.int64), 1)  # a byte: granules split
    assert sh3 is sh and sh.granule == 1 and sh.total == 1024 and S3 == slice(3, 4) and per3 == 1
    mixed = np.asarray([y.offset, x.offset + 16, y.offset + 32], np.int64)
    parts = gs.split(mixed, 16)
    assert [(p[1].tolist(), p[3]) for p in parts] == [([1], 16), ([0, 2], 1)]
    assert parts[0][0] is sh and parts[1][0].granule == 16 and parts[1][2].tolist() == [0, 2]
    assert gs.by_offset[y.offset][1].init_all  # allocations held at the launch's start are initialized
    z = dev.alloc(64, "z (device malloc)")
    (shz, _, _, _), = gs.split(np.asarray([z.offset], np.int64), 4)
    assert not shz.init_all


def test_a_small_launch_on_large_buffers_keeps_state_for_what_it_touches():
    from ptxforge.emu.sanitizer import Sanitizer

    big = 1 << 20
    a, b = np.arange(big, dtype=np.float32), np.ones(big, np.float32)
    out = np.zeros(big, np.float32)
    san = Sanitizer()
    held = []
    release = san.release

    def spy():
        held.append(san.global_sh.bytes)
        release()
    san.release = spy
    n = 2048  # the first 2048 elements of each buffer, in 8 blocks
    assert _launch(VADD, "vadd", (n // 256,), (256,), [a, b, out, np.zeros(64, np.uint8), np.int32(n)],
                   sanitizer=san) is None
    np.testing.assert_array_equal(out[:n], a[:n] + 1)
    assert held[0] == 3 * n * 17, held  # not 3 * big * 17


def test_the_window_of_an_allocation_grows_to_cover_later_accesses():
    from ptxforge.emu import memory as M
    from ptxforge.emu.sanitizer.global_shadow import GlobalShadow

    dev = M.DeviceMemory()
    x = dev.alloc(1 << 20, "x")
    gs = GlobalShadow(dev, races=True)
    who = np.arange(32, dtype=np.int32)
    ep = np.zeros(32, np.int64)
    (sh, _, S, _), = gs.split(x.offset + (1 << 16) + 4 * np.arange(32, dtype=np.int64), 4)
    sh.write(S, who, ep, 7, False, distinct=True)
    assert sh.size == sh.MIN_WINDOW and sh.base <= (1 << 14) < sh.base + sh.size
    (sh, _, S, _), = gs.split(x.offset + 4 * np.arange(32, dtype=np.int64), 4)  # the start: the window grows
    _, _, race, *_ = sh.read(S, who[::-1].copy(), ep, 9, False, True)
    assert race is None and sh.base == 0 and sh.size < sh.total
    (sh, _, S, _), = gs.split(x.offset + (1 << 16) + 4 * np.arange(32, dtype=np.int64), 4)
    _, _, race, pw, ppc = sh.read(S, who[::-1].copy(), ep, 9, False, True)  # the first writes were kept
    assert race.sum() == 32 and pw.tolist() == list(range(32)) and set(ppc.tolist()) == {7}


RAMP_RACE = """.version 8.5
.target sm_90
.address_size 64
.visible .entry ramprace(.param .u64 p)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r4;
    st.global.u32 [%rd4+128], %r4;
    ret;
}
"""


def test_races_between_two_stores_at_consecutive_addresses_are_found(monkeypatch):
    """Both stores write one run of consecutive words (their addresses a ramps.Ramp, checked from its ends in
    memory.py and the shadow): the second store's words were the first store's of the warp 32 threads on,
    with no barrier between: a write-write race, found and named as on the gathering path."""
    from ptxforge.emu import ramps

    made = []
    orig = ramps.Ramp.__init__
    monkeypatch.setattr(ramps.Ramp, "__init__",
                        lambda self, tag, n, *dt: (made.append(tag), orig(self, tag, n, *dt))[1])
    p = np.zeros(64 * 256 + 32, np.uint32)
    err = _launch(RAMP_RACE, "ramprace", (64,), (256,), [p])
    assert made, "no Ramp was made: the test would prove nothing"
    assert err is not None
    races = [r for r in err.reports if r.kind == "race"]
    assert races and races[0].other["race"] == "write-write", str(err)
    r = races[0]
    assert r.instruction.startswith("st.global.u32 [%rd4+128]")
    assert r.thread[0] + 32 == r.other["thread"][0] or r.thread[0] == r.other["thread"][0] + 32 - 256, str(err)
