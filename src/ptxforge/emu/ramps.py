"""Ramps: register arrays known to hold `base + step * i` at index i (exact integers, no wrap-around).

None of this runs in reference mode (`st.reference`): no array is tagged or found to be a ramp, so no `Ramp`
is ever made and every access gathers through its index array.

A vector add's addresses are `param + 4 * (ctaid * ntid + tid)`: consecutive across the whole wave. A load
or store whose address array is a known ramp reads or writes one slice of memory instead of gathering
through an index array (about 10x less work on a large wave), and its bounds and alignment follow from the
two ends. Knowledge is kept per array object (`id`, with the array held so the id stays unique) in a small
table on the lane state: registers are never modified in place (every write makes a new array), so a
tagged array keeps its value for as long as the tag exists. Ops that propagate ramps (mul.wide, add with a
uniform operand) call `note`; `find` recognises an untagged array with one exact comparison against the
expected values, after an O(1) test of its two ends that rejects nearly every array that is not a ramp.

Three steps further:
- `global_index`: `%ctaid.x * %ntid.x + %tid.x` over consecutive 1-D blocks is made from the cached iota,
  tagged, without a test.
- `Ramp`: a 64-bit register that only adds and ld/st addresses use (`ramp_only`, per layout) holds the rule
  itself, not an array: a vector add's address arithmetic makes no array at all, and anything unexpected
  that reads such a register gets the array it stands for (numpy's protocols), made once.
- `note_run` / `run_of`: code without a lane state (memory.py, the sanitizer's shadow) learns that an
  address or byte-index array is a run, so a checked access at a ramp's addresses is one slice too.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from ptxforge.ptx import ir

if TYPE_CHECKING:
    from typing import Literal

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.operands import Value
    from ptxforge.emu.program import Layout

    Tag = tuple[int, int]  # (base, step) of a ramp

MAX_TAGS = 16  # arrays a lane state remembers (the oldest forgotten first; each is held until then)
_MIN_LANES = 1024  # below this a gather is cheap: not worth any test
_IOTA: dict = {}  # (n, dtype) -> read-only arange


def _table(st) -> dict:
    t = st.__dict__.get("_ramps")
    if t is None:
        t = st.__dict__["_ramps"] = {}
    return t


class Ramp(NDArrayOperatorsMixin):
    """A 64-bit register's value over a wave's `n` lanes known to be `base + step * i`, kept as that rule.

    A whole-wave ld/st reads one slice from it and an add of a uniform value makes another, so a vector
    add's addresses are never made; anything else that reads it (through `value`, numpy's protocols or an
    attribute) gets the array, made once and read-only. Only registers that every instruction naming them
    uses that way (`ramp_only`) are given one."""

    __slots__ = ("tag", "n", "dtype", "_a")
    ndim = 1

    def __init__(self, tag: Tag, n: int, dtype: npt.DTypeLike = np.uint64):
        self.tag, self.n, self.dtype = tag, n, np.dtype(dtype)
        self._a: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    @property
    def size(self) -> int:
        return self.n

    def array(self) -> np.ndarray:
        a = self._a
        if a is None:
            a = self._a = iota(self.n, self.dtype, self.tag[1]) + self.dtype.type(self.tag[0])
            a.flags.writeable = False  # registers are never changed in place
            note_run(a, self.tag)
        return a

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.array()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(x.array() if type(x) is Ramp else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getitem__(self, key):
        if isinstance(key, int | np.integer):  # one element: no array needed
            k = int(key) + (self.n if key < 0 else 0)
            if not 0 <= k < self.n:
                raise IndexError(f"index {int(key)} is out of bounds for {self.n} lanes")
            return self.dtype.type(self.tag[0] + self.tag[1] * k)
        return self.array()[key]

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name: str):
        return getattr(self.array(), name)


# id -> (weak reference to the array, (first, step)): read-only arrays known to be ramps (weak: a finished
# launch's arrays are not kept; a dead one's id, reused, finds a dead reference)
_RUNS: dict[int, tuple[weakref.ref, Tag]] = {}
MAX_RUNS = 8


def note_run(a: np.ndarray, tag: Tag) -> None:
    """Remember that the read-only array `a` is the ramp `tag`, for code that has no lane state (memory.py and
    the sanitizer's shadow: an access at a ramp's addresses is one run of bytes)."""
    if len(_RUNS) >= MAX_RUNS:
        del _RUNS[next(iter(_RUNS))]
    _RUNS[id(a)] = (weakref.ref(a), tag)


def run_of(a: Any) -> Tag | None:
    """The (first, step) of a `Ramp` or of an array `note_run` was told of, else None."""
    if type(a) is Ramp:
        return a.tag
    hit = _RUNS.get(id(a))
    return hit[1] if hit is not None and hit[0]() is a else None


def shifted(v: Value, c: np.generic) -> Value:
    """`v + c` for an address operand `[reg+c]` read as it is (`keep_ramps`): a `Ramp` stays one."""
    if type(v) is Ramp:
        tag = affine(v.tag, 1, int(c), v.n, 64)
        return Ramp(tag, v.n) if tag is not None else v.array() + c
    return v + c


def value(st: LaneState, v: Value) -> Value:
    """`v` as an array when it is a `Ramp` (tagged, so ramp-aware ops still see a ramp), else `v`."""
    if type(v) is not Ramp:
        return v
    a = v.array()
    note(st, a, v.tag)
    return a


def ramp_only(layout: Layout) -> frozenset[int]:
    """The 64-bit register slots that may hold a `Ramp`: every instruction naming one is a 64-bit add, a
    mul.wide writing it, or a ld/st using it as the base of its address and nowhere else (kept with the
    layout). None in a module with calls (calls save and pass registers wholesale)."""
    hit = layout.__dict__.get("_ramp_only")
    if hit is not None:
        return hit
    ok: set[int] = set()
    bad: set[int] = set()
    if not layout.has_calls:
        for placed in layout.placed:
            ins = placed.ins
            op = ins.opcode
            add = op == "add" and ins.types[-1:] in ((".s64",), (".u64",)) and not ins.has("cc") and \
                not ins.has("sat")
            for i, o in enumerate(ins.operands):
                slots = layout.operand_slots(placed, o)
                if slots is None:  # registers this cannot tell: no register of the module holds a Ramp
                    layout.__dict__["_ramp_only"] = frozenset()
                    return frozenset()
                base = o.base if isinstance(o, ir.Address) and isinstance(o.base, ir.Register) else None
                if add or (i == 0 and op == "mul" and ins.has("wide")):
                    ok.update(slots)
                elif base is not None and op in ("ld", "st"):
                    ok.update(slots)
                else:
                    bad.update(slots)
    wide = {s for s in ok - bad if ir.type_bits(layout.reg_types[s]) == 64}
    hit = layout.__dict__["_ramp_only"] = frozenset(wide)
    return hit


def lazy_add(st: LaneState, x: Value, y: Value) -> Ramp | None:
    """`x + y` (64 bits) as a `Ramp` when one side is a ramp over the wave and the other uniform, else None."""
    if st.machine is None or getattr(st, "reference", False):
        return None
    if np.ndim(x) == 0:
        x, y = y, x
    if np.ndim(y) != 0 or np.ndim(x) != 1 or x.shape[0] != st.N:
        return None
    tag = affine(x.tag if type(x) is Ramp else known(st, x), 1, int(y), st.N, 64)
    return Ramp(tag, st.N) if tag else None


def known(st: LaneState, v: Value) -> Tag | Literal[False] | None:
    """(base, step) when `v` is tagged as a ramp, False when known not to be one, None when unknown."""
    if type(v) is Ramp:
        return v.tag
    t = st.__dict__.get("_ramps")
    if t is None:
        return None
    hit = t.get(id(v))
    if hit is None or hit[0] is not v:
        return None
    return hit[1]


def note(st: LaneState, v: Value, tag: Tag | Literal[False] | None) -> None:
    """Remember that `v` is the ramp `tag` = (base, step), or not a ramp (`tag` False)."""
    if not isinstance(v, np.ndarray) or v.ndim != 1 or getattr(st, "reference", False):
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
    if type(v) is Ramp:
        return v.tag if step is None or v.tag[1] == step else None
    if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind != "u" or getattr(st, "reference", False):
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
    if m is None or getattr(st, "reference", False):  # gathered lanes (compact.SubLanes): no whole wave
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
