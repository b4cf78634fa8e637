"""The disk cache of ptxforge's own traced kernels (ptxforge.dsl.trace_cache): a load equals a fresh trace,
spans included; damaged or mismatched entries are misses; users' kernels are never cached."""

import pytest

from ptxforge import cache as disk
from ptxforge.dsl import f32, kernel, ptr, st, tid, trace_cache
from ptxforge.dsl.kernel import resolve_arch
from ptxforge.kernels import comm, fp8, internode_notify, routing
from ptxforge.ptx import ir


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path))
    return tmp_path


def _spans(m):
    out: list = []
    trace_cache._collect_spans(m, out)
    return [(s.file, s.line, s.col) for s in out]


def _key(k):
    return trace_cache.entry_key(k.fn, k.name, k.consts, resolve_arch(k.arch), (k.maxntid, k.minnctapersm))


@pytest.mark.parametrize("k", [comm.intranode_combine, internode_notify.internode_notify,
                               fp8.per_token_quant_pow2, routing.route], ids=lambda k: k.name)
def test_a_loaded_kernel_equals_a_fresh_trace(cache_dir, k):
    arch = resolve_arch(k.arch)
    traced = k._build(arch)
    key = _key(k)
    trace_cache.store(key, traced)
    loaded = trace_cache.load(key, f"<dsl {k.name}>")
    assert loaded is not None
    assert loaded == traced and loaded.to_ptx() == traced.to_ptx()
    assert loaded.filename == traced.filename
    no = (ir.NO_SPAN.file, ir.NO_SPAN.line, ir.NO_SPAN.col)
    want = [s if trace_cache._file_in_package(s[0]) else no for s in _spans(traced)]
    assert _spans(loaded) == want
    located = [s for s in _spans(traced) if s != no]
    assert sum(s in want for s in located) > 0.8 * len(located)  # most instructions: a line of ptxforge


def test_damaged_and_mismatched_entries_are_misses(cache_dir):
    k = internode_notify.internode_notify
    key = _key(k)
    trace_cache.store(key, k._build(resolve_arch(k.arch)))
    entry = next(p for p in cache_dir.rglob(key))
    good = entry.read_bytes()
    entry.write_bytes(good.replace(b"ld.", b"st.", 1))  # the digest no longer matches
    assert trace_cache.load(key, "x") is None
    entry.write_bytes(good)
    value = disk.get_json("dsl", key)
    disk.put_json("dsl", key, {**value, "spans": value["spans"][:-1]})  # one span short
    assert trace_cache.load(key, "x") is None
    disk.put_json("dsl", key, {**value, "spans": value["spans"] + [["a", 1, 1]]})  # one too many
    assert trace_cache.load(key, "x") is None
    disk.put_json("dsl", key, {"ptx": "not ptx", "spans": []})
    assert trace_cache.load(key, "x") is None


def test_users_kernels_and_unstable_constants_are_not_cached(cache_dir):
    @kernel(arch="sm_80")
    def fill(y: ptr(f32)):
        st(y[tid.x], 1.0)

    assert _key(fill) is None
    assert trace_cache.entry_key(comm.intranode_combine.fn, "c", {"f": object()}, "sm_90a", None) is None
    a = trace_cache.entry_key(fp8.per_token_quant.fn, "q", {"round_scale": False}, "sm_90a", (None, None))
    b = trace_cache.entry_key(fp8.per_token_quant.fn, "q", {"round_scale": True}, "sm_90a", (None, None))
    assert a and b and a != b
