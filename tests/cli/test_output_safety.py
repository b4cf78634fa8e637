"""No output destroys an input or a special file (ptxforge.outputs): every writer of the CLI refuses a target
that is one of the command's inputs, writes character devices and FIFOs in place, keeps the atomic rename for
regular files (through a link: the file, not the link) and checks the output's folder before any work."""

from __future__ import annotations

import os
import select
import socket
import stat
import time
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
DSL = """from ptxforge.dsl import kernel, ptr, u32, st, tid

@kernel(arch="sm_80")
def fill(out: ptr(u32)):
    st(out + tid.x * 4, tid.x)
"""
ROOT = os.geteuid() == 0  # making device nodes needs root: decided up front
needs_root = pytest.mark.skipif(not ROOT, reason="mknod of a character device needs root")


def run(args, capsys):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return rc, out, err


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vadd.ptx").write_text(VADD)
    np.save(tmp_path / "a.npy", np.arange(8, dtype=np.uint32))
    (tmp_path / "fill.py").write_text(DSL)
    return tmp_path


def refused(rc: int, err: str, name: str) -> bool:
    return rc == 1 and "same file as" in err and name in err


def test_run_report_over_the_ptx_file_is_refused(here, capsys):
    rc, _, err = run(["run", "vadd.ptx", "--arg", "a.npy", "--arg", "8", "--report", "vadd.ptx"], capsys)
    assert refused(rc, err, "the PTX file vadd.ptx"), err
    assert (here / "vadd.ptx").read_text() == VADD


def test_run_report_over_an_input_array_or_another_output_is_refused(here, capsys):
    before = (here / "a.npy").read_bytes()
    rc, _, err = run(["run", "vadd.ptx", "--arg", "a.npy", "--arg", "8", "--report", "a.npy"], capsys)
    assert refused(rc, err, "a.npy") and (here / "a.npy").read_bytes() == before, err
    rc, _, err = run(["run", "vadd.ptx", "--arg", "o.npy=zeros:8:uint32", "--arg", "8", "--report", "o.npy"], capsys)
    assert refused(rc, err, "o.npy") and not (here / "o.npy").exists(), err


def test_run_new_array_over_its_template_is_refused(here, capsys):
    before = (here / "a.npy").read_bytes()
    rc, _, err = run(["run", "vadd.ptx", "--arg", "a.npy=empty-like:a.npy", "--arg", "8"], capsys)
    assert refused(rc, err, "a.npy"), err
    assert (here / "a.npy").read_bytes() == before


def test_run_out_still_writes_an_input_array_back_in_place(here, capsys):
    rc, _, err = run(["run", "vadd.ptx", "--arg", "a.npy", "--arg", "8", "--out", "a.npy"], capsys)
    assert rc == 0, err
    assert np.load(here / "a.npy").tolist() == list(range(8))


def test_plan_png_over_its_routing_file_is_refused(here, capsys):
    ids = np.random.default_rng(0).integers(0, 256, size=(64, 8)).astype(np.int64)
    np.save(here / "r.npy", ids)
    before = (here / "r.npy").read_bytes()
    rc, out, err = run(["plan", "--routing", "r.npy", "--png", "r.npy"], capsys)
    assert refused(rc, err, "--routing r.npy"), err
    assert (here / "r.npy").read_bytes() == before and out == ""


@pytest.mark.parametrize("command", [["fmt", "vadd.ptx"], ["retarget", "vadd.ptx", "--arch", "sm_90"],
                                     ["sass", "vadd.ptx"]])
def test_o_over_the_input_is_refused(here, capsys, command):
    rc, _, err = run([*command, "-o", "vadd.ptx"], capsys)
    assert refused(rc, err, "vadd.ptx"), err
    assert (here / "vadd.ptx").read_text() == VADD


def test_emit_o_over_its_python_file_is_refused(here, capsys):
    rc, _, err = run(["emit", "fill.py", "-o", "fill.py"], capsys)
    assert refused(rc, err, "the Python file fill.py"), err
    assert (here / "fill.py").read_text() == DSL


