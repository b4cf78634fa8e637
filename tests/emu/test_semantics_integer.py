"""Integer and bit instructions against plain Python integer arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.emu.semantics import bitops, integer

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def sval(x, w):
    x &= (1 << w) - 1
    return x - (1 << w) if x >> (w - 1) else x


def edge_and_random(w, n=200, seed=0):
    rng = np.random.default_rng(seed + w)
    m = (1 << w) - 1
    edges = [0, 1, 2, 3, m, m - 1, 1 << (w - 1), (1 << (w - 1)) - 1, (1 << (w - 1)) + 1, 7, 255, 256]
    rand = [int(v) for v in rng.integers(0, 1 << 63, n, dtype=np.int64)]
    rand = [(r * 0x9E3779B97F4A7C15) & m for r in rand] + [r & 0xFF for r in rand[:20]]
    return [e & m for e in edges] + rand


def arr(vals, w):
    return np.array([v & ((1 << w) - 1) for v in vals], dtype=U[w])


def pairs(w, n=200, seed=0):
    vals = edge_and_random(w, n, seed)
    rng = np.random.default_rng(seed + 99)
    xs = vals + [int(v) for v in rng.permutation(vals)[:40]]
    ys = [int(v) for v in rng.permutation(vals)] + vals[:40]
    return xs, ys


TYPES = ["u16", "s16", "u32", "s32", "u64", "s64"]


def val(x, t):
    w = int(t[1:])
    return sval(x, w) if t[0] == "s" else x & ((1 << w) - 1)


@pytest.mark.parametrize("t", TYPES)
def test_add_sub_mul_div_rem(t):
    w = int(t[1:])
    xs, ys = pairs(w)
    a, b = arr(xs, w), arr(ys, w)
    m = (1 << w) - 1
    ops = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y,
    }
    for name, f in ops.items():
        got = getattr(integer, name)(a, b, t)
        assert [int(v) for v in got] == [f(x, y) & m for x, y in zip(xs, ys, strict=False)], name
    got_lo = integer.mul(a, b, t, "lo")
    got_hi = integer.mul(a, b, t, "hi")
    for x, y, lo, hi in zip(xs, ys, got_lo, got_hi, strict=False):
        p = val(x, t) * val(y, t)
        assert int(lo) == p & m and int(hi) == (p >> w) & m
    if w <= 32:
        wide = integer.mul(a, b, t, "wide")
        m2 = (1 << 2 * w) - 1
        assert [int(v) for v in wide] == [(val(x, t) * val(y, t)) & m2 for x, y in zip(xs, ys, strict=True)]
    q, r = integer.div(a, b, t), integer.rem(a, b, t)
    for x, y, qq, rr in zip(xs, ys, q, r, strict=False):
        vx, vy = val(x, t), val(y, t)
        if vy == 0:
            assert int(qq) == m and int(rr) == m  # all ones
            continue
        qt = abs(vx) // abs(vy) * (1 if (vx < 0) == (vy < 0) else -1)
        assert int(qq) == qt & m, (t, vx, vy)
        assert int(rr) == (vx - qt * vy) & m, (t, vx, vy)


def test_signed_division_edges():
    a = np.array([0x80000000, 7, 0xFFFFFFF9, 5], np.uint32)
    b = np.array([0xFFFFFFFF, 0, 0, 0xFFFFFFFE], np.uint32)
    assert list(integer.div(a, b, "s32")) == [0x80000000, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE]
    assert list(integer.rem(a, b, "s32")) == [0, 0xFFFFFFFF, 0xFFFFFFFF, 1]
    a64 = np.array([1 << 63], np.uint64)
    assert integer.div(a64, np.array([2**64 - 1], np.uint64), "s64")[0] == 1 << 63
    assert integer.rem(a64, np.array([2**64 - 1], np.uint64), "s64")[0] == 0


def test_saturating_and_packed():
    xs, ys = pairs(32)
    a, b = arr(xs, 32), arr(ys, 32)
    clamp = lambda v: max(-(1 << 31), min((1 << 31) - 1, v))  # noqa: E731
    assert [int(v) for v in integer.add(a, b, "s32", sat=True)] == \
        [clamp(sval(x, 32) + sval(y, 32)) & 0xFFFFFFFF for x, y in zip(xs, ys, strict=False)]
    assert [int(v) for v in integer.sub(a, b, "s32", sat=True)] == \
        [clamp(sval(x, 32) - sval(y, 32)) & 0xFFFFFFFF for x, y in zip(xs, ys, strict=False)]
    c = np.roll(a, 1)
    got = integer.mad(a, b, c, "s32", "hi", sat=True)
    assert [int(v) for v in got] == [clamp(((sval(x, 32) * sval(y, 32)) >> 32) + sval(z, 32)) & 0xFFFFFFFF
                                     for x, y, z in zip(xs, ys, [int(v) for v in c], strict=False)]
    for t in ("u16x2", "s16x2"):
        for op in ("add", "sub", "min", "max"):
            got = getattr(integer, op)(a, b, t)
            for x, y, g in zip(xs, ys, got, strict=False):
                for h in range(2):
                    hx, hy = (x >> 16 * h) & 0xFFFF, (y >> 16 * h) & 0xFFFF
                    if t[0] == "s":
                        hx, hy = sval(hx, 16), sval(hy, 16)
                    e = {"add": hx + hy, "sub": hx - hy, "min": min(hx, hy), "max": max(hx, hy)}[op]
                    assert (int(g) >> 16 * h) & 0xFFFF == e & 0xFFFF
    r = integer.max(a, b, "s16x2", relu=True)
    for x, y, g in zip(xs, ys, r, strict=False):
        for h in range(2):
            e = max(0, sval(x >> 16 * h, 16), sval(y >> 16 * h, 16))
            assert (int(g) >> 16 * h) & 0xFFFF == e


def test_carry_chains_128bit():
    rng = np.random.default_rng(5)
    xs = [int.from_bytes(rng.bytes(16), "little") for _ in range(100)] + [2**128 - 1, 0, 1]
    ys = [int.from_bytes(rng.bytes(16), "little") for _ in range(100)] + [1, 2**128 - 1, 2**128 - 1]
    limbs = lambda v: [arr([(x >> 32 * i) & 0xFFFFFFFF for x in v], 32) for i in range(4)]  # noqa: E731
    A, B = limbs(xs), limbs(ys)
    d0, cf = integer.add_cc(A[0], B[0], "u32")
    out = [d0]
    for i in (1, 2, 3):
        d, cf = integer.add_cc(A[i], B[i], "u32", carry_in=cf)
        out.append(d)
    got = [sum(int(out[i][k]) << 32 * i for i in range(4)) for k in range(len(xs))]
    assert got == [(x + y) % 2**128 for x, y in zip(xs, ys, strict=False)]
    d, c = integer.add(A[0], B[0], "u32", cc=True)
    d2, _ = integer.add(A[1], B[1], "u32", carry_in=c)
    assert np.array_equal(d2, out[1])
    d0, bf = integer.sub_cc(A[0], B[0], "u32")
    out = [d0]
    for i in (1, 2, 3):
        d, bf = integer.sub_cc(A[i], B[i], "u32", carry_in=bf)
        out.append(d)
    got = [sum(int(out[i][k]) << 32 * i for i in range(4)) for k in range(len(xs))]
    assert got == [(x - y) % 2**128 for x, y in zip(xs, ys, strict=False)]
    assert list(bf) == [x >= y for x, y in zip(xs, ys, strict=False)]  # CC.CF = no borrow
    # 64x64 -> 128 with mad.lo.cc / madc.hi: (a1:a0) * b0
    a0, a1, b0 = A[0], A[1], B[0]
    lo = integer.mul(a0, b0, "u32", "lo")
    t1, c = integer.mad(a0, b0, integer.mul(a1, b0, "u32", "lo"), "u32", "hi", cc=True)
    t2 = integer.mad(a1, b0, np.zeros_like(a0), "u32", "hi", carry_in=c)[0]
    for k in range(len(xs)):
        e = ((xs[k] & (2**64 - 1)) * (ys[k] & 0xFFFFFFFF))
        g = int(lo[k]) | int(t1[k]) << 32 | int(t2[k]) << 64
        assert g == e


def test_mul24_mad24_sad_dp():
    xs, ys = pairs(32, 100, seed=3)
    a, b = arr(xs, 32), arr(ys, 32)
    for t in ("u32", "s32"):
        lo, hi = integer.mul24(a, b, t, "lo"), integer.mul24(a, b, t, "hi")
        for x, y, gl, gh in zip(xs, ys, lo, hi, strict=False):
            x24, y24 = x & 0xFFFFFF, y & 0xFFFFFF
            if t == "s32":
                x24, y24 = sval(x24, 24), sval(y24, 24)
            p = x24 * y24
            assert int(gl) == p & 0xFFFFFFFF and int(gh) == (p >> 16) & 0xFFFFFFFF
        s = integer.sad(a, b, np.roll(a, 1), t)
        for x, y, z, g in zip(xs, ys, [int(v) for v in np.roll(a, 1)], s, strict=False):
            assert int(g) == (z + abs(val(x, t) - val(y, t))) & 0xFFFFFFFF
    for at in ("u32", "s32"):
        for bt in ("u32", "s32"):
            d4 = integer.dp4a(a, b, np.roll(b, 1), at, bt)
            for x, y, z, g in zip(xs, ys, [int(v) for v in np.roll(b, 1)], d4, strict=False):
                e = z
                for i in range(4):
                    xa, yb = (x >> 8 * i) & 0xFF, (y >> 8 * i) & 0xFF
                    e += (sval(xa, 8) if at[0] == "s" else xa) * (sval(yb, 8) if bt[0] == "s" else yb)
                assert int(g) == e & 0xFFFFFFFF
            for mode, k in (("lo", 0), ("hi", 2)):
                d2 = integer.dp2a(a, b, np.roll(b, 1), at, bt, mode)
                for x, y, z, g in zip(xs, ys, [int(v) for v in np.roll(b, 1)], d2, strict=False):
                    e = z
                    for i in range(2):
                        xa, yb = (x >> 16 * i) & 0xFFFF, (y >> 8 * (k + i)) & 0xFF
                        e += (sval(xa, 16) if at[0] == "s" else xa) * (sval(yb, 8) if bt[0] == "s" else yb)
                    assert int(g) == e & 0xFFFFFFFF


def test_abs_neg_min_max():
    for t in TYPES:
        w = int(t[1:])
        xs, ys = pairs(w, 60)
        a, b = arr(xs, w), arr(ys, w)
        m = (1 << w) - 1
        pairs_ = list(zip(xs, ys, strict=True))
        assert [int(v) for v in integer.min(a, b, t)] == [min(val(x, t), val(y, t)) & m for x, y in pairs_]
        assert [int(v) for v in integer.max(a, b, t)] == [max(val(x, t), val(y, t)) & m for x, y in pairs_]
        if t[0] == "s":
            assert [int(v) for v in integer.abs(a, t)] == [abs(val(x, t)) & m for x in xs]
            assert [int(v) for v in integer.neg(a, t)] == [(-val(x, t)) & m for x in xs]


# ----------------------------------------------------------------------------- bit operations


def ref_bfe(a, pos, ln, t):
    w = int(t[1:])
    msb = w - 1
    pos, ln = pos & 0xFF, ln & 0xFF
    sbit = 0 if (t[0] == "u" or ln == 0) else (a >> min(pos + ln - 1, msb)) & 1
    d = 0
    for i in range(w):
        bit = (a >> (pos + i)) & 1 if (i < ln and pos + i <= msb) else sbit
        d |= bit << i
    return d


def ref_bfi(a, b, pos, ln, w):
    pos, ln = pos & 0xFF, ln & 0xFF
    f = b
    i = 0
    while i < ln and pos + i <= w - 1:
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
        i += 1
    return f


def test_bfe_bfi_exhaustive_positions():
    rng = np.random.default_rng(11)
    for t in ("u32", "s32", "u64", "s64"):
        w = int(t[1:])
        poss = list(range(0, w + 3)) + [255, 256 + 3]
        lens = [0, 1, 5, w - 1, w, w + 7, 255]
        grid = [(p, n) for p in poss for n in lens]
        av = [int(v) & ((1 << w) - 1) for v in rng.integers(0, 1 << 62, len(grid))]
        av = [v | (1 << (w - 1)) if i % 2 else v for i, v in enumerate(av)]
        a = arr(av, w)
        p = arr([g[0] for g in grid], 32)
        n = arr([g[1] for g in grid], 32)
        got = bitops.bfe(a, p, n, t)
        assert [int(v) for v in got] == [ref_bfe(x, g[0], g[1], t) for x, g in zip(av, grid, strict=False)]
        bv = [int(v) & ((1 << w) - 1) for v in rng.integers(0, 1 << 62, len(grid))]
        got = bitops.bfi(a, arr(bv, w), p, n, f"b{w}")
        assert [int(v) for v in got] == [ref_bfi(x, y, g[0], g[1], w) for x, y, g in zip(av, bv, grid, strict=False)]


SHIFT_KERNEL = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pn, .param .u64 pa64, .param .u64 out)
{
  .reg .b32 %a, %b, %n, %r<16>;
  .reg .b64 %rd<8>, %x, %y;
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd0, %r0, 4;
  ld.param.u64 %rd1, [pa];
  add.s64 %rd1, %rd1, %rd0;
  ld.global.u32 %a, [%rd1];
  ld.param.u64 %rd1, [pb];
  add.s64 %rd1, %rd1, %rd0;
  ld.global.u32 %b, [%rd1];
  ld.param.u64 %rd1, [pn];
  add.s64 %rd1, %rd1, %rd0;
  ld.global.u32 %n, [%rd1];
  mul.wide.u32 %rd2, %r0, 8;
  ld.param.u64 %rd1, [pa64];
  add.s64 %rd1, %rd1, %rd2;
  ld.global.u64 %x, [%rd1];
  shl.b32 %r1, %a, N;
  shr.u32 %r2, %a, N;
  shr.s32 %r3, %a, N;
  shf.l.clamp.b32 %r4, %a, %b, N;
  shf.l.wrap.b32 %r5, %a, %b, N;
  shf.r.clamp.b32 %r6, %a, %b, N;
  shf.r.wrap.b32 %r7, %a, %b, N;
  shr.s64 %y, %x, N;
  mov.b64 {%r8, %r9}, %y;
  mul.wide.u32 %rd2, %r0, 48;
  ld.param.u64 %rd1, [out];
  add.s64 %rd1, %rd1, %rd2;
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};
  st.global.u32 [%rd1+32], %r9;
  ret;
}
"""


