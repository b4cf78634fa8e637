"""Environment variables: each read in one place (ptxforge.environment) and validated with a message naming
it; tools run only from absolute paths (a relative CUDA_HOME, NVDISASM_PATH or PATH entry is never the current
directory); PTXFORGE_DEVICE is honoured by `ptxforge run` too."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import ptxforge
from ptxforge import environment
from ptxforge.cli.main import main
from ptxforge.environment import EnvironmentVariableError
from ptxforge.runtime.cuda_driver import unavailable_reason
from ptxforge.toolchain import ToolNotFound, find_tool

PACKAGE = Path(ptxforge.__file__).parent
K = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n"
NO_GPU = unavailable_reason() is not None  # decided up front


def plant(path: Path) -> Path:
    """An executable at `path` that leaves a mark when run; returns the mark's path."""
    marker = path.parent / f"RAN_{path.name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\necho 9.0\n")
    path.chmod(0o755)
    return marker


def _environ_reads(tree: ast.AST) -> list[int]:
    """Lines reading os.environ / os.getenv (passing the environment on, {**os.environ}, and writing it are
    not reads)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                lines.append(node.lineno)
            if f.attr in ("get", "pop", "setdefault") and ast.unparse(f.value) == "os.environ":
                lines.append(node.lineno)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
        if isinstance(node, ast.Compare) and any(ast.unparse(c) == "os.environ" for c in node.comparators):
            lines.append(node.lineno)
    return lines


def test_every_environment_read_is_in_ptxforge_environment():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "environment.py" and path.parent == PACKAGE:
            continue
        text = path.read_text()
        if "environ" in text or "getenv" in text:  # parse only the files that could read it
            found += [f"{path.relative_to(PACKAGE)}:{line}" for line in _environ_reads(ast.parse(text))]
    assert not found, f"environment read outside ptxforge.environment: {found}"


def test_a_relative_cuda_home_is_refused_and_never_run(tmp_path, monkeypatch, capsys):
    marker = plant(tmp_path / "cuda" / "bin" / "ptxas")
    (tmp_path / "k.ptx").write_text(K)
    monkeypatch.chdir(tmp_path)
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv("CUDA_HOME", raising=False)
        monkeypatch.delenv("CUDA_PATH", raising=False)
        monkeypatch.setenv(name, "cuda")
        with pytest.raises(ToolNotFound, match=f"{name}='cuda': expected an absolute path"):
            find_tool("ptxas")
        assert main(["check", "--ptxas", "k.ptx"]) == 1
        assert f"{name}='cuda'" in capsys.readouterr().err
    assert not marker.exists(), "a ptxas under a relative CUDA_HOME ran"


def test_a_relative_nvdisasm_path_is_refused(tmp_path, monkeypatch):
    from ptxforge.runtime.sass import nvdisasm_dir

    plant(tmp_path / "tools" / "nvdisasm")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NVDISASM_PATH", "tools")
    with pytest.raises(ToolNotFound, match="NVDISASM_PATH='tools': expected an absolute path"):
        nvdisasm_dir()


def test_nvidia_smi_is_never_run_from_the_current_directory(tmp_path, monkeypatch):
    from ptxforge.runtime import gpu

    marker = plant(tmp_path / "nvidia-smi")
    monkeypatch.chdir(tmp_path)
    # an empty PATH entry means the current directory to a shell and to shutil.which
    monkeypatch.setenv("PATH", os.pathsep.join(["", "/nonexistent-ptxforge-bin"]))
    gpu.gpu_arch.cache_clear()
    try:
        gpu.gpu_arch()  # what a DSL kernel without an arch asks
    finally:
        gpu.gpu_arch.cache_clear()
    assert not marker.exists(), "./nvidia-smi ran"
    assert environment.which("nvidia-smi") is None


@pytest.mark.parametrize("name,value", [("LOCAL_WORLD_SIZE", "abc"), ("LOCAL_WORLD_SIZE", "0"),
                                        ("LOCAL_WORLD_SIZE", "-8"), ("PTXFORGE_DEVICE", "gpu"),
                                        ("PTXFORGE_DEVICE", "cuda:x"), ("PTXFORGE_GREEN_CONTEXTS", "yes"),
                                        ("PTXFORGE_CACHE_DIR", "relative/cache"), ("PTXFORGE_NATIVE_SPIN_S", "1ms"),
                                        ("PTXFORGE_NATIVE_SPIN_S", "-0.1"), ("PTXFORGE_NATIVE_SPIN_S", "5")])
def test_bad_values_are_errors_naming_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    reader = {"LOCAL_WORLD_SIZE": environment.local_world_size, "PTXFORGE_DEVICE": environment.device,
              "PTXFORGE_GREEN_CONTEXTS": environment.green_contexts, "PTXFORGE_CACHE_DIR": environment.cache_dir,
              "PTXFORGE_NATIVE_SPIN_S": environment.native_spin_s}
    with pytest.raises(EnvironmentVariableError, match=f"{name}={value!r}: .*expected"):
        reader[name]()


def test_good_values_are_read(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", " 4 ")
    monkeypatch.setenv("PTXFORGE_DEVICE", "cuda:1")
    monkeypatch.setenv("PTXFORGE_GREEN_CONTEXTS", "0")
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", "off")
    monkeypatch.setenv("PTXFORGE_NATIVE_SPIN_S", "0")
    assert environment.local_world_size() == 4 and environment.device() == "cuda:1"
    assert environment.native_spin_s() == 0.0
    assert environment.green_contexts() is False and environment.cache_dir() is None
    monkeypatch.delenv("PTXFORGE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")  # the XDG spec: a relative value is ignored
    assert environment.cache_dir() == Path.home() / ".cache" / "ptxforge"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert environment.cache_dir() == tmp_path / "ptxforge"


def test_a_relative_cache_dir_is_a_cli_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXFORGE_CACHE_DIR", "c")
    assert main(["cache", "info"]) == 1
    assert "PTXFORGE_CACHE_DIR='c': expected an absolute folder" in capsys.readouterr().err


def _buffer_with_bad_local_world_size(rank, world):  # in a forked rank: torch is optional, imported here
    import torch.distributed as dist

    import ptxforge.ep as deep_ep

    os.environ["LOCAL_WORLD_SIZE"] = "abc"
    try:
        deep_ep.Buffer(dist.group.WORLD, 0, 0)
    except Exception as e:  # noqa: BLE001 - its class and message go back to the test
        return type(e).__name__, str(e)
    return None


def test_buffer_names_a_bad_local_world_size():
    pytest.importorskip("torch")
    from ptxforge.ep.spawn import run_ranks

    [said] = run_ranks(_buffer_with_bad_local_world_size, 1, timeout_s=60)
    assert said == ("EnvironmentVariableError", "environment variable LOCAL_WORLD_SIZE='abc': expected the number "
                                                "of ranks per node, a whole number of at least 1"), said


@pytest.fixture
def vadd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.ptx").write_text(K)
    return tmp_path


def test_run_honours_ptxforge_device(vadd, monkeypatch, capsys):
    monkeypatch.setenv("PTXFORGE_DEVICE", "bogus")
    assert main(["run", "k.ptx"]) == 1
    assert "PTXFORGE_DEVICE='bogus'" in capsys.readouterr().err
    monkeypatch.setenv("PTXFORGE_DEVICE", "emu")
    assert main(["run", "k.ptx"]) == 0 and "on emu" in capsys.readouterr().err
    assert main(["run", "k.ptx", "--device", "emu"]) == 0  # the option wins over the variable


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: PTXFORGE_DEVICE=cuda would run there")
def test_run_with_ptxforge_device_cuda_on_a_machine_without_a_gpu_says_so(vadd, monkeypatch, capsys):
    monkeypatch.setenv("PTXFORGE_DEVICE", "cuda")
    assert main(["run", "k.ptx"]) == 1
    assert "device unavailable" in capsys.readouterr().err


def test_a_launch_names_a_bad_ptxforge_device(monkeypatch):
    monkeypatch.setenv("PTXFORGE_DEVICE", "gpu0")
    k = ptxforge.parse(K).kernel("k")
    with pytest.raises(EnvironmentVariableError, match="PTXFORGE_DEVICE='gpu0'"):
        k.launch((1,), (1,), [])
    assert k.launch((1,), (1,), [], device="emu").thread_instructions > 0  # a device named: the variable unread


def test_the_torch_kernel_wrappers_honour_ptxforge_device(monkeypatch):
    torch = pytest.importorskip("torch")
    from ptxforge.kernels import ops

    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    pos = torch.tensor([[1], [0]])
    monkeypatch.setenv("PTXFORGE_DEVICE", "bogus")
    with pytest.raises(EnvironmentVariableError, match="PTXFORGE_DEVICE='bogus'"):
        ops.permute(x, pos)
    monkeypatch.setenv("PTXFORGE_DEVICE", "emu")
    assert ops.permute(x, pos).tolist() == [[4, 5, 6, 7], [0, 1, 2, 3]]