def test_a_hard_link_or_symbolic_link_to_the_input_is_the_input(here, capsys):
    os.link(here / "vadd.ptx", here / "hard.ptx")
    os.symlink(here / "vadd.ptx", here / "soft.ptx")
    for target in ("hard.ptx", "soft.ptx"):
        rc, _, err = run(["fmt", "vadd.ptx", "-o", target], capsys)
        assert refused(rc, err, "vadd.ptx"), err
    assert (here / "vadd.ptx").read_text() == VADD and (here / "soft.ptx").is_symlink()


def test_two_outputs_of_one_command_may_not_be_one_file(here, capsys):
    rc, _, err = run(["pipeline", "simulate", "--pp", "4", "--chunks", "8", "--svg", "t.img", "--png", "t.img"],
                     capsys)
    assert refused(rc, err, "--svg t.img"), err
    assert not (here / "t.img").exists()


def test_output_through_a_symbolic_link_replaces_the_file_and_keeps_the_link(here, capsys):
    (here / "real.ptx").write_text("old\n")
    os.symlink("real.ptx", here / "link.ptx")
    rc, _, err = run(["fmt", "vadd.ptx", "-o", "link.ptx"], capsys)
    assert rc == 0, err
    assert (here / "link.ptx").is_symlink() and ".entry vadd" in (here / "real.ptx").read_text()


def _fifo_reader(path: Path) -> int:
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader waits, so the writer's open does not block


def _read_all(fd: int, timeout_s: float = 10.0) -> bytes:
    chunks, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_a_fifo_is_written_in_place(here, capsys):
    fd = _fifo_reader(here / "pipe")
    rc, _, err = run(["fmt", "vadd.ptx", "-o", "pipe"], capsys)
    assert rc == 0, err
    assert stat.S_ISFIFO(os.lstat(here / "pipe").st_mode), "the FIFO was replaced by a regular file"
    assert b".entry vadd" in _read_all(fd)


@needs_root
def test_a_character_device_is_written_in_place(here, capsys):
    os.mknod(here / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    rc, _, err = run(["fmt", "vadd.ptx", "-o", "null"], capsys)
    assert rc == 0, err
    assert stat.S_ISCHR(os.lstat(here / "null").st_mode), "the device node was replaced by a regular file"


@needs_root
def test_a_full_device_is_a_clear_error_and_stays_a_device(here, capsys):
    os.mknod(here / "full", stat.S_IFCHR | 0o666, os.makedev(1, 7))  # a /dev/full of our own
    rc, _, err = run(["fmt", "vadd.ptx", "-o", "full"], capsys)
    assert rc == 1 and "No space left on device" in err and "full" in err, err
    assert stat.S_ISCHR(os.lstat(here / "full").st_mode)


def test_a_socket_is_refused(here, capsys):
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(here / "sock"))
        rc, _, err = run(["fmt", "vadd.ptx", "-o", "sock"], capsys)
    assert rc == 1 and "is a socket" in err, err
    assert stat.S_ISSOCK(os.lstat(here / "sock").st_mode)


def test_the_output_folder_is_checked_before_any_work(here, capsys, monkeypatch):
    import ptxforge.cli.demo as demo
    import ptxforge.cli.fmt as fmt
    import ptxforge.cli.plan as plan

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output was checked")
    monkeypatch.setattr(fmt, "load_module", no_work)
    monkeypatch.setattr(plan, "_load", no_work)
    monkeypatch.setattr(demo, "_front_end", no_work)
    for command in (["fmt", "vadd.ptx", "-o", "nowhere/x.ptx"], ["plan", "--png", "nowhere/x.png"],
                    ["demo", "--sm-map", "nowhere/x.png"]):
        rc, _, err = run(command, capsys)
        assert rc == 1 and "nowhere" in err and "does not exist" in err, (command, err)


def test_a_regular_output_keeps_its_mode_and_leaves_no_temporary_file(here, capsys):
    (here / "out.ptx").write_text("old\n")
    (here / "out.ptx").chmod(0o640)
    rc, _, err = run(["fmt", "vadd.ptx", "-o", "out.ptx"], capsys)
    assert rc == 0, err
    assert stat.S_IMODE(os.stat(here / "out.ptx").st_mode) == 0o640
    assert sorted(p.name for p in here.iterdir()) == ["a.npy", "fill.py", "out.ptx", "vadd.ptx"]