@pytest.mark.parametrize("form", ["register", "immediate"])
def test_shifts_and_funnel_shifts_on_the_emulator(form):
    """shl/shr/shf have one implementation, the emulator's (ops_alu): run them, by register and by immediate
    amounts (each compiled on its own path), against Python integers."""
    import ptxforge as pf

    xs, _ = pairs(32, 60)
    a = arr(xs, 32)
    b = np.roll(a, 1)
    a64 = np.array([x | (x << 32) for x in xs], np.uint64)
    for n in (0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 2**32 - 1):
        text = SHIFT_KERNEL.replace(
            "N;", "%n;" if form == "register" else f"{n};")
        out = np.zeros((len(xs), 12), np.uint32)
        pf.parse(text, "shifts.ptx").kernel("k").launch(
            grid=(1,), block=(len(xs),), args=[a, b, np.full(len(xs), n, np.uint32), a64, out], device="emu")
        for i, x in enumerate(xs):
            y = int(b[i])
            v64 = (y << 32) | x
            kc, kw = min(n, 32), n & 31
            s64 = (sval(int(a64[i]), 64) >> min(n, 64)) & (2**64 - 1)
            want = [(x << n) & 0xFFFFFFFF if n < 32 else 0, x >> n if n < 32 else 0,
                    (sval(x, 32) >> min(n, 32)) & 0xFFFFFFFF,
                    ((v64 << kc) >> 32) & 0xFFFFFFFF, ((v64 << kw) >> 32) & 0xFFFFFFFF,
                    (v64 >> kc) & 0xFFFFFFFF, (v64 >> kw) & 0xFFFFFFFF, s64 & 0xFFFFFFFF, s64 >> 32]
            assert [int(v) for v in out[i, :9]] == want, (form, n, hex(x), hex(y))


