"""resource_usage: ptxas -v parsed per function, checked against ptxas's own output on corpus PTX."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import ptxforge
from ptxforge.runtime.resources import KernelResources, PtxasError, resource_usage

CUDA = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"
pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def ptxas_verbose(path: Path, arch: str, tmp_path: Path) -> str:
    proc = subprocess.run(["ptxas", "-v", f"-arch={arch}", str(path), "-o", str(tmp_path / "o.cubin")],
                          capture_output=True, text=True, check=True)
    return proc.stderr


@pytest.mark.parametrize("name,arch", [("matmul_tiled.sm_80.O3.ptx", "sm_80"),
                                       ("softmax_layernorm.sm_90a.O3.ptx", "sm_90a"),
                                       ("launch_config.sm_90a.O3.ptx", "sm_90a")])
def test_registers_and_smem_match_what_ptxas_printed(name, arch, tmp_path):
    """Each `Compiling entry function 'K'` ... `Used N registers[, ...], M bytes smem` pair in ptxas's own
    stderr must match the KernelResources of K."""
    text = ptxas_verbose(CUDA / name, arch, tmp_path)
    expected = {}
    for m in re.finditer(r"Compiling entry function '([^']+)'.*?Used (\d+) registers([^\n]*)", text, re.S):
        smem = re.search(r"(\d+) bytes smem", m.group(3))
        expected[m.group(1)] = (int(m.group(2)), int(smem.group(1)) if smem else 0)
    assert len(expected) >= 2
    usage = resource_usage((CUDA / name).read_text(), arch)
    got = {k: (r.registers, r.shared) for k, r in usage.items() if r.entry}
    assert got == expected


def test_warp_specialized_sm90a_kernel_assembles_and_reports():
    usage = resource_usage((CUDA / "warp_specialized_sm90a.sm_90a.O3.ptx").read_text())  # arch from .target
    r = usage["warp_specialized_pipeline"]
    assert r.entry and r.registers == 168 and r.barriers == 1 and r.shared == 8256
    assert not r.spills and r.stack_frame == 0


def test_cmem_barriers_and_device_function_spills():
    usage = resource_usage((CUDA / "recursion.sm_80.O3.ptx").read_text(), "sm_80")
    k = usage["recursive_gcd"]
    assert k.entry and k.registers == 24 and k.barriers == 0 and k.cmem == {0: 380}
    fib = usage["_Z3fibj"]  # a recursive device function: ptxas prints properties but no `Used` line
    assert not fib.entry and fib.registers is None
    assert (fib.stack_frame, fib.spill_stores, fib.spill_loads) == (24, 20, 20)


def test_printf_kernel_stack():
    usage = resource_usage((CUDA / "printf_kernel.sm_80.O3.ptx").read_text(), "sm_80")
    assert usage["printf_basic"].stack_frame == 40 and usage["printf_basic"].cumulative_stack == 40


def pressure_ptx(n: int = 48) -> str:
    """n volatile loads, then n volatile stores in reverse order: all n values are live at once, so
    under .maxnreg 32 ptxas must spill."""
    body = [f"  ld.volatile.global.f32 %f{i}, [%rd1+{4 * i}];" for i in range(n)]
    body += [f"  st.volatile.global.f32 [%rd1+{4 * (n + i)}], %f{n - 1 - i};" for i in range(n)]
    return "\n".join([".version 8.0", ".target sm_80", ".address_size 64", "",
                      ".visible .entry pressure(.param .u64 p)", ".maxnreg 32", "{",
                      f"  .reg .f32 %f<{n}>;", "  .reg .b64 %rd<2>;", "  ld.param.u64 %rd0, [p];",
                      "  cvta.to.global.u64 %rd1, %rd0;", *body, "  ret;", "}", ""])


def test_register_pressure_under_maxnreg_spills():
    r = resource_usage(pressure_ptx(), "sm_80")["pressure"]
    assert r.registers <= 32
    assert r.spills and r.spill_stores > 0 and r.spill_loads > 0 and r.stack_frame >= r.spill_stores


def test_module_input_gives_same_report():
    text = (CUDA / "matmul_tiled.sm_80.O3.ptx").read_text()
    assert resource_usage(ptxforge.parse(text), "sm_80") == resource_usage(text, "sm_80")


def test_ptxas_errors_become_diagnostics_at_ptx_lines():
    bad = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  bogus.op %r1;\n  ret;\n}\n"
    with pytest.raises(PtxasError) as e:
        resource_usage(bad, "sm_80", filename="bad.ptx")
    d = e.value.diagnostics[0]
    assert (d.file, d.line, d.severity) == ("bad.ptx", 6, "error")
    assert d.message.startswith("ptxas: ") and "bogus" in e.value.format()


def test_arch_the_code_cannot_target_is_an_error():
    wgmma = (CUDA / "wgmma_sm90a.sm_90a.O3.ptx").read_text()
    with pytest.raises(PtxasError, match="SM version specified by .target is higher"):
        resource_usage(wgmma, "sm_80")


def test_no_target_and_no_arch():
    with pytest.raises(ValueError, match="pass arch="):
        resource_usage(".version 8.0\n.address_size 64\n")


def test_kernel_resources_spills_property():
    assert not KernelResources("k", True).spills
    assert KernelResources("k", True, spill_loads=4).spills
