"""tensormap.replace / tensormap.cp_fenceproxy operand forms: the validator against ptxas 13.0 (sm_90a, PTX 8.3).

Each row is what `ptxas -arch=sm_90a` (CUDA 13.0) said of the line: '-' it assembles, 'E' it refuses. Where
ptxas is installed the records are re-checked against it. The validator checks the operand forms (which
operands are integer constants, how many there are), each field's .b32/.b64, `ord` 0..4 and the field codes
(ptx/isa/tensormap_replace.py); the emulator faults on the values a constant cannot show
(tests/emu/test_emu_tensormap_edit.py).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from cubin import find_tool, have

import ptxforge as pf
from ptxforge.ptx.validator import validate

CASES = """
- tensormap.replace.tile.global_address.shared::cta.b1024.b64 [smap], %rd1;
- tensormap.replace.tile.rank.shared::cta.b1024.b32 [smap], %r1;
- tensormap.replace.tile.rank.global.b1024.b32 [%rd1], 2;
- tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap], 4, %r1;
- tensormap.replace.tile.global_dim.b1024.b32 [%rd1], 0, 7;
- tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [smap], 3, %rd1;
- tensormap.replace.tile.element_stride.global.b1024.b32 [%rd1], 0, %r1;
- tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], 12;
- tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [smap], 2;
- tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [smap], 3;
- tensormap.replace.tile.fill_mode.global.b1024.b32 [%rd1], 1;
- tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap], 128;
- tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cta.sync.aligned [%rd1], [smap], 128;
E tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], %r1;
E tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap], %r1, %r1;
E tensormap.replace.tile.rank.shared::cta.b1024.b32 [smap], 1, %r1;
E tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [smap], 0, 1;
E tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [smap], %r1;
- tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [smap], 4, %rd1;
E tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap], 5, %r1;
E tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [smap], 5, %rd1;
E tensormap.replace.tile.global_dim.shared::cta.b1024.b64 [smap], 0, %rd1;
E tensormap.replace.tile.global_stride.shared::cta.b1024.b32 [smap], 0, %r1;
E tensormap.replace.tile.global_address.shared::cta.b1024.b32 [smap], %r1;
E tensormap.replace.tile.rank.shared::cta.b1024.b64 [smap], %rd1;
E tensormap.replace.tile.elemtype.shared::cta.b1024.b64 [smap], 1;
E tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], 13;
E tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [smap], 4;
E tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [smap], 5;
E tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [smap], 3;
E tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [smap], 2;
"""
ROWS = [(line[0] == "E", line[2:]) for line in CASES.strip().splitlines()]


def _module(line: str) -> str:
    return f""".version 8.3
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{{
    .shared .align 128 .b8 smap[128];
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 1;
    {line}
    ret;
}}
"""


@pytest.mark.parametrize("refused, line", ROWS)
def test_the_validator_agrees_with_the_record(refused, line):
    errors = [d for d in validate(pf.parse(_module(line), filename="probe.ptx")) if d.severity == "error"]
    assert bool(errors) == refused, [d.message for d in errors]


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed: the records stand")
def test_the_records_are_what_ptxas_says():
    wrong = []
    with tempfile.TemporaryDirectory() as tmp:
        for refused, line in ROWS:
            path = Path(tmp) / "probe.ptx"
            path.write_text(_module(line))
            r = subprocess.run([str(find_tool("ptxas")), "-arch=sm_90a", str(path), "-o", "/dev/null"],
                               capture_output=True, text=True, timeout=60)
            if (r.returncode != 0) != refused:
                wrong.append((line, r.stderr.strip()))
    assert not wrong


# The extended codes by PTX ISA version and target: (version, target, line, refused), ptxas 13.0's verdicts
EXTENDED = [
    ("8.7", "sm_100a", "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], 13;", False),
    ("8.7", "sm_90a", "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], 13;", True),
    ("9.0", "sm_100a", "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [smap], 16;", True),
    ("8.8", "sm_103a", "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [smap], 4;", False),
    ("8.8", "sm_100a", "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [smap], 4;", True),
    ("8.6", "sm_100a", "tensormap.replace.tile.swizzle_atomicity.shared::cta.b1024.b32 [smap], 4;", True),
]


def _module_at(version: str, target: str, line: str) -> str:
    return _module(line).replace(".version 8.3\n.target sm_90a", f".version {version}\n.target {target}", 1)


@pytest.mark.parametrize("version, target, line, refused", EXTENDED)
def test_extended_codes_need_their_version_and_target(version, target, line, refused):
    errors = [d for d in validate(pf.parse(_module_at(version, target, line), filename="probe.ptx"))
              if d.severity == "error"]
    assert bool(errors) == refused, [d.message for d in errors]


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed: the records stand")
def test_the_extended_records_are_what_ptxas_says():
    wrong = []
    with tempfile.TemporaryDirectory() as tmp:
        for version, target, line, refused in EXTENDED:
            path = Path(tmp) / "probe.ptx"
            path.write_text(_module_at(version, target, line))
            r = subprocess.run([str(find_tool("ptxas")), f"-arch={target}", str(path), "-o", "/dev/null"],
                               capture_output=True, text=True, timeout=60)
            if (r.returncode != 0) != refused:
                wrong.append((version, target, line, r.stderr.strip()))
    assert not wrong