def test_brev_popc_clz_bfind():
    xs, _ = pairs(32, 60)
    a = arr(xs, 32)
    a64 = arr([x | (x << 32) for x in xs], 64)
    assert [int(v) for v in bitops.brev(a, "b32")] == [int(f"{x:032b}"[::-1], 2) for x in xs]
    assert [int(v) for v in bitops.brev(a64, "b64")] == [int(f"{int(x):064b}"[::-1], 2) for x in a64]
    assert [int(v) for v in bitops.popc(a64, "b64")] == [bin(int(x)).count("1") for x in a64]
    assert [int(v) for v in bitops.clz(a, "b32")] == [32 - x.bit_length() for x in xs]
    assert [int(v) for v in bitops.clz(a64, "b64")] == [64 - int(x).bit_length() for x in a64]
    for t in ("u32", "s32"):
        for sa in (False, True):
            got = bitops.bfind(a, t, shiftamt=sa)
            for x, g in zip(xs, got, strict=False):
                v = (~x & 0xFFFFFFFF) if (t == "s32" and x >> 31) else x
                e = v.bit_length() - 1 if v else 0xFFFFFFFF
                if sa and v:
                    e = 31 - e
                assert int(g) == e


def ref_prmt(a, b, c, mode):
    src = (b << 32) | a
    byte = lambda i: (src >> (8 * i)) & 0xFF  # noqa: E731
    tables = {"f4e": [[3, 2, 1, 0], [4, 3, 2, 1], [5, 4, 3, 2], [6, 5, 4, 3]],
              "b4e": [[5, 6, 7, 0], [6, 7, 0, 1], [7, 0, 1, 2], [0, 1, 2, 3]],
              "rc8": [[0] * 4, [1] * 4, [2] * 4, [3] * 4],
              "ecl": [[3, 2, 1, 0], [3, 2, 1, 1], [3, 2, 2, 2], [3, 3, 3, 3]],
              "ecr": [[0, 0, 0, 0], [1, 1, 1, 0], [2, 2, 1, 0], [3, 2, 1, 0]],
              "rc16": [[1, 0, 1, 0], [3, 2, 3, 2], [1, 0, 1, 0], [3, 2, 3, 2]]}  # d.b3 .. d.b0 (manual)
    d = 0
    for i in range(4):
        if mode is None:
            sel = (c >> (4 * i)) & 0xF
            v = byte(sel & 7)
            if sel & 8:
                v = 0xFF if v & 0x80 else 0
        else:
            v = byte(tables[mode][c & 3][3 - i])
        d |= v << (8 * i)
    return d


