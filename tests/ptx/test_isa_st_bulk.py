"""st.bulk against ptxas 13.0: the forms it takes and the ones it refuses, recorded (no ptxas needed to run).

Each row of CASES (data/st_bulk_cases.txt) is what `ptxas -arch=sm_100a` (CUDA 13.0.88) said of the line
in a PTX 9.0 module: '-' it assembles, 'E' it refuses, with the first error it printed. GATES holds lines
whose verdict depends on the module's .version and .target (one flag per entry of COMBOS). Where ptxas is
installed the records are re-checked against it (`test_the_records_are_what_ptxas_says`).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from cubin import find_tool, have

import ptxforge as pf
from ptxforge.ptx.validator import validate

DATA = Path(__file__).resolve().parent / "data"
DECL = """.reg .b16 %rs<9>; .reg .b32 %r<9>; .reg .b64 %rd<9>; .reg .f32 %f<9>; .reg .f64 %fd<9>; .reg .pred %p<9>;
.reg .u16 %us<9>; .reg .u32 %u<9>; .reg .s32 %s<9>; .reg .u64 %ud<9>; .reg .s64 %sd<9>; .reg .f16 %h<9>;
.shared .align 16 .b8 smem[1024];"""

CASES = (DATA / "st_bulk_cases.txt").read_text()

COMBOS = [("9.0", "sm_100a"), ("8.6", "sm_100a"), ("8.5", "sm_100a"), ("9.0", "sm_90a"), ("8.7", "sm_120"),
          ("9.0", "sm_103"), ("8.6", "sm_100")]
GATES = """
--EE--- st.bulk.weak.shared::cta [%r1], 128, 0;
--EE--- st.bulk [%rd1], %ud1, 0;
-EEEE-E st.bulk.shared::cta [%r1], %u1, 0;
-EEEE-E st.bulk.shared::cta [%r1], %u1+8, 0;
--EE--- st.bulk.shared::cta [%r1], %s1, 0;
"""
# ptxas 13.0 takes a .s32 size in a PTX 8.6 module; the manual introduces 32-bit sizes in PTX ISA 9.0 ("Support
# for size operand with 32-bit length is introduced in PTX ISA version 9.0") and ptxas refuses .u32 there, so
# the validator follows the manual: (line, combo) pairs where it is stricter than ptxas on purpose
STRICTER = {("st.bulk.shared::cta [%r1], %s1, 0;", ("8.6", "sm_100a")),
            ("st.bulk.shared::cta [%r1], %s1, 0;", ("8.7", "sm_120")),
            ("st.bulk.shared::cta [%r1], %s1, 0;", ("8.6", "sm_100"))}


def _rows(table: str) -> list[tuple[str, str, str]]:
    """(flags, line, ptxas message) per row."""
    out = []
    for raw in table.strip().splitlines():
        if raw.startswith("#"):
            continue
        flags, rest = raw.split(" ", 1)
        line, _, message = rest.partition("  # ")
        out.append((flags, line.strip(), message.strip()))
    return out


def _module(lines: list[str], version: str, target: str) -> str:
    return (f".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n"
            f"{DECL}\n" + "\n".join(lines) + "\nret;\n}\n")


FIRST = _module(["@"], "9.0", "sm_100a").split("\n").index("@") + 1  # the line number of the first case


def _ours(lines: list[str], version: str = "9.0", target: str = "sm_100a") -> list[list[str]]:
    """The validator's error messages for each line."""
    found: list[list[str]] = [[] for _ in lines]
    for d in validate(pf.parse(_module(lines, version, target), filename="probe.ptx")):
        if d.severity == "error" and d.line >= FIRST:  # not the header's (.target sm_100a needs PTX ISA 8.6)
            found[d.line - FIRST].append(d.message)
    return found


