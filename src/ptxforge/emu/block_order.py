"""Orders of a grid's blocks, computed for the positions a wave asks for: never an array of the whole grid.

A grid may have 2^31 - 1 blocks (times 65,535 in y and z); an order held as an array of its block ids would
take gigabytes before the first block ran. `ClusterOrder` runs clusters one after another, the CTAs of each in
rank order; `Shuffle` is a check's shuffled order (a plain permutation for grids up to EXACT_SHUFFLE blocks,
an affine bijection of the positions beyond).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EXACT_SHUFFLE = 1 << 22  # blocks up to which a shuffle is a permutation array (32 MiB)


class ClusterOrder:
    """Linear block ids in cluster order; `order[positions]` as with an array. `corder` maps cluster positions
    to clusters (a check's shuffled order), or None."""

    def __init__(self, grid: tuple[int, ...], cluster: tuple[int, ...], corder: Any = None):
        self.grid, self.cluster, self.corder = grid, cluster, corder
        self.csize = cluster[0] * cluster[1] * cluster[2]

    def __getitem__(self, p: np.ndarray) -> np.ndarray:
        cx, cy, cz = self.cluster
        gx, gy, _ = self.grid
        ncx, ncy = gx // cx, gy // cy
        p = np.asarray(p, np.int64)
        c, r = p // self.csize, p % self.csize
        if self.corder is not None:
            c = np.asarray(self.corder[c], np.int64)
        bx = c % ncx * cx + r % cx
        by = (c // ncx) % ncy * cy + (r // cx) % cy
        bz = c // (ncx * ncy) * cz + r // (cx * cy)
        return bx + by * gx + bz * gx * gy


class Shuffle:
    """A seeded shuffled order of `n` positions; `order[positions]` as with an array."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.n = n
        self.perm = rng.permutation(n) if n <= EXACT_SHUFFLE else None
        if self.perm is None:  # a multiplier coprime to n: p -> (a p + b) mod n is a bijection
            a = int(rng.integers(n // 3, n)) | 1
            while math.gcd(a, n) != 1:
                a += 2
            self.a, self.b = a, int(rng.integers(0, n))

    def __getitem__(self, p: np.ndarray) -> np.ndarray:
        if self.perm is not None:
            return self.perm[p]
        if self.n < 1 << 31:  # a p + b stays below 2^62
            return (np.asarray(p, np.int64) * self.a + self.b) % self.n
        p = np.asarray(p, dtype=object)  # Python integers: a p may pass 2^63
        return ((p * self.a + self.b) % self.n).astype(np.int64)

    def __len__(self) -> int:
        return self.n
