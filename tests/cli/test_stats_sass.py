"""`ptxforge stats` and `ptxforge sass` on corpus PTX, with real ptxas (and cuobjdump for sass)."""

import shutil
from pathlib import Path

import pytest

from ptxforge.cli.main import UserError, build_parser, run_command
from ptxforge.toolchain import ToolNotFound, find_tool

CUDA = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"
pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def run_cli(argv, capsys):
    """The subcommand's exit status and output; its UserErrors raised, not reported."""
    rc = run_command(build_parser().parse_args(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def row(out: str, name: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.split() and ln.split()[0] == name)
    return line.split()


def test_stats_uses_maxntid_and_reports_occupancy(capsys):
    rc, out, err = run_cli(["stats", str(CUDA / "warp_specialized_sm90a.sm_90a.O3.ptx")], capsys)
    assert rc == 0 and err == ""
    assert out.splitlines()[0].endswith(": sm_90a")
    # 168 regs -> 5376/warp; 16384 // 5376 = 3 warps per sub-partition = 12 warps = one 384-thread block.
    assert row(out, "warp_specialized_pipeline") == [
        "warp_specialized_pipeline", "168", "1", "0", "0/0", "8256", "384", "(.maxntid)", "1", "19%",
        "registers"]


def test_stats_block_override_and_default(capsys):
    path = str(CUDA / "matmul_tiled.sm_80.O3.ptx")
    rc, out, _ = run_cli(["stats", path], capsys)
    # default 256 threads; 44 regs -> 1536/warp -> 10 per sub-partition -> 40 warps -> 5 blocks of 8 warps.
    assert rc == 0 and row(out, "matmul_tiled_4x1_f64acc")[6:] == ["256", "5", "62%", "registers"]
    rc, out, _ = run_cli(["stats", path, "--block", "1024"], capsys)
    assert rc == 0 and row(out, "matmul_tiled_4x1_f64acc")[6:] == ["1024", "1", "50%", "registers"]
    with pytest.raises(UserError, match="--block 0"):
        run_cli(["stats", path, "--block", "0"], capsys)


def test_stats_lists_spilling_device_functions(capsys):
    rc, out, _ = run_cli(["stats", str(CUDA / "recursion.sm_80.O3.ptx")], capsys)
    assert rc == 0
    assert row(out, "_Z3fibj")[:5] == ["_Z3fibj", "(.func)", "-", "-", "24"]
    assert row(out, "_Z3fibj")[5] == "20/20"


def test_stats_arch_without_occupancy_figures(capsys):
    rc, out, _ = run_cli(["stats", str(CUDA / "tcgen05_sm100a.sm_100a.O3.ptx")], capsys)
    assert rc == 0 and "no figures for sm_100a" in out and "tmem_store_load" in out


def test_stats_ptxas_error_is_reported_not_raised(capsys, tmp_path):
    wgmma = CUDA / "wgmma_sm90a.sm_90a.O3.ptx"
    rc, out, err = run_cli(["stats", str(wgmma), "--arch", "sm_80"], capsys)
    assert rc == 1 and out == ""
    assert f"{wgmma}" in err and "error: ptxas:" in err
    with pytest.raises(UserError, match="no such file"):
        run_cli(["stats", str(tmp_path / "missing.ptx")], capsys)


def have_nvdisasm() -> bool:
    from ptxforge.runtime.sass import nvdisasm_dir

    try:
        find_tool("cuobjdump")
        nvdisasm_dir()
    except ToolNotFound:
        return False
    return True


needs_disasm = pytest.mark.skipif(not have_nvdisasm(), reason="cuobjdump/nvdisasm not found "
                                  "(pip install nvidia-cuda-nvdisasm, or set NVDISASM_PATH)")


@needs_disasm
def test_sass_of_one_kernel(capsys):
    rc, out, err = run_cli(["sass", str(CUDA / "wgmma_sm90a.sm_90a.O3.ptx"), "--kernel",
                            "wgmma_m64n8k16_f16"], capsys)
    assert rc == 0 and err == ""
    assert "GMMA.64x8x16.F32" in out and "EXIT" in out and "/* 0x" not in out
    assert not out.startswith("//")


@needs_disasm
def test_sass_of_all_functions_and_encodings(capsys):
    path = str(CUDA / "warp_specialized_sm90a.sm_90a.O3.ptx")
    rc, out, _ = run_cli(["sass", path], capsys)
    assert rc == 0 and out.startswith("// warp_specialized_pipeline\n")
    assert "USETMAXREG" in out  # the setmaxnreg.inc/dec of the warp-specialized kernel
    rc, raw, _ = run_cli(["sass", path, "--encodings"], capsys)
    assert rc == 0 and "/* 0x" in raw and len(raw) > len(out)


@needs_disasm
def test_sass_errors(capsys):
    with pytest.raises(UserError, match="no function 'nope' in the cubin; it has: recursive_minmax"):
        run_cli(["sass", str(CUDA / "recursion.sm_80.O3.ptx"), "--kernel", "nope"], capsys)
    rc, _, err = run_cli(["sass", str(CUDA / "wgmma_sm90a.sm_90a.O3.ptx"), "--arch", "sm_80"], capsys)
    assert rc == 1 and "error: ptxas:" in err
