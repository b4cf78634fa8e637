"""The on-disk cache of ptxas builds: keyed by content, tool and flags; atomic; concurrent processes; clear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxforge import cache
from ptxforge.cli.main import main
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

PTX = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def _have_ptxas() -> bool:
    try:
        find_tool("ptxas")
    except ToolNotFound:
        return False
    return True


needs_ptxas = pytest.mark.skipif(not _have_ptxas(), reason="ptxas is not installed")  # decided up front


@needs_ptxas
def test_second_build_comes_from_the_cache(cache_dir, monkeypatch):
    first = assemble(PTX, "sm_80")
    assert first.ok and cache.info()["entries"] == 1
    import ptxforge.toolchain as tc

    monkeypatch.setattr(tc, "_assemble", lambda *a, **k: pytest.fail("ptxas ran again"))
    again = assemble(PTX, "sm_80")
    assert again.cubin == first.cubin and again.ok
    with pytest.raises(BaseException, match="ptxas ran again"):  # other flags, another key
        assemble(PTX, "sm_80", ["-O0"])


def test_entries_are_keyed_by_content_arch_and_flags():
    ks = {cache.key(PTX, "sm_80", ""), cache.key(PTX, "sm_90", ""), cache.key(PTX, "sm_80", "-O0"),
          cache.key(PTX + " ", "sm_80", "")}
    assert len(ks) == 4
    assert cache.key("ab", "c") != cache.key("a", "bc")  # parts are length-delimited


def test_damaged_entries_are_misses_and_put_is_atomic(cache_dir):
    k = cache.key("x")
    cache.put("ptxas", k, b"{not json")
    assert cache.get_json("ptxas", k) is None
    cache.put_json("ptxas", k, {"a": 1})
    assert cache.get_json("ptxas", k) == {"a": 1}
    assert not [f for f in cache_dir.rglob(".tmp-*")]  # no temporary file left behind


@needs_ptxas
def test_concurrent_processes_write_one_whole_entry(cache_dir):
    src = str(Path(__file__).parents[2] / "src")
    code = (f"import sys; sys.path.insert(0, {src!r}); from ptxforge.toolchain import assemble; "
            f"r = assemble({PTX!r}, 'sm_80'); print(len(r.cubin))")
    env = {"PTXFORGE_CACHE_DIR": str(cache_dir), "PATH": os.environ["PATH"]}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(4)]
    sizes = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(sizes) == 1 and int(sizes.pop()) > 0
    assert cache.info()["entries"] == 1


def test_off_and_cli_clear(cache_dir, monkeypatch, capsys):
    cache.put("ptxas", cache.key("y"), b"1")
    assert main(["cache", "info"]) == 0 and "1 entries" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0 and "removed 1 entries" in capsys.readouterr().out
    assert cache.info()["entries"] == 0
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", "off")
    assert cache.cache_dir() is None and cache.get("ptxas", "k") is None
    assert main(["cache", "clear"]) == 0 and "off" in capsys.readouterr().out
