"""`ModuleCache`: the bounded, least-recently-used cache of loaded modules both devices keep."""

from __future__ import annotations

import pytest

from ptxforge.module_cache import MAX_MODULES, ModuleCache


def _cache(bound: int) -> tuple[ModuleCache[str, int], list[tuple[str, int]]]:
    evicted: list[tuple[str, int]] = []
    return ModuleCache(bound, on_evict=lambda k, v: evicted.append((k, v))), evicted


def test_the_least_recently_used_goes_first():
    c, evicted = _cache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # a use: "b" is now the oldest
    c.put("c", 3)
    assert evicted == [("b", 2)] and list(c) == ["a", "c"] and len(c) == 2
    assert c.get("b") is None and "b" not in c


def test_a_pinned_entry_stays_past_the_bound_until_released():
    c, evicted = _cache(1)
    c.put("a", 1)
    c.pin("a")
    c.pin("a")  # two users
    c.put("b", 2)
    c.put("c", 3)  # "b" is the oldest unpinned one
    assert evicted == [("b", 2)] and list(c) == ["a", "c"] and c.pinned("a")
    c.unpin("a")
    assert evicted == [("b", 2)] and c.pinned("a")  # one user left
    c.unpin("a")
    assert evicted == [("b", 2), ("a", 1)] and list(c) == ["c"] and not c.pinned("a")


def test_pins_are_checked():
    c, _ = _cache(2)
    with pytest.raises(KeyError, match="'x' is not in the cache"):
        c.pin("x")
    c.put("x", 1)
    with pytest.raises(KeyError, match="'x' is not pinned"):
        c.unpin("x")


def test_replacing_evicts_the_old_value_and_pop_and_clear_do_not():
    c, evicted = _cache(4)
    c.put("a", 1)
    c.put("a", 10)
    assert evicted == [("a", 1)] and c.get("a") == 10
    c.put("b", 2)
    assert c.pop("a") == 10 and c.pop("a") is None
    c.clear()
    assert len(c) == 0 and evicted == [("a", 1)]


@pytest.mark.parametrize("bound", [0, -1, 1.5, True, None])
def test_the_bound_is_a_whole_number_of_at_least_one(bound):
    with pytest.raises(ValueError, match="bound must be a whole number of at least 1"):
        ModuleCache(bound)


def test_the_default_bound():
    assert ModuleCache().bound == MAX_MODULES == 64
    assert repr(ModuleCache(3)) == "ModuleCache(0 of 3, 0 pinned)"
