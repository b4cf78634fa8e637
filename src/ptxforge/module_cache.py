"""`ModuleCache`: the modules a device keeps loaded, at most `bound` of them, least recently used out first.

Both devices keep their loaded modules in one: the emulator its `ModuleImage`s (evicting frees their
.global/.const variables), a GPU its CUmodules (evicting is cuModuleUnload). A module a launch still uses
(a stream launch queued but not finished) is pinned: it is never evicted, the cache holds more than its bound
while pins keep it so (the entry just added stays too), and it shrinks back once they are released. An evicted
module is loaded afresh on its next use, with its variables' initial values.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MAX_MODULES = 64  # modules a device keeps loaded by default


class ModuleCache(Generic[K, V]):
    """At most `bound` entries (pinned ones aside); `on_evict(key, value)` runs for each entry evicted."""

    def __init__(self, bound: int = MAX_MODULES, on_evict: Callable[[K, V], object] | None = None) -> None:
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(f"a module cache's bound must be a whole number of at least 1, got {bound!r}")
        self.bound = bound
        self.on_evict = on_evict
        self._entries: OrderedDict[K, V] = OrderedDict()  # oldest use first
        self._pins: dict[K, int] = {}  # key -> how many users hold it

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def __repr__(self) -> str:
        return f"ModuleCache({len(self)} of {self.bound}, {len(self._pins)} pinned)"

    def get(self, key: K) -> V | None:
        """The entry of `key` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Add `value` as the most recently used entry, evicting the oldest unpinned ones past the bound.
        An entry already under `key` is replaced (and evicted)."""
        old = self._entries.pop(key, None)
        self._entries[key] = value
        if old is not None and old is not value and self.on_evict is not None:
            self.on_evict(key, old)
        self._shrink(keep=key)

    def pop(self, key: K) -> V | None:
        """Remove the entry of `key` without `on_evict` (the caller disposes of it); None if absent."""
        self._pins.pop(key, None)
        return self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every entry without `on_evict` (the memory they were loaded into is gone)."""
        self._entries.clear()
        self._pins.clear()

    def pin(self, key: K) -> None:
        """Keep the entry of `key` loaded until as many `unpin`s (a launch still uses it)."""
        if key not in self._entries:
            raise KeyError(f"{key!r} is not in the cache: load it before pinning it")
        self._pins[key] = self._pins.get(key, 0) + 1

    def unpin(self, key: K) -> None:
        """Release one pin of `key`; with the last one it may be evicted (when the cache is past its bound)."""
        n = self._pins.get(key, 0)
        if n <= 0:
            raise KeyError(f"{key!r} is not pinned")
        if n > 1:
            self._pins[key] = n - 1
            return
        del self._pins[key]
        self._shrink()

    def pinned(self, key: K) -> bool:
        return key in self._pins

    def _shrink(self, keep: K | None = None) -> None:
        """Evict the least recently used unpinned entries until the cache is within its bound (or only
        pinned entries and `keep`, the one just added for its caller, are left)."""
        excess = len(self._entries) - self.bound
        if excess <= 0:
            return
        victims = [k for k in self._entries if k not in self._pins and k != keep][:excess]
        for k in victims:
            value = self._entries.pop(k)
            if self.on_evict is not None:
                self.on_evict(k, value)
