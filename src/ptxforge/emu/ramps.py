"""Ramps: register arrays known to hold `base + step * i` at index i (exact integers, no wrap-around).

A vector add's addresses are `param + 4 * (ctaid * ntid + tid)`: consecutive across the whole wave. A load
or store whose address array is a known ramp reads or writes one slice of memory instead of gathering
through an index array (about 10x less work on a large wave), and its bounds and alignment follow from the
two ends. Knowledge is kept per array object (`id`, with the array held so the id stays unique) in a small
table on the lane state: registers are never modified in place (every write makes a new array), so a
tagged array keeps its value for as long as the tag exists. Ops that propagate ramps (mul.wide, add with a
uniform operand) call `note`; `find` recognises an untagged array with one exact comparison against the
expected values, after an O(1) test of its two ends that rejects nearly every array that is not a ramp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from typing import Literal

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.operands import Value

    Tag = tuple[int, int]  # (base, step) of a ramp

MAX_TAGS = 16  # arrays a lane state remembers (the oldest forgotten first; each is held until then)
_MIN_LANES = 1024  # below this a gather is cheap: not worth any test
_IOTA: dict = {}  # (n, dtype) -> read-only arange


def _table(st) -> dict:
    t = st.__dict__.get("_ramps")
    if t is None:
        t = st.__dict__["_ramps"] = {}
    return t


def known(st: LaneState, v: Value) -> Tag | Literal[False] | None:
    """(base, step) when `v` is tagged as a ramp, False when known not to be one, None when unknown."""
    t = st.__dict__.get("_ramps")
    if t is None:
        return None
    hit = t.get(id(v))
    if hit is None or hit[0] is not v:
        return None
    return hit[1]


def note(st: LaneState, v: Value, tag: Tag | Literal[False] | None) -> None:
    """Remember that `v` is the ramp `tag` = (base, step), or not a ramp (`tag` False)."""
    if not isinstance(v, np.ndarray) or v.ndim != 1:
        return
    t = _table(st)
    if len(t) >= MAX_TAGS:
        del t[next(iter(t))]
    t[id(v)] = (v, tag)


def iota(n: int, dtype: npt.DTypeLike, step: int = 1) -> np.ndarray:
    """step * [0, 1, ..., n - 1] (read-only, cached for a few shapes)."""
    key = (n, np.dtype(dtype), step)
    a = _IOTA.get(key)
    if a is None:
        if len(_IOTA) >= 8:
            del _IOTA[next(iter(_IOTA))]
        a = np.arange(n, dtype=dtype)
        if step != 1:
            a *= a.dtype.type(step)
        a.flags.writeable = False
        a = _IOTA[key] = a
    return a


def find(st: LaneState, v: Value, step: int | None = None) -> Tag | None:
    """(base, step) when the unsigned integer array `v` is a ramp (with that `step`, if given), else None.

    Uses the tag when there is one; otherwise tests the ends, then every element, and tags the answer."""
    if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind != "u":
        return None
    tag = known(st, v)
    if tag is None:
        tag = _detect(v)
        if tag is not None and tag is not _CHEAP_NO:
            note(st, v, tag)  # a found ramp, or a full comparison not worth repeating
    if not tag or (step is not None and tag[1] != step):
        return None
    return tag


class _No:
    """Not a ramp, found by looking at three elements (so not remembered)."""

    def __bool__(self):
        return False


_CHEAP_NO = _No()


def _detect(v: np.ndarray):
    """(base, step), or False (compared in full: not a ramp), _CHEAP_NO, or None (too small to bother)."""
    n = v.shape[0]
    if n < _MIN_LANES:
        return None
    base, last = int(v[0]), int(v[-1])
    step, rem = divmod(last - base, n - 1)
    if rem or step <= 0 or int(v[1]) - base != step:
        return _CHEAP_NO
    # v - base == step * i for every i, modulo 2**bits; with v[-1] == base + step * (n - 1) exactly and
    # step > 0 nothing wraps, so equality holds as integers
    dt = v.dtype.type
    if step * (n - 1) >= 1 << (8 * v.dtype.itemsize):
        return _CHEAP_NO
    if not np.array_equal(v - dt(base), iota(n, v.dtype, step)):
        return False
    return base, step


def global_index(st: LaneState, x: Value, k: Value, y: Value) -> np.ndarray | None:
    """`x * k + y` (32 bits) when it is the global thread index `%ctaid.x * %ntid.x + %tid.x` of a wave of
    consecutive one-dimensional blocks with no padding lanes (x the wave's own %ctaid.x array, k %ntid.x, y
    its %tid.x): the cached iota plus the wave's first index, tagged as a ramp (so the `mul.wide` that scales
    it to a byte offset need not test it); None for any other operands."""
    m = st.machine
    if m is None:  # gathered lanes (compact.SubLanes): not a wave of whole blocks
        return None
    sr = st.sregs
    tid = sr.get("%tid.x")
    if y is not tid or tid is None:
        return None
    ctaid = sr.get("%ctaid.x")
    if ctaid is None or x is not ctaid:
        return None
    bx, by, bz = m.block
    if np.ndim(k) or int(k) != bx or by != 1 or bz != 1 or bx % 32 or m.grid[1:] != (1, 1) or \
            m.block_order is not None:
        return None
    base, n = m.first_block * bx, st.N
    if n < _MIN_LANES or base + n > 1 << 32:
        return None
    r = iota(n, np.uint32) + np.uint32(base)
    note(st, r, (base, 1))
    return r


def affine(tag: Tag | Literal[False] | None, mul: int, add: int, n: int, bits: int) -> Tag | None:
    """The tag of `ramp * mul + add` (exact integers) over `n` elements when it ascends and every value
    fits in `bits` unsigned bits, else None."""
    if not tag:
        return None
    base, step = tag
    b, s = base * mul + add, step * mul
    if b < 0 or s <= 0 or b + s * (n - 1) >= 1 << bits:
        return None
    return b, s
