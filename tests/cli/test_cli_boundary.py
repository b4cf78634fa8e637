"""`python -m ptxforge`, emit keeping the file's prints off the PTX, run writing back only outputs, CLI words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ptxforge.cli.common import cli_words
from ptxforge.cli.main import main

SRC = Path(__file__).resolve().parents[2] / "src"

SCALE = """.version 8.0
.target sm_80
.address_size 64
.visible .entry scale(.param .u64 x, .param .u64 y, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra $END;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, %f1;
    st.global.f32 [%rd5], %f2;
    st.global.f32 [%rd4], %f2;
$END:
    ret;
}
"""


def _env():
    return {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_python_dash_m_ptxforge():
    out = subprocess.run([sys.executable, "-m", "ptxforge", "--version"], capture_output=True, text=True,
                         env=_env(), timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("ptxforge ")


def test_emit_keeps_the_files_prints_off_the_ptx(tmp_path, capsys):
    f = tmp_path / "k.py"
    f.write_text("from ptxforge.dsl import *\nprint('hello from the top level')\n"
                 "@kernel(arch='sm_80')\ndef k(a: ptr(u32)):\n    st(a[tid.x], tid.x)\n"
                 "if __name__ == '__main__':\n    print('main block')\n")
    assert main(["emit", str(f)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("//") or out.lstrip().startswith(".version"), out[:80]
    assert "hello" not in out and "hello from the top level" in err and "main block" not in out + err


def test_run_writes_back_only_outputs(tmp_path, capsys):
    ptx = tmp_path / "scale.ptx"
    ptx.write_text(SCALE)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(8, dtype=np.float32))
    y = tmp_path / "y.npy"
    rc = main(["run", str(ptx), "--block", "8", "-a", str(x), "-a", f"{y}=zeros:8:float32", "-a", "8"])
    assert rc == 0, capsys.readouterr().err
    np.testing.assert_array_equal(np.load(x), np.arange(8))  # the kernel wrote x too, but x is an input
    np.testing.assert_array_equal(np.load(y), 2 * np.arange(8))
    rc = main(["run", str(ptx), "--block", "8", "-a", str(x), "-a", f"{y}=zeros:8:float32", "-a", "8",
               "--out", "x"])
    assert rc == 0
    np.testing.assert_array_equal(np.load(x), 2 * np.arange(8))  # named by --out: written back
    capsys.readouterr()
    assert main(["run", str(ptx), "-a", str(x), "-a", "null", "-a", "8", "--out", "nope.npy"]) == 1
    assert "--out nope.npy: not an --arg .npy file or a parameter of scale (x, y, n)" in capsys.readouterr().err


def test_cli_messages_name_flags(tmp_path, capsys):
    assert cli_words("use device='emu' or rerun with device='emu', sanitize=True; num_sms too") == (
        "use --device emu or rerun with --device emu, --sanitize; --sms too")
    ptx = tmp_path / "scale.ptx"
    ptx.write_text(SCALE.replace("{\n", ".reqntid 32\n{\n", 1))
    assert main(["run", str(ptx), "--block", "8", "-a", "null", "-a", "null", "-a", "0"]) == 1
    err = capsys.readouterr().err
    assert "scale.ptx:5: scale declares .reqntid 32" in err and "Traceback" not in err
