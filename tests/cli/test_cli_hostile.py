"""Every subcommand given hostile arguments: a clear error and exit 1, never a traceback; outputs are
checked before the work, written atomically, and reported under the name written."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from ptxforge.cli.main import main

VADD = """.version 8.5
.target sm_90
.address_size 64
.visible .entry vadd(.param .u64 a, .param .u32 n)
{
.reg .b32 %r<4>;
.reg .b64 %rd<4>;
.reg .pred %p<2>;
ld.param.u64 %rd1, [a];
ld.param.u32 %r1, [n];
mov.u32 %r2, %tid.x;
setp.ge.u32 %p1, %r2, %r1;
@%p1 bra DONE;
cvta.to.global.u64 %rd1, %rd1;
mul.wide.u32 %rd2, %r2, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r2;
DONE:
ret;
}
"""
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "block_reduce.py"


def run(args, capsys):
    rc = main([str(a) for a in args])  # an exception escaping here is the traceback a user would see
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return rc, out, err


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vadd.ptx").write_text(VADD)
    head = ".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n"
    (tmp_path / "deep.ptx").write_text(head + "{" * 3000 + "}" * 3000 + "\nret;\n}\n")
    (tmp_path / "bang.ptx").write_text(head + ".reg .pred %p;\nnot.pred %p, " + "!" * 5000 + "%p;\nret;\n}\n")
    rng = random.Random(7)
    (tmp_path / "noise.ptx").write_bytes(bytes(rng.getrandbits(8) for _ in range(20000)))
    (tmp_path / "folder").mkdir()
    locked = tmp_path / "locked.ptx"
    locked.write_text(VADD)
    locked.chmod(0)
    # root reads any file regardless of its mode; /proc/self/mem refuses a plain read for everyone
    unreadable = locked if not os.access(locked, os.R_OK) else Path("/proc/self/mem")
    return tmp_path, unreadable


PTX_COMMANDS = [["fmt"], ["check"], ["retarget", "--arch", "sm_80"], ["stats"], ["sass"],
                ["run", "-a", "1", "-a", "2"]]


@pytest.mark.parametrize("cmd", PTX_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("name", ["deep.ptx", "bang.ptx", "noise.ptx", "missing.ptx", "folder", "UNREADABLE"])
def test_hostile_files_for_every_ptx_subcommand(cmd, name, files, capsys):
    tmp, unreadable = files
    path = unreadable if name == "UNREADABLE" else tmp / name
    rc, _, err = run([cmd[0], path, *cmd[1:]], capsys)
    assert rc == 1 and "error" in err
    if name in ("deep.ptx", "bang.ptx") and cmd[0] != "sass":
        assert "nesting deeper than 100 levels" in err


@pytest.mark.parametrize("args,words", [
    (["emit", EXAMPLE, "--arch", "sm_999"], "--arch: unknown target 'sm_999'"),
    (["emit", EXAMPLE, "--arch", "sm_90a", "-o", "nodir/k.ptx"], "the folder nodir does not exist"),
    (["emit", "nofile.py"], "no such file"),
    (["pipeline", "simulate", "--svg", "nodir/t.svg"], "--svg nodir/t.svg: the folder nodir does not exist"),
    (["pipeline", "simulate", "--png", "nodir/t.png"], "--png nodir/t.png: the folder nodir does not exist"),
    (["pipeline", "simulate", "--svg", "folder"], "is a directory"),
    (["pipeline", "simulate", "--pp", "-3"], "error"),
    (["pipeline", "simulate", "--costs", "1e400,1,1"], "cost F must be a finite number >= 0, got inf"),
    (["check", "vadd.ptx", "--arch", "bogus"], "--arch: not a PTX target: 'bogus'"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", str(10**23)], "does not fit .u32"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", "16", "--block", "2000"], "the limit is 1024"),
    (["demo", "--file", "missing.ptx"], "missing.ptx: no such file"),
    (["fmt", "vadd.ptx", "-o", "nodir/out.ptx"], "the folder nodir does not exist"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", "16", "--grid", str(2**40)], "below 2^32"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", "16", "--sms", "-1"], "--sms"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", "16", "--sms", "0"], "--sms"),
    (["run", "vadd.ptx", "-a", f"a.npy=zeros:{10**14}:uint32", "-a", "16"], "more than this machine's"),
    (["run", "vadd.ptx", "-a", "a.npy=zeros:-5:uint32", "-a", "16"], "-5 elements"),
    (["run", "vadd.ptx", "-a", "nodir/a.npy=zeros:16:uint32", "-a", "16"], "the folder nodir does not exist"),
    (["run", "vadd.ptx", "-a", "folder.npy=zeros:16:uint32", "-a", "16"], None),
])
def test_hostile_arguments(args, words, files, capsys):
    tmp, _ = files
    if words is None:  # an existing folder where the array would be saved
        (tmp / "folder.npy").mkdir()
        words = "folder.npy: is a directory"
    rc, _, err = run(args, capsys)
    assert rc == 1 and words in err, err


def test_report_folder_is_checked_before_the_kernel_runs(files, capsys):
    tmp, _ = files
    rc, out, err = run(["run", "vadd.ptx", "-a", "a.npy=zeros:16:uint32", "-a", "16", "--block", "16",
                        "--report", "nodir/r.json"], capsys)
    assert rc == 1 and "--report nodir/r.json: the folder nodir does not exist" in err
    assert "thread-instructions" not in err and not (tmp / "a.npy").exists()  # nothing ran


def test_run_reports_the_path_it_wrote(files, capsys):
    tmp, _ = files
    (tmp / "out").mkdir()  # an existing folder named like the argument: numpy writes out.npy beside it
    rc, _, err = run(["run", "vadd.ptx", "-a", "out=zeros:16:uint32", "-a", "16", "--block", "16",
                      "--report", "r.json"], capsys)
    assert rc == 0 and "wrote out.npy" in err
    assert np.load(tmp / "out.npy").tolist() == list(range(16))
    assert (tmp / "r.json").read_text().startswith("{")
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".")) == []  # no temp files left


def test_fmt_output_is_atomic(files, capsys, monkeypatch):
    tmp, _ = files
    target = tmp / "kept.ptx"
    target.write_text("old contents\n")

    def full_disk(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    rc, _, err = run(["fmt", "vadd.ptx", "-o", target], capsys)
    monkeypatch.undo()
    assert rc == 1 and "No space left on device" in err
    assert target.read_text() == "old contents\n"  # the old file survives a failed write
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []
    rc, _, _ = run(["fmt", tmp / "vadd.ptx", "-o", target], capsys)
    assert rc == 0 and ".version 8.5" in target.read_text()


def test_pictures_are_written_where_asked(files, capsys):
    tmp, _ = files
    rc, out, _ = run(["pipeline", "simulate", "--svg", "t.svg"], capsys)
    assert rc == 0 and "wrote t.svg" in out and (tmp / "t.svg").read_text().lstrip().startswith("<")
