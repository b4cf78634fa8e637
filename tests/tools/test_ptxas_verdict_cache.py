"""The ptxas verdict cache is validated on load: a damaged, foreign, deeply nested, copied or planted entry is a
miss (ptxas runs again), never taken as ptxas's verdict; a genuine entry is still a hit."""

from __future__ import annotations

import json
import os
import threading

import pytest

from ptxforge import cache
from ptxforge.cli.main import main
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

GOOD = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n"
BAD = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n    frobnicate.u32 %r1;\n}\n"


def _have_ptxas() -> bool:
    try:
        find_tool("ptxas")
    except ToolNotFound:
        return False
    return True


pytestmark = pytest.mark.skipif(not _have_ptxas(), reason="ptxas is not installed")  # decided up front


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def _entry(cache_dir):
    """The one entry in the cache (after one assemble)."""
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert len(files) == 1, files
    return files[0]


PLANTED_OK = {"ok": True, "cubin": b"\x7fELF-not-really".hex(), "messages": [], "stderr": ""}


def test_a_planted_ok_verdict_in_the_old_bare_json_layout_is_not_trusted(cache_dir):
    assert not assemble(BAD, "sm_80").ok
    _entry(cache_dir).write_text(json.dumps(PLANTED_OK))
    again = assemble(BAD, "sm_80")
    assert not again.ok and any(m.severity == "error" for m in again.messages)


def test_a_planted_entry_with_a_valid_checksum_but_writable_by_others_is_not_trusted(cache_dir):
    assert not assemble(BAD, "sm_80").ok
    entry = _entry(cache_dir)
    cache.put_json("ptxas", entry.name, PLANTED_OK)  # header and digest right: as another user could write it
    entry.chmod(0o666)
    assert not assemble(BAD, "sm_80").ok


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_owned_by_another_user_is_not_trusted(cache_dir):
    assert not assemble(BAD, "sm_80").ok
    entry = _entry(cache_dir)
    cache.put_json("ptxas", entry.name, PLANTED_OK)
    os.chown(entry, 65534, 65534)
    assert not assemble(BAD, "sm_80").ok


def test_a_verdict_whose_fields_disagree_is_not_trusted(cache_dir):
    assert not assemble(BAD, "sm_80").ok
    entry = _entry(cache_dir)
    for planted in ({**PLANTED_OK, "cubin": ""}, {**PLANTED_OK, "messages": [["error", 6, "x"]]},
                    {**PLANTED_OK, "ok": 1}, {**PLANTED_OK, "extra": 1}, [1, 2], "ok"):
        cache.put_json("ptxas", entry.name, planted)
        assert not assemble(BAD, "sm_80").ok, planted


def test_an_entry_copied_under_another_key_is_a_miss(cache_dir):
    assert assemble(GOOD, "sm_80").ok
    good = _entry(cache_dir)
    good_bytes = good.read_bytes()
    good.unlink()
    assert not assemble(BAD, "sm_80").ok
    _entry(cache_dir).write_bytes(good_bytes)  # the header names the other key
    assert not assemble(BAD, "sm_80").ok


def test_damaged_and_deeply_nested_entries_are_misses_for_check_ptxas(cache_dir, tmp_path, capsys):
    k = tmp_path / "k.ptx"
    k.write_text(GOOD)
    assert main(["check", "--ptxas", str(k)]) == 0
    entry = _entry(cache_dir)
    for damage in (b"[" * 100_000, entry.read_bytes()[:-7], b"\xff\xfe garbage", b""):
        entry.write_bytes(damage)
        assert main(["check", "--ptxas", str(k)]) == 0
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err and "error" not in err, err


def test_a_genuine_entry_is_still_a_hit(cache_dir, monkeypatch):
    first = assemble(BAD, "sm_80")
    import ptxforge.toolchain as tc

    monkeypatch.setattr(tc, "_assemble", lambda *a, **k: pytest.fail("ptxas ran again"))
    again = assemble(BAD, "sm_80")
    assert (again.ok, again.messages, again.stderr) == (first.ok, first.messages, first.stderr)


def test_a_fifo_planted_as_an_entry_is_a_miss_without_waiting(cache_dir):
    assert not assemble(BAD, "sm_80").ok
    entry = _entry(cache_dir)
    entry.unlink()
    os.mkfifo(entry)  # reading it would wait for a writer forever
    said = []
    t = threading.Thread(target=lambda: said.append(assemble(BAD, "sm_80").ok), daemon=True)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "assemble waited on a FIFO in the cache"
    assert said == [False]
