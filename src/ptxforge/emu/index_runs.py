"""Element-index arrays made of runs, and gathers through them that move runs instead of elements.

A tiled kernel's shared loads read, in each group of G consecutive lanes, either one element for the whole
group (`As[ty][k]`: the 16 threads of a row read the same value) or G consecutive elements starting at a
multiple of G (`Bs[k][tx]`). Such an index array is found once (its register array is kept across the
loop's turns, see ops_memory.shared_index_reader), and the gather then takes one element per group and
repeats it, or copies whole rows of a 2-D view of memory: same values, a fraction of `np.take`'s work.
A store through rows that no two groups share writes whole rows the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

GROUPS = (32, 16, 8)  # group sizes tried, largest first
MIN_LANES = 1024  # below this a plain take is cheap: not worth the test


@dataclass(frozen=True)
class Runs:
    """e = the index array these runs describe: lanes [g*G, (g+1)*G) read `rows[g]` (broadcast) or the
    elements [rows[g]*G, rows[g]*G + G) (consecutive)."""

    group: int
    broadcast: bool
    rows: npt.NDArray[np.integer[Any]]
    distinct: bool = False  # rows strictly ascending: every element e names is named by one lane only

    def take(self, view: np.ndarray) -> np.ndarray:
        """A new array equal to `np.take(view, e)`, for a 1-D `view` holding every element e names."""
        g = self.group
        if self.broadcast:
            return np.repeat(np.take(view, self.rows), g)
        m = view.shape[0] // g  # every row e names ends inside view, so below m * g
        return np.take(view[: m * g].reshape(m, g), self.rows, axis=0).reshape(-1)

    def put(self, view: np.ndarray, values: Any) -> None:
        """`view[e] = values` for distinct rows (so no two lanes store to one element); `view` as in take."""
        g = self.group
        m = view.shape[0] // g
        v = np.asarray(values)
        view[: m * g].reshape(m, g)[self.rows] = v.reshape(-1, g) if v.ndim else v


def find(e: np.ndarray) -> Runs | None:
    """The runs of the non-negative integer array `e`, or None when it has none worth using."""
    if not isinstance(e, np.ndarray) or e.ndim != 1 or e.dtype.kind not in "iu":
        return None
    n = e.shape[0]
    if n < MIN_LANES:
        return None
    for g in GROUPS:
        if n % g:
            continue
        first, last = int(e[0]), int(e[g - 1])
        if first == last:  # the first group is one element: try broadcast
            r = e.reshape(-1, g)
            heads = r[:, 0]
            if np.array_equal(r, np.broadcast_to(heads[:, None], r.shape)):
                heads = heads.copy()
                heads.flags.writeable = False
                return Runs(g, True, heads)
        elif last - first == g - 1 and first % g == 0:  # the first group is one aligned row: try rows
            r = e.reshape(-1, g)
            heads = r[:, 0]
            if not np.count_nonzero(heads % g) and \
                    np.array_equal(r - heads[:, None], np.broadcast_to(_iota(g, e.dtype), r.shape)):
                rows = heads // g
                rows.flags.writeable = False
                return Runs(g, False, rows, bool(np.all(rows[1:] > rows[:-1])))
    return None


# id(index array) -> (that array, its Runs, None, or _ONCE): a few entries
_FOUND: dict[int, tuple[np.ndarray, Any]] = {}
_ONCE = object()  # seen once: an index array used once is not worth the test, so it is made at the second use
_IOTA: dict[tuple[int, np.dtype[Any]], np.ndarray] = {}


def of(e: np.ndarray) -> Runs | None:
    """`find(e)` from the second call with `e` on, remembered for a few arrays (callers pass read-only index
    arrays they keep, such as a tiled loop's shared indices)."""
    hit = _FOUND.get(id(e))
    if hit is not None and hit[0] is e:
        if hit[1] is not _ONCE:
            return hit[1]
        runs = find(e)
        _FOUND[id(e)] = (e, runs)
        return runs
    if len(_FOUND) >= 8:
        del _FOUND[next(iter(_FOUND))]
    _FOUND[id(e)] = (e, _ONCE)
    return None


def _iota(g: int, dtype: npt.DTypeLike) -> np.ndarray:
    key = (g, np.dtype(dtype))
    a = _IOTA.get(key)
    if a is None:
        a = _IOTA[key] = np.arange(g, dtype=dtype)
        a.flags.writeable = False
    return a
