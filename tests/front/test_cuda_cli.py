"""The CLI takes .cu wherever it takes .ptx: run (with --arch, --sanitize, --tool, --print-limit, --sarif),
check, stats, sass, emit; compile errors as FILE:LINE:COL."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ptxforge.cli.main import main
from ptxforge.front import nvrtc
from ptxforge.toolchain import ToolNotFound, find_tool

try:
    nvrtc.find_nvrtc()
    HAVE_NVRTC = True
except ToolNotFound:  # decided up front: no NVRTC library anywhere
    HAVE_NVRTC = False
pytestmark = pytest.mark.skipif(not HAVE_NVRTC, reason="no NVRTC library (pip install 'ptxforge[tools]')")
try:
    find_tool("ptxas")
    HAVE_PTXAS = True
except ToolNotFound:
    HAVE_PTXAS = False

RACE = Path(__file__).parent / "data" / "block_sum_race.cu"
KERNEL = "block_sum<float, 64>"


def run(args, capsys):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def work(tmp_path, monkeypatch):
    shutil.copy(RACE, tmp_path / "k.cu")
    np.save(tmp_path / "x.npy", np.ones(128, np.float32))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch_args(*extra):
    return ["run", "k.cu", "--kernel", KERNEL, "--grid", "2", "--block", "64", "-a", "x.npy",
            "-a", "out.npy=zeros:2:float32", "-a", "128", *extra]


def test_run_cu_sanitize_reports_cu_line_demangled_name_and_both_sides(work, capsys):
    rc, _, err = run(launch_args("--arch", "sm_80", "--sanitize"), capsys)
    assert rc == 1
    assert "in kernel block_sum<float, 64>(float const*, float*, int)" in err
    assert "at k.sm_80.ptx:" in err  # compiled for --arch
    lines = err.splitlines()
    assert any(ln.startswith("=========     source ") and ln.endswith("k.cu:10") for ln in lines)
    at = next(i for i, ln in enumerate(lines) if "conflicts with a write by thread" in ln)  # the other side
    assert "its source " in lines[at + 1] and lines[at + 1].endswith("k.cu:10")
    assert "Traceback" not in err


def test_tool_print_limit_and_sarif(work, capsys):
    rc, _, err = run(launch_args("--tool", "racecheck", "--print-limit", "2", "--sarif", "r.sarif", "--report",
                                 "r.json"), capsys)
    assert rc == 1 and err.count("========= Race") == 2 and "at sites past the report cap" in err
    sarif = json.loads((work / "r.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["race", "race"]
    where = results[0]["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "k.cu" and where["region"]["startLine"] == 10
    assert results[0]["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 10
    assert len(json.loads((work / "r.json").read_text())["reports"]) == 2
    # memcheck alone does not look for races: the same launch is clean, and both files say so
    rc, _, err = run(launch_args("--tool", "memcheck", "--sarif", "r.sarif"), capsys)
    assert rc == 0, err
    assert json.loads((work / "r.sarif").read_text())["runs"][0]["results"] == []


def test_bad_print_limit_is_a_user_error(work, capsys):
    rc, _, err = run(launch_args("--print-limit", "0"), capsys)
    assert rc == 1 and "--print-limit 0: must be at least 1" in err


def test_compile_error_is_file_line_col_and_exit_1(work, capsys):
    (work / "bad.cu").write_text('extern "C" __global__ void k(int* x) {\n  x[0] = nope;\n}\n')
    for cmd in (["run", "bad.cu"], ["check", "bad.cu"], ["emit", "bad.cu"]):
        rc, _, err = run(cmd, capsys)
        assert rc == 1 and err.startswith('bad.cu:2:10: error: identifier "nope" is undefined'), (cmd, err)
        assert "Traceback" not in err


def test_arch_on_a_ptx_file_is_refused(work, capsys):
    (work / "k.ptx").write_text(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry e() { ret; }\n")
    rc, _, err = run(["run", "k.ptx", "--arch", "sm_90a"], capsys)
    assert rc == 1 and "chooses the target a .cu file is compiled for" in err


def test_emit_and_check_take_cu(work, capsys):
    rc, out, _ = run(["emit", "k.cu", "--arch", "sm_80"], capsys)
    assert rc == 0 and ".target sm_80" in out  # no template instantiated: no kernel, still a module
    (work / "c.cu").write_text('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    rc, out, err = run(["check", "c.cu", "--arch", "sm_90a"], capsys)
    assert rc == 0 and "c.cu: ok (1 kernels" in out and ".target sm_90a" in out, err


@pytest.mark.skipif(not HAVE_PTXAS, reason="no ptxas (pip install 'ptxforge[tools]')")
def test_stats_and_sass_take_cu(work, capsys):
    (work / "c.cu").write_text('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    rc, out, _ = run(["stats", "c.cu", "--arch", "sm_80"], capsys)
    assert rc == 0 and out.startswith("c.cu: sm_80") and any(ln.split()[:1] == ["k"] for ln in out.splitlines())
    try:
        find_tool("cuobjdump")
    except ToolNotFound:
        return
    rc, out, _ = run(["sass", "c.cu", "--arch", "sm_80"], capsys)
    assert rc == 0 and out.startswith("// k") and "STG.E" in out  # the store of x[threadIdx.x]


def test_missing_nvrtc_is_a_user_error_naming_where_it_looked(work, capsys, monkeypatch):
    monkeypatch.setenv("PTXFORGE_NVRTC", str(work / "no-such-libnvrtc.so"))
    rc, _, err = run(["check", "k.cu"], capsys)
    assert rc == 1 and "Traceback" not in err
    assert f"k.cu: libnvrtc: the path given, {work / 'no-such-libnvrtc.so'}, is not the NVRTC library" in err