def test_prmt_all_modes():
    xs, ys = pairs(32, 80, seed=9)
    a, b = arr(xs, 32), arr(ys, 32)
    cs = [int(v) for v in np.random.default_rng(2).integers(0, 1 << 16, len(xs))]
    for mode in (None, "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"):
        got = bitops.prmt(a, b, arr(cs, 32), mode)
        assert [int(v) for v in got] == [ref_prmt(x, y, c, mode) for x, y, c in zip(xs, ys, cs, strict=False)], mode


def test_lop3_every_lut():
    xs, ys = pairs(32, 30)
    a, b, c = arr(xs, 32), arr(ys, 32), arr(xs[::-1], 32)
    for lut in range(256):
        got = bitops.lop3(a, b, c, lut)
        for x, y, z, g in zip(xs, ys, xs[::-1], got, strict=False):
            e = 0
            for bit in range(32):
                idx = ((x >> bit) & 1) << 2 | ((y >> bit) & 1) << 1 | ((z >> bit) & 1)
                e |= ((lut >> idx) & 1) << bit
            assert int(g) == e
    d, p = bitops.lop3(a, b, c, 0x80, bool_op="or", q=np.zeros(a.shape, bool))
    assert list(p) == [int(v) != 0 for v in d]
    # the manual's examples: (a & b & c) = 0x80, (a | b | c) = 0xFE, ((a & b | c) ^ a) = 0x1A
    for lut, f in ((0x80, lambda x, y, z: x & y & z), (0xFE, lambda x, y, z: x | y | z),
                   (0x1A, lambda x, y, z: ((x & y) | z) ^ x)):
        trip = zip(xs, ys, xs[::-1], strict=True)
        assert [int(v) for v in bitops.lop3(a, b, c, lut)] == [f(x, y, z) for x, y, z in trip]


