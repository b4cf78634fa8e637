"""`ptxforge emit FILE.py[:NAME] --arch ARCH`, and the instruction-count claim against nvcc -O3."""

import shutil
import subprocess
from pathlib import Path

import pytest
from dsl_helpers import EXAMPLES

import ptxforge
from ptxforge.cli.main import UserError, build_parser, run_command


def run_emit(argv, capsys):
    rc = run_command(build_parser().parse_args(["emit", *argv]))
    out, err = capsys.readouterr()
    return rc, out, err


def test_emit_one_kernel(capsys):
    rc, out, err = run_emit([f"{EXAMPLES / 'vector_add.py'}:vadd", "--arch", "sm_90a"], capsys)
    assert rc == 0 and err == ""
    m = ptxforge.parse(out)
    assert m.target.arch == "sm_90a" and [k.name for k in m.kernels] == ["vadd"]


def test_emit_all_kernels_of_a_file_as_one_module(capsys):
    rc, out, _ = run_emit([str(EXAMPLES / "fp8_quant.py")], capsys)
    assert rc == 0
    m = ptxforge.parse(out)
    assert m.target.arch == "sm_90a"
    assert [k.name for k in m.kernels] == ["act_quant", "act_quant_pow2_scale1"]


def test_emit_errors(capsys, tmp_path):
    with pytest.raises(UserError, match="no kernel 'nope'; it has: vadd"):
        run_emit([f"{EXAMPLES / 'vector_add.py'}:nope"], capsys)
    with pytest.raises(UserError, match="no such file"):
        run_emit([str(tmp_path / "missing.py")], capsys)
    broken = tmp_path / "broken.py"
    broken.write_text("import ptxforge.dsl as d\n\nx = 1 / 0\n")
    with pytest.raises(UserError, match=r"broken.py:3: ZeroDivisionError"):
        run_emit([str(broken)], capsys)
    bad = tmp_path / "bad.py"
    bad.write_text("from ptxforge.dsl import *\n\n\n@kernel\ndef k(a: ptr(f32)):\n    setmaxnreg(240, inc=True)\n")
    rc, out, err = run_emit([str(bad), "--arch", "sm_80"], capsys)
    assert rc == 1 and out == ""
    assert f"{bad}:6:5: error: setmaxnreg needs sm_90a; this kernel targets sm_80" in err


# --------------------------------------------------------------------------- no longer than nvcc -O3


def count(text: str, kernel: str) -> int:
    return sum(1 for _ in ptxforge.parse(text).function(kernel).instructions())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("module,kernel,cu", [("vector_add", "vadd", "vector_add.cu"),
                                              ("block_reduce", "block_sum", "block_reduce.cu")])
def test_dsl_ptx_is_no_longer_than_nvcc_O3(module, kernel, cu, tmp_path):
    import importlib

    k = getattr(importlib.import_module(module), kernel)
    out = tmp_path / "k.ptx"
    subprocess.run(["nvcc", "-O3", "-arch=sm_80", "-ptx", str(Path(EXAMPLES) / "cuda" / cu), "-o", str(out)],
                   check=True, capture_output=True)
    assert count(k.ptx("sm_80"), kernel) <= count(out.read_text(), kernel)
