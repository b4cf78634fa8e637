"""The no-false-positive check of the ISA table on real PTX (every instruction of every corpus file passes
`check_instruction`), sharded over test_corpus_isa_<k>.py so that `pytest -n` spreads it over workers."""

from __future__ import annotations

import glob
from pathlib import Path

from corpus.shards import shard

import ptxforge as pf
from ptxforge.ptx import ir
from ptxforge.ptx.isa import check_instruction

CORPUS = sorted(glob.glob(str(Path(__file__).parents[1] / "corpus" / "ptx" / "**" / "*.ptx"), recursive=True))
SHARDS = 3  # the files test_corpus_isa_0.py .. _2.py


def shard_paths(k: int) -> list[str]:
    return shard(CORPUS, k, SHARDS, size=lambda p: Path(p).stat().st_size)


def walk(body, regs, out) -> None:
    """Append (instruction, register types in scope) for every instruction of `body`, nested blocks too."""
    regs = {**regs, **{n: s.type for s in body if isinstance(s, ir.RegisterDecl) for n in s.declared()}}
    for s in body:
        if isinstance(s, ir.Block):
            walk(s.body, regs, out)
        elif isinstance(s, ir.Instruction):
            out.append((s, regs))


def problems(path: str) -> tuple[int, list[str]]:
    """(instructions checked, "FILE:LINE: message" for each problem the ISA table finds) of one file."""
    mod = pf.parse_file(path)
    found, count = [], 0
    for fn in mod.functions:
        work: list = []
        walk(fn.body or (), {p.name: p.type for p in fn.params if p.space == ".reg"}, work)
        for instr, regs in work:
            count += 1
            found += [f"{path}:{span.line}: {m}" for span, m in
                      check_instruction(instr, regs, mod.version, mod.target.arch)]
    return count, found


def check_shard(k: int, min_instructions: int) -> None:
    paths = shard_paths(k)
    assert paths
    found, count = [], 0
    for path in paths:
        n, p = problems(path)
        count += n
        found += p
    assert count > min_instructions
    assert not found, "\n".join(found[:30])
