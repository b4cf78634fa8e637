"""ptxforge's one tree of errors (`ptxforge.errors`) and how the CLI reports each family."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import ptxforge as pf
from ptxforge import errors
from ptxforge.cli.errors import EXIT_ERROR, EXIT_FAULT, EXIT_INTERNAL, report
from ptxforge.cli.main import main
from ptxforge.emu.errors import EmulatorError, InternalEmulatorError, KernelTrap, MemoryFault, WatchdogTimeout
from ptxforge.runtime.cuda_driver import CudaContextLost, CudaError, CudaUnavailable
from ptxforge.runtime.kernel import cuda_available

HEADER = ".version 8.0\n.target sm_80\n.address_size 64\n"
TRAP = HEADER + ".visible .entry k(.param .u64 p)\n{\n    trap;\n}\n"
NULL_STORE = HEADER + """.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 7;
    st.global.u32 [%rd1+64], %r1;
    ret;
}
"""
COPY = HEADER + """.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 7;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""
OOB = HEADER + """.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 7;
    st.global.u32 [%rd1+4], %r1;
    ret;
}
"""


def _public_exceptions():
    """Every exception class a ptxforge module defines whose name does not start with an underscore."""
    found = {}
    for info in pkgutil.walk_packages(pf.__path__, "ptxforge."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name \
                    and not name.startswith("_"):
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_public_exception_derives_from_ptxforge_error():
    found = _public_exceptions()
    assert len(found) >= 30  # the walk reached the packages (emu, runtime, ep, pipeline, cli ...)
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, pf.Error))
    assert outside == []


def test_a_gpu_fault_is_a_kernel_fault_not_an_emulator_error():
    assert issubclass(CudaError, pf.KernelFault)
    assert not issubclass(CudaError, EmulatorError) and not issubclass(CudaError, pf.LaunchError)
    assert issubclass(CudaContextLost, pf.KernelFault) and not issubclass(CudaContextLost, EmulatorError)
    assert issubclass(CudaUnavailable, pf.DeviceUnavailable) and not issubclass(CudaUnavailable, pf.LaunchError)


def test_the_families():
    for fault in (MemoryFault, KernelTrap, WatchdogTimeout):  # the emulator's faults are kernel faults too
        assert issubclass(fault, EmulatorError) and issubclass(fault, pf.KernelFault)
    assert issubclass(pf.LaunchError, ValueError) and not issubclass(pf.LaunchError, EmulatorError)
    assert issubclass(pf.SanitizerError, EmulatorError) and not issubclass(pf.SanitizerError, pf.KernelFault)
    from ptxforge.runtime.resources import PtxasError

    for cls in (pf.PTXSyntaxError, pf.PTXValidationError, pf.DSLError, PtxasError):
        assert issubclass(cls, pf.PTXError) and issubclass(cls, pf.Error)
    from ptxforge.ep.errors import EPInputError, EPTimeoutError
    from ptxforge.pipeline.ops import ScheduleError
    from ptxforge.plan.presets import UnknownPreset

    # the built-in bases callers catch are kept
    assert issubclass(EPTimeoutError, TimeoutError) and issubclass(EPInputError, ValueError)
    assert issubclass(ScheduleError, ValueError) and issubclass(UnknownPreset, KeyError)


def test_old_import_paths_name_the_same_classes():
    from ptxforge.cli import main as cli_main
    from ptxforge.cli.errors import UserError
    from ptxforge.emu import LaunchError as emu_pkg
    from ptxforge.emu.errors import LaunchError as emu_errors
    from ptxforge.emu.launch import LaunchError as emu_launch
    from ptxforge.ptx.errors import PTXError

    assert emu_errors is emu_launch is emu_pkg is pf.LaunchError is errors.LaunchError
    assert PTXError is pf.PTXError and EmulatorError is pf.EmulatorError
    assert issubclass(pf.SanitizerError, EmulatorError) and issubclass(PTXError, errors.Error)
    assert cli_main.UserError is UserError
    with pytest.raises(AttributeError, match="has no attribute 'EmulatorError'"):
        errors.EmulatorError  # noqa: B018  (ptxforge.errors imports nothing of ptxforge: no lazy re-exports)


def test_a_launch_the_emulator_refuses_midway_stays_a_launch_error():
    """LaunchError left the EmulatorError family: a launch the emulator refuses after the arguments were copied
    in (a cooperative grid too large to be resident) is still reported as itself, under the sanitizer too,
    and its argument memory is freed."""
    from ptxforge.emu.launch import EmuDevice

    dev = EmuDevice(num_sms=1)
    k = pf.parse(COPY).kernel("k")
    before = len(dev.memory._allocs)
    for sanitize in (False, True):
        with pytest.raises(pf.LaunchError, match="a cooperative launch needs every block resident at once"):
            k.launch(grid=4096, block=1024, args=[np.zeros(4, np.uint32)], device="emu", emu_device_=dev,
                     cooperative=True, options={"sanitize": sanitize})
        assert len(dev.memory._allocs) == before


