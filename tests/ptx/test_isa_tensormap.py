"""tensormap.replace / tensormap.cp_fenceproxy operand forms: the validator against ptxas 13.0 (sm_90a, PTX 8.3).

Each row is what `ptxas -arch=sm_90a` (CUDA 13.0) said of the line: '-' it assembles, 'E' it refuses. Where
ptxas is installed the records are re-checked against it. The validator checks the operand forms (which
operands are integer constants, how many there are); the ranges of the immediates (field codes, ord 0..4) are
left to the emulator, which faults on them (tests/emu/test_emu_tensormap_edit.py).
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
