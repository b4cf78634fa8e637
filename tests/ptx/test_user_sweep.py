"""Point the parser, printer and validator at your own PTX:

    PTXFORGE_SWEEP_DIR=/path/to/ptx pytest tests/ptx/test_user_sweep.py -q

Every *.ptx under that folder (recursively) is one case per stage (parse, round trip, check), failing with the
file's first error. Without the variable the sweep cases skip, saying so; the tests of scripts/sweep.py itself
(the same stages, with a summary table) always run. Add PTXFORGE_SWEEP_PTXAS=1 to also assemble each file
with ptxas and require check's verdict to agree with it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from cubin import have

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ptxforge_sweep", REPO / "scripts" / "sweep.py")
sweep = sys.modules.setdefault("ptxforge_sweep", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(sweep)

SWEEP_DIR = os.environ.get("PTXFORGE_SWEEP_DIR")
WITH_PTXAS = os.environ.get("PTXFORGE_SWEEP_PTXAS") == "1"
FILES = sorted(Path(SWEEP_DIR).rglob("*.ptx")) if SWEEP_DIR and Path(SWEEP_DIR).is_dir() else []
STAGES = ("parse", "round trip", "check") + (("check agrees with ptxas",) if WITH_PTXAS else ())


def _cases():
    if not SWEEP_DIR:
        return [pytest.param(None, None, marks=pytest.mark.skip(
            reason="set PTXFORGE_SWEEP_DIR to a folder of .ptx files to sweep it"), id="unset")]
    if not FILES:
        return [pytest.param(None, None, marks=pytest.mark.skip(
            reason=f"PTXFORGE_SWEEP_DIR={SWEEP_DIR} holds no .ptx files"), id="empty")]
    root = Path(SWEEP_DIR)
    return [pytest.param(p, s, id=f"{p.relative_to(root).as_posix()}:{s}") for p in FILES for s in STAGES]


_results: dict[Path, object] = {}


@pytest.mark.parametrize(("path", "stage"), _cases())
def test_user_ptx(path, stage):
    if path not in _results:
        _results[path] = sweep.sweep_file(path, Path(SWEEP_DIR), ptxas=WITH_PTXAS)
    r = _results[path]
    if stage not in r.stages:
        pytest.fail(f"{r.path}: not reached ({', '.join(f'{s}: {e}' for s, e in r.stages.items() if e)})")
    assert r.stages[stage] is None, f"{r.path}: {stage}: {r.stages[stage]}"


# ----------------------------------------------------------------------------- the sweep script itself
GOOD = """.version 8.0
.target sm_80
.address_size 64

.visible .entry add_one(.param .u64 p)
{
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [p];
\tcvta.to.global.u64 %rd2, %rd1;
\tld.global.u32 %r1, [%rd2];
\tadd.s32 %r2, %r1, 1;
\tst.global.u32 [%rd2], %r2;
\tret;
}
"""


def _tree(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "good.ptx").write_text(GOOD)
    (tmp_path / "sub" / "undeclared.ptx").write_text(GOOD.replace("add.s32 %r2, %r1, 1;", "add.s32 %r2, %r9, 1;"))
    (tmp_path / "broken.ptx").write_text(GOOD.replace("ret;", "ret"))
    (tmp_path / "notes.txt").write_text("not PTX")
    return tmp_path


def test_sweep_counts_each_stage(tmp_path, capsys):
    root = _tree(tmp_path)
    results = {r.path: r for r in sweep.sweep(root)}
    assert sorted(results) == ["broken.ptx", "good.ptx", "sub/undeclared.ptx"]
    assert results["good.ptx"].ok and results["good.ptx"].kernels == 1
    assert "PTXSyntaxError" in results["broken.ptx"].stages["parse"]
    assert "round trip" not in results["broken.ptx"].stages
    bad = results["sub/undeclared.ptx"]
    assert bad.stages["parse"] is None and bad.stages["round trip"] is None
    assert "%r9" in bad.stages["check"] and "sub/undeclared.ptx:" in bad.stages["check"]
    assert sweep.summary(list(results.values())) == [("parse", 2, 3), ("round trip", 2, 2), ("check", 1, 2)]
    assert sweep.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "3 files, 2 kernels" in out and "| parse | 2 | 3 | 66.7% |" in out
    assert "good.ptx" not in out.split("\n3 files")[0]  # only failing files are listed without -v


def test_sweep_exit_status_and_json(tmp_path, capsys):
    (tmp_path / "good.ptx").write_text(GOOD)
    assert sweep.main([str(tmp_path), "-v", "--json", str(tmp_path / "r.json")]) == 0
    assert "good.ptx: 1 kernels: ok" in capsys.readouterr().out
    assert '"ok": true' in (tmp_path / "r.json").read_text()
    assert sweep.main([str(tmp_path / "nowhere")]) == 2


@pytest.mark.skipif(not have("ptxas"), reason="ptxas not found (install the dev extra)")
def test_sweep_with_ptxas_compares_verdicts(tmp_path):
    root = _tree(tmp_path)
    results = {r.path: r for r in sweep.sweep(root, ptxas=True, cubin=True)}
    good, bad = results["good.ptx"], results["sub/undeclared.ptx"]
    assert good.ok and good.stages["same cubin"] is None
    assert bad.stages["ptxas"] and bad.stages["check agrees with ptxas"] is None  # both reject it
