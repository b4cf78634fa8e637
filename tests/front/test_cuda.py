"""CUDA C++ through NVRTC onto the emulator: C++ names, pointee checks, compile errors, the cache, reports."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.front import nvrtc
from ptxforge.toolchain import ToolNotFound

try:
    NVRTC = nvrtc.find_nvrtc()
except ToolNotFound as e:  # decided up front: no NVRTC library anywhere (the tools extra not installed)
    NVRTC = None
    WHY = str(e)
pytestmark = pytest.mark.skipif(NVRTC is None, reason="no NVRTC library (pip install 'ptxforge[tools]')")

DATA = Path(__file__).parent / "data"
SCALE = """template <typename T> __global__ void scale(T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void copy(float* dst, const double* src) { dst[threadIdx.x] = (float)src[threadIdx.x]; }
"""


def test_templated_kernel_by_its_cpp_name_runs_on_the_emulator():
    mod = pf.compile_cuda(SCALE, arch="sm_90a", name_expressions=("scale<float>", "scale<double>"))
    assert mod.lowered["scale<float>"] == "_Z5scaleIfEvPT_S0_i"
    k = mod.kernel("scale<float>")
    assert k.name == "scale<float>" and k.cpp_signature == "scale<float>(float*, float, int)"
    x = np.arange(40, dtype=np.float32)
    res = k((2,), (32,), (x, np.float32(3), np.int32(40)), device="emu")  # CuPy's RawKernel spelling
    np.testing.assert_array_equal(x, np.arange(40, dtype=np.float32) * 3)
    assert res.kernel == "scale<float>"
    # the same kernel by its demangled signature, its mangled name; the other instantiation too
    assert mod.kernel("scale<float>(float*, float, int)").function is k.function
    assert mod.kernel("_Z5scaleIfEvPT_S0_i").function is k.function
    y = np.ones(5)
    mod.get_function("scale<double>")((1,), (8,), (y, 2.0, np.int32(5)), device="emu")
    np.testing.assert_array_equal(y, 2.0)


def test_pointee_types_from_the_cpp_signature_refuse_the_wrong_array():
    mod = pf.compile_cuda(SCALE, name_expressions=("scale<float>",))
    with pytest.raises(pf.LaunchError, match=r"float\* in the C\+\+ signature, which takes float32 elements; "
                                             r"got a numpy array of float64"):
        mod.kernel("scale<float>")((1,), (32,), (np.ones(4), np.float32(1), np.int32(4)), device="emu")
    copy = mod.kernel("copy")  # extern "C": the types come from a decltype probe
    assert copy.cpp_signature == "copy(float*, double const*)"
    with pytest.raises(pf.LaunchError, match=r"double const\* in the C\+\+ signature, which takes float64"):
        copy((1,), (4,), (np.zeros(4, np.float32), np.zeros(4, np.float32)), device="emu")
    dst = np.zeros(4, np.float32)
    copy((1,), (4,), (dst, np.arange(4.0)), device="emu")
    np.testing.assert_array_equal(dst, [0, 1, 2, 3])


def test_unknown_kernel_lists_the_cpp_names_and_says_how_to_instantiate():
    mod = pf.compile_cuda(SCALE, name_expressions=("scale<float>",))
    with pytest.raises(KeyError, match=r"copy\(float\*, double const\*\), scale<float>\(float\*, float, int\).*"
                                       r"name_expressions=\('scale<int>',\)"):
        mod.kernel("scale<int>")


def test_compile_errors_name_file_line_column_with_the_source_line():
    src = "__global__ void f(int* x) {\n    x[0] = y;\n    x[1] = z;\n}\n"
    with pytest.raises(pf.CudaCompileError) as e:
        pf.compile_cuda(src, filename="bad.cu")
    text = e.value.format()
    assert text.splitlines()[:3] == ['bad.cu:2:12: error: identifier "y" is undefined', "      x[0] = y;",
                                     "             ^"]
    assert 'bad.cu:3:12: error: identifier "z" is undefined' in text and "2 errors" in text


def test_bad_arch_is_refused_by_name():
    with pytest.raises(ValueError, match="arch 'sm90': expected a target such as sm_80"):
        pf.compile_cuda(SCALE, arch="sm90")


def test_arch_chooses_the_target_and_results_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path))
    calls = []
    real = nvrtc.compile_program
    monkeypatch.setattr(nvrtc, "compile_program", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = pf.compile_cuda(SCALE, arch="sm_80", name_expressions=("scale<float>",))
    assert a.ir.target.arch == "sm_80" and len(calls) == 2  # the source, then the extern "C" probe
    b = pf.compile_cuda(SCALE, arch="sm_80", name_expressions=("scale<float>",))
    assert b.ptx == a.ptx and len(calls) == 2  # from the cache
    pf.compile_cuda(SCALE + "\n// changed\n", arch="sm_80", name_expressions=("scale<float>",))
    assert len(calls) == 4


def test_includes_from_the_files_folder_and_from_headers(tmp_path):
    (tmp_path / "common.cuh").write_text("#define FACTOR 5\n")
    (tmp_path / "k.cu").write_text('#include "common.cuh"\n#include "given.h"\n'
                                   'extern "C" __global__ void k(int* x) { x[0] = FACTOR + GIVEN; }\n')
    mod = pf.compile_cuda_file(tmp_path / "k.cu", headers={"given.h": "#define GIVEN 2\n"})
    x = np.zeros(1, np.int32)
    mod.kernel("k")((1,), (1,), (x,), device="emu")
    assert x[0] == 7


def test_planted_race_in_a_template_reports_cu_lines_demangled_names_and_both_sides():
    mod = pf.compile_cuda_file(DATA / "block_sum_race.cu", name_expressions=("block_sum<float, 64>",))
    x, out = np.ones(128, np.float32), np.zeros(2, np.float32)
    with pytest.raises(pf.SanitizerError) as e:
        mod.kernel("block_sum<float, 64>")((2,), (64,), (x, out, np.int32(128)), device="emu",
                                           options={"sanitize": True})
    text = str(e.value)
    assert "in kernel block_sum<float, 64>(float const*, float*, int)" in text
    assert "__shared__ block_sum<float, 64>(float const*, float*, int)::buf" in text
    race = next(r for r in e.value.reports if r.kind == "race")
    assert race.source.endswith("block_sum_race.cu:10") and race.other["source"].endswith("block_sum_race.cu:10")
    first = str(race).splitlines()
    assert any(line.startswith("=========     source ") and line.endswith("block_sum_race.cu:10") for line in first)
    at = next(i for i, line in enumerate(first) if "conflicts with a write" in line)  # the other side, its source
    assert "its source " in first[at + 1] and first[at + 1].endswith("block_sum_race.cu:10")
    assert f"kernel launched from {__file__}:" in text  # the Python launch site


def test_cached_ptx_names_the_file_where_it_is_now(tmp_path, monkeypatch):
    # the same source under the same relative name in two folders: each report names its own file
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path / "cache"))
    text = (DATA / "block_sum_race.cu").read_text()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "k.cu").write_text(text)
        monkeypatch.chdir(tmp_path / folder)
        mod = pf.compile_cuda_file("k.cu", name_expressions=("block_sum<float, 64>",))
        assert f'"{tmp_path / folder / "k.cu"}"' in mod.ptx
