"""`ptxforge cache clear` deletes only the cache's own entries; a folder holding anything else is refused
with nothing deleted (PTXFORGE_CACHE_DIR pointed at a user's folder must not empty it)."""

from __future__ import annotations

import json
import os

import pytest

from ptxforge import cache
from ptxforge.cli.main import main


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def _clear(capsys):
    rc = main(["cache", "clear"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() or p.is_symlink())


def test_a_folder_with_a_users_files_is_refused_and_nothing_is_deleted(cache_dir, capsys):
    cache.put("ptxas", cache.key("entry"), b"cubin")
    (cache_dir / "notes.txt").write_text("my notes")
    (cache_dir / "project").mkdir()
    (cache_dir / "project" / "main.c").write_text("int main() {}")
    before = _files(cache_dir)
    rc, _, err = _clear(capsys)
    assert rc == 1 and "not ptxforge cache entries" in err and "nothing was deleted" in err, err
    assert "notes.txt" in err and "project" in err
    assert _files(cache_dir) == before


def test_files_inside_the_entry_folders_that_are_not_entries_are_refused(cache_dir, capsys):
    k = cache.key("entry")
    cache.put("ptxas", k, b"cubin")
    look_alike = cache_dir / "ptxas" / k[:2] / ("0" * 64)  # named like an entry, not headed like one
    look_alike.write_text("a user's file")
    (cache_dir / "ptxas" / k[:2] / "thesis.tex").write_text("chapter 1")
    os.symlink("/etc/hostname", cache_dir / "ptxas" / k[:2] / ("1" * 64))
    before = _files(cache_dir)
    rc, _, err = _clear(capsys)
    assert rc == 1 and "3 file(s)" in err, err
    assert _files(cache_dir) == before


def test_clear_removes_entries_unfinished_writes_and_their_folders(cache_dir, capsys):
    for i in range(3):
        cache.put_json("ptxas", cache.key(i), {"ok": False})
    legacy = cache.key("format 1")  # an entry of the previous layout: bare JSON, no header
    (cache_dir / "ptxas" / legacy[:2]).mkdir(exist_ok=True)
    (cache_dir / "ptxas" / legacy[:2] / legacy).write_text(json.dumps({"ok": True, "cubin": ""}))
    k = cache.key(0)
    (cache_dir / "ptxas" / k[:2] / ".tmp-abc123").write_bytes(b"half an ent")
    assert cache.info()["entries"] == 4 and cache.info()["foreign"] == 0
    rc, out, err = _clear(capsys)
    assert rc == 0 and "removed 4 entries" in out, err
    assert cache_dir.is_dir() and list(cache_dir.iterdir()) == []


def test_info_counts_foreign_files_apart(cache_dir, capsys):
    cache.put("ptxas", cache.key("entry"), b"cubin")
    (cache_dir / "notes.txt").write_text("my notes")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "1 entries" in out and "1 file(s) or folder(s) that are not ptxforge's" in out
