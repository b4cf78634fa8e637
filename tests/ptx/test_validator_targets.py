"""The validator against ptxas 13.0 on `.version`, `.target` and barrier operands, from recorded verdicts.

data/ptxas_targets.txt holds headers (the version just below each target's first, its first, 9.0; unknown
versions and targets) and data/ptxas_barriers.txt barrier lines, each with what ptxas said, so these run
without ptxas; where ptxas is installed, `test_ptxas_still_gives_the_recorded_verdicts` re-runs a spread subset.
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
from ptxforge.cli.main import main
from ptxforge.ptx.isa.targets import PTX_VERSIONS, PTXAS_PTX_VERSIONS
from ptxforge.ptx.retarget import retarget
from ptxforge.ptx.validator import validate

DATA = Path(__file__).resolve().parent / "data"


def _rows(name: str) -> list[tuple[str, str, str]]:
    """(verdict, text, ptxas's message) of each row of a data file."""
    out = []
    for line in (DATA / name).read_text().splitlines():
        if line and not line.startswith("#"):
            body, _, msg = line.partition("  # ")
            out.append((body[0], body[2:], msg))
    return out


TARGET_ROWS = _rows("ptxas_targets.txt")  # text: "VERSION TARGET ARCH"
BARRIER_ROWS = _rows("ptxas_barriers.txt")  # text: the instruction
NEWER = sorted(PTX_VERSIONS - PTXAS_PTX_VERSIONS)  # PTX ISA 9.1-9.5: real, newer than ptxas 13.0


def header_module(version: str, target: str) -> str:
    return f".version {version}\n.target {target}\n.entry k()\n{{\nret;\n}}\n"


def barrier_module(line: str) -> str:
    return (".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n.reg .b32 %r<4>;\n"
            f".reg .pred %p<4>;\n{line}\nret;\n}}\n")


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def test_the_validator_agrees_with_ptxas_on_versions_and_targets():
    wrong = []
    for verdict, text, msg in TARGET_ROWS:
        version, target, _arch = text.split()
        if _version(version) in NEWER:
            continue  # below
        ours = [d.message for d in validate(pf.parse(header_module(version, target)))]
        if (verdict == "E") != bool(ours):
            wrong.append(f"{verdict} {text}: ptxas {msg!r}, ours {ours}")
    assert not wrong, "\n".join(wrong)
    assert len(TARGET_ROWS) > 140 and sum(v == "E" for v, _, _ in TARGET_ROWS) > 50


def test_newer_ptx_isa_versions_are_known_although_this_ptxas_refuses_them():
    """PTX ISA 9.1-9.5 (CUDA 13.1-13.5) are real: Triton writes them and the runtime lowers them for an older
    ptxas; ptxas 13.0 refuses them (recorded for 9.1 and 9.4)."""
    recorded = {text.split()[0]: v for v, text, _ in TARGET_ROWS if _version(text.split()[0]) in NEWER}
    assert recorded == {"9.1": "E", "9.4": "E"}
    assert NEWER == [(9, 1), (9, 2), (9, 3), (9, 4), (9, 5)]
    for v in NEWER:
        assert validate(pf.parse(header_module(f"{v[0]}.{v[1]}", "sm_90"))) == []


@pytest.mark.parametrize("version,target,line,col,message", [
    ("99.99", "sm_90", 1, 1, "unsupported .version 99.99: the PTX ISA versions are 1.0-1.5"),
    ("8.10", "sm_90", 1, 1, "unsupported .version 8.10"),  # ptxas reads it as 9.0 (8*10+10); we refuse it
    ("9.0", "sm_999", 2, 1, "unknown target 'sm_999': ptxas 13.0 knows sm_75, sm_80,"),
    ("9.0", "sm_90f", 2, 1, "unknown target 'sm_90f'"),
    ("9.0", "compute_999", 2, 1, "unknown target 'compute_999'"),
    ("8.5", "sm_100a", 2, 1, ".target sm_100a needs PTX ISA 8.6 or later; this module is .version 8.5"),
    ("7.2", "compute_88", 2, 1, ".target compute_88 needs PTX ISA 7.3 or later"),
])
def test_header_errors_name_the_directive(version, target, line, col, message):
    (d,) = validate(pf.parse(header_module(version, target), filename="h.ptx"))
    assert (d.file, d.line, d.col) == ("h.ptx", line, col) and d.message.startswith(message), d.format()


def test_compute_targets_are_the_sm_targets():
    """ptxas 13.0 assembles `.target compute_80` for -arch=sm_80 (it refuses it only for its default arch,
    sm_75, as it refuses `.target sm_80` there: "SM version specified by .target is higher than default")."""
    rows = {tuple(text.split()[:2]): v for v, text, _ in TARGET_ROWS}
    assert rows[("9.0", "compute_80")] == rows[("9.0", "sm_80")] == "-"
    assert validate(pf.parse(header_module("9.0", "compute_80"))) == []


def test_address_size_needs_ptx_2_3():
    text = ".version 2.2\n.target sm_20\n.address_size 64\n.entry k()\n{\nret;\n}\n"
    (d,) = validate(pf.parse(text))
    assert d.line == 3 and d.message.startswith(".address_size needs PTX ISA 2.3")


def test_the_validator_agrees_with_ptxas_on_barriers():
    wrong = []
    for verdict, line, msg in BARRIER_ROWS:
        ours = [d.message for d in validate(pf.parse(barrier_module(line)))]
        if (verdict == "E") != bool(ours):
            wrong.append(f"{verdict} {line}: ptxas {msg!r}, ours {ours}")
    assert not wrong, "\n".join(wrong)
    assert sum(v == "E" for v, _, _ in BARRIER_ROWS) >= 25


@pytest.mark.parametrize("line,col,message", [
    ("bar.sync 0, 33;", 13, "bar.sync: thread count 33 is not a multiple of the warp size (32)"),
    ("barrier.sync.aligned %r1, 31;", 27, "barrier.sync.aligned: thread count 31 is not a multiple"),
    ("bar.red.popc.u32 %r1, 0, 33, %p1;", 26, "bar.red.popc.u32: thread count 33 is not a multiple"),
    ("bar.arrive 1, 0;", 15, "bar.arrive: an arrive needs a non-zero thread count"),
    ("bar.sync 16, 64;", 10, "bar.sync: barrier number 16 is out of range 0..15"),
])
def test_barrier_errors_name_the_operand(line, col, message):
    (d,) = validate(pf.parse(barrier_module(line), filename="b.ptx"))
    assert (d.line, d.col) == (8, col) and d.message.startswith(message), d.format()


def run(args, capsys):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def test_check_and_retarget_refuse_unknown_arch_and_version(tmp_path, capsys):
    src = tmp_path / "k.ptx"
    src.write_text(header_module("9.0", "sm_90"))
    rc, _, err = run(["check", "--arch", "sm_999", src], capsys)
    assert rc == 1 and "--arch: unknown target 'sm_999'" in err
    rc, _, err = run(["check", "--ptx-version", "99.99", src], capsys)
    assert rc == 1 and "--ptx-version: unsupported .version 99.99" in err
    out = tmp_path / "out.ptx"
    rc, _, err = run(["retarget", "--arch", "sm_90", "--ptx-version", "99.99", "-o", out, src], capsys)
    assert rc == 1 and "--ptx-version: unsupported .version 99.99" in err and not out.exists()
    src.write_text(header_module("99.99", "sm_999"))
    rc, _, err = run(["check", src], capsys)
    assert rc == 1 and f"{src}:1:1: error: unsupported .version 99.99" in err
    assert f"{src}:2:1: error: unknown target 'sm_999'" in err


def test_retarget_refuses_an_unknown_version_and_takes_ptxas_first_versions():
    m = pf.parse(header_module("9.0", "sm_90"))
    with pytest.raises(ValueError, match="unsupported .version 99.99"):
        retarget(m, "sm_90", (99, 99))
    assert retarget(m, "sm_88", (7, 3)).version == (7, 3)  # ptxas 13.0's first version for sm_88
    with pytest.raises(pf.PTXValidationError, match="needs PTX ISA 7.3"):
        retarget(m, "sm_88", (7, 2))


def _ptxas(text: str, arch: str) -> bool:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe.ptx"
        path.write_text(text)
        proc = subprocess.run([str(find_tool("ptxas")), f"-arch={arch}", str(path), "-o", os.devnull],
                              capture_output=True, text=True, timeout=60)
    return proc.returncode == 0


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed")
def test_ptxas_still_gives_the_recorded_verdicts():
    heads = TARGET_ROWS[:: max(1, len(TARGET_ROWS) // 12)] + [r for r in TARGET_ROWS if "99.99" in r[1]]
    got = [_ptxas(header_module(*text.split()[:2]), text.split()[2]) for _, text, _ in heads]
    assert got == [v == "-" for v, _, _ in heads]
    bars = BARRIER_ROWS[::4]
    assert [_ptxas(barrier_module(line), "sm_90") for _, line, _ in bars] == [v == "-" for v, _, _ in bars]
    with tempfile.TemporaryDirectory() as d:  # what `check --arch sm_999 --ptxas` would run
        path = Path(d) / "k.ptx"
        path.write_text(header_module("9.0", "sm_90"))
        proc = subprocess.run([str(find_tool("ptxas")), "-arch=sm_999", str(path), "-o", os.devnull],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and re.search(r"'sm_999' is not defined", proc.stdout + proc.stderr)