def ref_fns(mask, base, offset):
    if offset == 0:
        return base if (mask >> base) & 1 else 0xFFFFFFFF
    pos, count, inc = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if (mask >> pos) & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


def test_fns_bmsk_szext():
    rng = np.random.default_rng(4)
    masks = [int(v) for v in rng.integers(0, 1 << 32, 400, dtype=np.int64)] + [0, 0xFFFFFFFF, 1, 1 << 31]
    bases = [int(v) for v in rng.integers(0, 32, len(masks))]
    offs = [int(v) for v in rng.integers(-34, 35, len(masks))]
    got = bitops.fns(arr(masks, 32), arr(bases, 32), arr(offs, 32))
    assert [int(v) for v in got] == [ref_fns(m, b, o) for m, b, o in zip(masks, bases, offs, strict=False)]
    av = list(range(0, 40)) * 2
    bv = [int(v) for v in rng.integers(0, 40, len(av))]
    for mode in ("clamp", "wrap"):
        got = bitops.bmsk(arr(av, 32), arr(bv, 32), mode)
        for a_, b_, g in zip(av, bv, got, strict=False):
            if mode == "clamp":
                pos, width = a_, min(b_, 32)
                e = 0 if pos >= 32 else (((1 << width) - 1) << pos) & 0xFFFFFFFF
            else:
                pos, width = a_ & 31, b_ & 31
                e = (((1 << width) - 1) << pos) & 0xFFFFFFFF
            assert int(g) == e, (mode, a_, b_)
        for t in ("u32", "s32"):
            xs = [int(v) for v in rng.integers(0, 1 << 32, len(bv), dtype=np.int64)]
            got = bitops.szext(arr(xs, 32), arr(bv, 32), t, mode)
            for x, n, g in zip(xs, bv, got, strict=False):
                n_eff = (32 if n >= 32 else n) if mode == "clamp" else n & 31
                low = x & ((1 << n_eff) - 1)
                if t == "s32" and n_eff and n_eff < 32 and (low >> (n_eff - 1)) & 1:
                    low -= 1 << n_eff
                assert int(g) == low & 0xFFFFFFFF, (t, mode, hex(x), n)
