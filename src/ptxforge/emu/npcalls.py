"""numpy's reductions as the interpreter's hot paths call them: the ufunc reductions and the C count, without
the Python wrappers of `ndarray.min`/`max`/`any` and `np.count_nonzero` (a few microseconds a call on the
small lane arrays of a diverged step). Same results, same errors (an empty array has no minimum)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

try:  # numpy 2
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # numpy 1.26
    from numpy.core.multiarray import count_nonzero as _count_nonzero  # type: ignore[no-redef]

__all__ = ["any_true", "count_nonzero", "lowest", "highest"]

# (axis=None: over every element, of an array of any shape, as the methods; a keyword given overrides it)
lowest: Any = partial(np.minimum.reduce, axis=None)  # a.min()
highest: Any = partial(np.maximum.reduce, axis=None)  # a.max()
any_true: Any = partial(np.logical_or.reduce, axis=None)  # a.any() (a numpy bool)
count_nonzero: Any = _count_nonzero  # np.count_nonzero(a) with no axis: an int
