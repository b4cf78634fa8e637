"""Every kernel of the sm_80 / sm_90a -O3 and Triton corpus compiles for the emulator, and it can execute
every instruction in them (TMA tensor copies included). Files with a declared gap of the whole file
(tests/corpus/known_gaps.py) are strict xfails of their own."""

import glob
import json
from pathlib import Path

import pytest
from corpus.known_gaps import known_gap
from corpus.shards import shard

import ptxforge as pf
from ptxforge.emu.launch import EmuDevice

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx"
NOT_YET: set[str] = set()  # instruction prefixes the emulator cannot run yet: none

PATHS = [p for p in sorted(glob.glob(str(CORPUS / "*" / "*.ptx")))
         if ".sm_80.O3." in p or ".sm_90a.O3." in p or "/triton/" in p]


def _gap(path: str) -> str | None:
    return known_gap(Path(path).relative_to(CORPUS.parent).as_posix(), "emulate")


def _unsupported(paths, dev) -> tuple[set[str], int]:
    """Instruction mnemonics (or NOT_YET prefixes) the emulator compiles to a refusal, and the kernel count."""
    unsupported = set()
    kernels = 0
    for path in paths:
        m = pf.parse(Path(path).read_text(), filename=Path(path).name)
        img = dev.image(m)
        for k in m.kernels:
            layout, ops = img.compiled(k)
            kernels += 1
            for op, placed in zip(ops, layout.placed, strict=True):
                if placed.func.func is k and op.fn is not None and op.fn.__qualname__.startswith("_unsupported"):
                    ins = placed.ins
                    unsupported.add(next((f for f in NOT_YET if ins.mnemonic.startswith(f)), ins.mnemonic))
    return unsupported, kernels


CLEAN_PATHS = [p for p in PATHS if not _gap(p)]
SHARDS = 4  # the check is split so that `make test`'s two workers share it (shards balanced by line count)
MANIFEST_KERNELS = {e["path"]: e["kernels"] for e in json.loads((CORPUS.parent / "manifest.json").read_text())["files"]}


def _lines(path: str) -> int:
    return Path(path).read_text().count("\n")


def _manifest_kernels(path: str) -> list[str]:
    return MANIFEST_KERNELS[Path(path).relative_to(CORPUS.parent).as_posix()]


def test_corpus_is_generated():
    assert len(CLEAN_PATHS) > 100, "tests/corpus/ptx is not generated (tests/corpus/generate.py)"
    assert sum(len(_manifest_kernels(p)) for p in CLEAN_PATHS) > 100


@pytest.mark.slow
@pytest.mark.parametrize("k", range(SHARDS))
def test_corpus_kernels_compile(k):
    paths = shard(CLEAN_PATHS, k, SHARDS, size=_lines)
    unsupported, kernels = _unsupported(paths, EmuDevice())
    assert kernels == sum(len(_manifest_kernels(p)) for p in paths)  # every kernel of every file compiled
    assert unsupported <= NOT_YET, unsupported - NOT_YET


def test_the_shards_cover_the_corpus_once():
    shards = [shard(CLEAN_PATHS, k, SHARDS, size=_lines) for k in range(SHARDS)]
    assert sorted(p for s in shards for p in s) == sorted(CLEAN_PATHS) and all(shards)


GAP_PATHS = [p for p in PATHS if _gap(p)]
if GAP_PATHS:  # defined only while tests/corpus/known_gaps.py lists files (an empty parametrization is a skip)
    @pytest.mark.parametrize("path", [pytest.param(p, id=Path(p).name,
                                                   marks=pytest.mark.xfail(strict=True, reason=_gap(p)))
                                      for p in GAP_PATHS])
    def test_known_gap_files_compile(path):
        unsupported, _ = _unsupported([path], EmuDevice())
        assert not unsupported, unsupported