def test_the_validator_agrees_with_ptxas_on_every_form():
    rows = _rows(CASES)
    ours = _ours([line for _, line, _ in rows])
    wrong = [(flags, line, got) for (flags, line, _), got in zip(rows, ours, strict=True)
             if (flags == "E") != bool(got)]
    assert not wrong, "\n".join(f"ptxas {f} {line}  ours: {got}" for f, line, got in wrong)
    assert sum(f == "E" for f, _, _ in rows) >= 35 and sum(f == "-" for f, _, _ in rows) >= 30


@pytest.mark.parametrize("combo", COMBOS, ids=[f"{t}-{v}" for v, t in COMBOS])
def test_version_and_target_gates_agree_with_ptxas(combo):
    rows = _rows(GATES)
    i = COMBOS.index(combo)
    ours = _ours([line for _, line, _ in rows], *combo)
    for (flags, line, _), got in zip(rows, ours, strict=True):
        if (line, combo) in STRICTER:
            assert flags[i] == "-" and got, (line, got)
        else:
            assert (flags[i] == "E") == bool(got), (line, combo, got)


@pytest.mark.parametrize("line, message", [
    ("st.bulk.weak.shared::cta [%r1], 12, 0;", "operand 2 (size) is 12, not a multiple of 8"),
    ("st.bulk.weak.shared::cta [%r1], 16777224, 0;", "operand 2 (size) is 16777224, outside [0, 16777216]"),
    ("st.bulk.weak.shared::cta [%r1], 128, 1;", "operand 3 (initval) is 1; the only value st.bulk allows is 0"),
    ("st.bulk.weak.shared::cta [%r1], %rs1, 0;", "operand 2 (size) is %rs1 (.b16); expected a 32- or 64-bit "
                                               "integer"),
    ("st.bulk.weak.shared::cta [%r1], %r2, 0;", "ptxas takes a 32-bit size as .u32 or .s32 only"),
    ("st.bulk.weak.shared::cta [smem], 64, 0;", "the address must be a register or a register plus an offset"),
    ("st.bulk.shared [%r1], 128, 0;", "st.bulk: unknown modifier .shared"),
    ("st.bulk.b32 [%rd1], 128, 0;", "st.bulk: expected 0 type suffixes, got 1 (.b32)"),
    ("st.bulk.weak.weak [%rd1], 128, 0;", "modifier .weak appears more than once"),
])
def test_messages_name_the_operand_and_the_rule(line, message):
    (got,) = _ours([line])
    assert len(got) == 1 and message in got[0], got


def test_a_32_bit_size_names_the_version_it_needs():
    (got,) = _ours(["st.bulk.shared::cta [%r1], %u1, 0;"], "8.6", "sm_100a")
    assert got == ["st.bulk.shared::cta: a 32-bit size operand (%u1, .u32) needs PTX ISA 9.0; this module is "
                   ".version 8.6"]


def _ptxas_errors(lines: list[str], version: str, target: str) -> list[str]:
    """The first error ptxas prints for each line ('' where it has none)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe.ptx"
        path.write_text(_module(lines, version, target))
        out = subprocess.run([str(find_tool("ptxas")), f"-arch={target}", str(path), "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    errors = [""] * len(lines)
    for m in re.finditer(r"line (\d+); error\s*: (.*)", out.stdout + out.stderr):
        i = int(m.group(1)) - FIRST
        if 0 <= i < len(lines) and not errors[i]:
            errors[i] = m.group(2).strip()
    return errors


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed")
def test_the_records_are_what_ptxas_says():
    """One line per module (an error can stop ptxas before it reaches the next line)."""
    for flags, line, message in _rows(CASES):
        (got,) = _ptxas_errors([line], "9.0", "sm_100a")
        assert (flags == "E") == bool(got) and got == message, (line, got)
    for flags, line, _ in _rows(GATES):
        for i, (version, target) in enumerate(COMBOS):
            (got,) = _ptxas_errors([line], version, target)
            assert (flags[i] == "E") == bool(got), (line, version, target, got)