# ---------------------------------------------------------------- the CLI, one family at a time
@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in (("trap.ptx", TRAP), ("null.ptx", NULL_STORE), ("copy.ptx", COPY), ("oob.ptx", OOB),
                       ("bad.ptx", HEADER + ".visible .entry k()\n{\n    add.u32 %r1 %r2;\n}\n")):
        (tmp_path / name).write_text(text)
    return tmp_path


def test_cli_ptx_error(files, capsys):
    assert main(["run", "bad.ptx"]) == EXIT_ERROR == 1
    err = capsys.readouterr().err
    assert err.startswith("bad.ptx:6:") and ": error: " in err and "Traceback" not in err


def test_cli_launch_refused(files, capsys):
    assert main(["run", "copy.ptx", "-a", "o.npy=zeros:4:uint32", "--block", "2000"]) == 1
    err = capsys.readouterr().err
    assert err == "ptxforge: error: block (2000, 1, 1) has 2000 threads; the limit is 1024\n"
    assert not (files / "o.npy").exists()  # nothing ran


def test_cli_kernel_fault_on_the_emulator(files, capsys):
    assert main(["run", "trap.ptx", "-a", "o.npy=zeros:4:uint32"]) == EXIT_FAULT == 2
    err = capsys.readouterr().err
    assert err.startswith("ptxforge: kernel fault: trap.ptx:6: trap executed (thread (0,0,0) block (0,0,0))")
    assert "Traceback" not in err
    assert (files / "o.npy").exists()  # what the emulator completed is kept
    assert main(["run", "null.ptx", "-a", "null"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ptxforge: kernel fault: ") and "0x40" in err


def test_cli_sanitizer_findings(files, capsys):
    assert main(["run", "oob.ptx", "-a", "o.npy=zeros:1:uint32", "--sanitize"]) == 1
    err = capsys.readouterr().err
    assert "Invalid __global__ write of size 4 bytes" in err and "ERROR SUMMARY: 1 error site" in err


def test_cli_kernel_fault_on_a_gpu_is_not_a_user_mistake(files, capsys, monkeypatch):
    """A GPU's fault (injected: this machine has no GPU) is reported as a kernel fault, exit 2, and the
    outputs the GPU never returned are not written."""
    from ptxforge.runtime.kernel import Kernel

    def fault(self, *a, **kw):
        raise CudaError("the kernel", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                        "(k<<<(1, 1, 1), (1, 1, 1)>>> on NVIDIA H200)")
    monkeypatch.setattr(Kernel, "launch", fault)
    assert main(["run", "copy.ptx", "-a", "o.npy=zeros:4:uint32", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "ptxforge: 1 output file(s) not written: the GPU returned no results" in err
    assert "ptxforge: kernel fault: the kernel failed: CUDA_ERROR_ILLEGAL_ADDRESS" in err
    assert "--device emu, --sanitize" in err  # the hint in the CLI's words
    assert "ptxforge: error:" not in err and not (files / "o.npy").exists()


@pytest.mark.skipif(cuda_available(), reason="checks a machine without a GPU")
def test_cli_device_unavailable(files, capsys):
    assert main(["run", "copy.ptx", "-a", "o.npy=zeros:4:uint32", "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ptxforge: device unavailable: no CUDA driver on this machine")
    assert err.rstrip().endswith("use --device emu")


def test_report_for_each_family(capsys, request):
    cases = [
        (pf.LaunchError("num_sms must be a whole number"), 1, "ptxforge: error: --sms must be a whole number"),
        (CudaUnavailable("the CUDA driver sees no GPU; use device='emu'"), 1,
         "ptxforge: device unavailable: the CUDA driver sees no GPU; use --device emu"),
        (KernelTrap("k.ptx:3: trap executed"), 2, "ptxforge: kernel fault: k.ptx:3: trap executed"),
        (WatchdogTimeout("no progress"), 2, "ptxforge: kernel fault: no progress"),
        (CudaContextLost("cuMemAlloc", CudaError("the kernel", "CUDA_ERROR_ASSERT", "assert", "")), 2,
         "ptxforge: kernel fault: cuMemAlloc failed because an earlier kernel broke"),
        (InternalEmulatorError("k.ptx:3: add.u32: internal error while emulating"), EXIT_INTERNAL,
         "ptxforge: internal error: k.ptx:3"),
        (pf.Error("anything else"), 1, "ptxforge: error: anything else"),
    ]
    request.node.internal_emulator_errors.clear()  # the InternalEmulatorError above was planted (tests/conftest.py)
    for e, code, start in cases:
        assert report(e) == code, e
        assert capsys.readouterr().err.startswith(start), e


def test_gpu_faults_cross_process_boundaries_whole():
    """A rank's error is pickled to its parent (ptxforge.ep.spawn, the pipeline's launcher)."""
    import pickle

    first = CudaError("the kernel", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered", "(k)")
    for e in (first, CudaContextLost("cuMemFree", first), pf.LaunchError("bad"), KernelTrap("trap executed")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
    assert pickle.loads(pickle.dumps(first)).code == "CUDA_ERROR_ILLEGAL_ADDRESS"
