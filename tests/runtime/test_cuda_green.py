"""Green-context streams (ptxforge.runtime.cuda_green) without a GPU: the driver calls, their argument types
and their order, recorded at the real cuda-bindings functions (recording_driver.py); the fallback where the
driver has no green contexts; the SM rounding; cleanup when a step fails; a launch on a green stream (module
loaded in the green context, the launch on its stream, the primary context current again); the kernel
backend's choice of SM budget. tests/gpu/test_green_context.py runs it on a GPU."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.errors import LaunchError
from ptxforge.runtime import cuda_driver
from ptxforge.runtime.buffers import DeviceBuffer
from ptxforge.runtime.cuda_driver import CudaError
from ptxforge.runtime.cuda_green import (
    GreenContextsUnavailable,
    green_stream,
    green_stream_or_none,
    sm_group_size,
    split_granularity,
)
from ptxforge.runtime.kernel import cuda_available

pytest.importorskip("cuda.bindings.driver")
import recording_driver as R  # noqa: E402

no_gpu = pytest.mark.skipif(cuda_available(), reason="the recording driver's real calls must not reach a GPU")
SMID = Path(__file__).parent / "data" / "record_smid.ptx"
GREEN_CALLS = ["cuCtxSetCurrent", "cuDeviceGetDevResource", "cuDevSmResourceSplitByCount",
               "cuDevResourceGenerateDesc", "cuGreenCtxCreate", "cuCtxFromGreenCtx", "cuGreenCtxStreamCreate",
               "cuGreenCtxGetDevResource", "cuCtxSetCurrent"]


@pytest.fixture
def fake(monkeypatch):
    """Install a RecordingDriver (configured with fake.setup(...)) and give a CudaDevice on it."""
    class Fake:
        def setup(self, **kw):
            self.d = R.RecordingDriver(**kw)
            monkeypatch.setattr(cuda_driver, "_load", lambda: (self.d, None))
            from ptxforge.runtime.cuda_device import CudaDevice

            self.dev = CudaDevice(0)
            self.start = len(self.d.calls)  # the calls after the device was made
            return self.d, self.dev
    return Fake()


# ---------------------------------------------------------------- SM rounding
@pytest.mark.parametrize("n,cap,fields,want", [
    (20, (9, 0), (8, 8), 24), (2, (9, 0), (8, 8), 8), (16, (9, 0), (8, 8), 16), (1, (10, 0), (8, 8), 8),
    (20, (9, 0), (0, 0), 24),     # a 12.x driver leaves the fields 0: the 12.4 docs' table (9.0+: 8, 8)
    (5, (8, 0), (0, 0), 6), (1, (8, 6), (0, 0), 4), (3, (7, 5), (0, 0), 4), (1, (6, 1), (0, 0), 1),
    (5, (8, 0), (4, 2), 6), (10, (12, 0), (4, 4), 12),  # what the driver reports wins over the table
])
def test_sm_group_size(n, cap, fields, want):
    assert sm_group_size(n, cap, *fields) == want


def test_split_granularity_and_bad_counts():
    assert split_granularity((9, 0)) == (8, 8) and split_granularity((8, 0)) == (4, 2)
    assert split_granularity((7, 0)) == (2, 2) and split_granularity((6, 0)) == (1, 1)
    assert split_granularity((9, 0), 6, 2) == (6, 2)
    for bad in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="whole number of SMs of at least 1"):
            sm_group_size(bad, (9, 0))


# ---------------------------------------------------------------- the driver calls
@no_gpu
def test_green_stream_driver_calls_in_order(fake):
    d, dev = fake.setup()
    gs = green_stream(dev, 20)
    calls = d.calls[fake.start:]
    assert [c.name for c in calls] == GREEN_CALLS
    by = {c.name: c.args for c in calls}
    dev_arg, kind = by["cuDeviceGetDevResource"]
    assert int(dev_arg) == 0 and kind == R.SM
    nb, res, flags, min_count = by["cuDevSmResourceSplitByCount"]
    assert (nb, flags, min_count) == (1, 0, 24)  # 20 rounded up to the H200's 8-SM alignment
    assert type(res).__name__ == "CUdevResource" and res.sm.smCount == 132
    groups, n = by["cuDevResourceGenerateDesc"]
    assert n == 1 and len(groups) == 1 and groups[0].sm.smCount == 24
    desc, dev_arg, flags = by["cuGreenCtxCreate"]
    assert int(desc) == R.DESC and int(dev_arg) == 0
    assert flags == int(d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)
    assert int(by["cuCtxFromGreenCtx"][0]) == R.GREEN
    green, flags, priority = by["cuGreenCtxStreamCreate"]
    assert int(green) == R.GREEN and flags == int(d.CUstream_flags.CU_STREAM_NON_BLOCKING) and priority == 0
    assert int(by["cuGreenCtxGetDevResource"][0]) == R.GREEN
    assert calls[0].args[0] == dev.context and calls[-1].args[0] == dev.context  # the primary before and after
    assert (gs.sms, gs.requested, int(gs.handle), int(gs.context)) == (24, 20, R.STREAM, R.GREEN_CTX)
    assert "green context of 24 SMs" in gs.view.description and repr(gs).startswith("GreenStream(GPU 0")

    mark = len(d.calls)
    gs.close()
    assert d.names(mark) == ["cuStreamDestroy", "cuCtxSetCurrent", "cuGreenCtxDestroy", "cuCtxSetCurrent"]
    assert int(d.calls[mark].args[0]) == R.STREAM and int(d.calls[mark + 2].args[0]) == R.GREEN
    assert d.calls[mark + 1].args[0] == gs.context and d.calls[-1].args[0] == dev.context
    gs.close()  # twice: nothing more
    assert len(d.calls) == mark + 4


@no_gpu
def test_the_granted_count_is_read_back(fake):
    d, dev = fake.setup(granted=32)  # a driver that gives more than was asked
    gs = green_stream(dev, 16)
    assert d.called("cuDevSmResourceSplitByCount")[0].args[3] == 16 and gs.sms == 32
    gs.close()


@no_gpu
def test_a_12x_driver_without_the_granularity_fields(fake):
    d, dev = fake.setup(capability=(8, 0), sms=108, driver_version=12080, min_size=0, alignment=0)
    gs = green_stream(dev, 5)
    assert d.called("cuDevSmResourceSplitByCount")[0].args[3] == 6  # 8.x: multiples of 2, at least 4
    gs.close()


# ---------------------------------------------------------------- where the driver has none
@no_gpu
def test_a_driver_older_than_12_4_has_none(fake):
    d, dev = fake.setup(driver_version=12030)
    with pytest.raises(GreenContextsUnavailable, match=r"the CUDA driver is 12\.3, green contexts need 12\.4"):
        green_stream(dev, 20)
    assert d.names(fake.start) == []  # not one green-context call
    gs, why = green_stream_or_none(dev, 20)
    assert gs is None and "persistent blocks" in why


@no_gpu
def test_bindings_without_the_symbols(fake):
    d, dev = fake.setup(missing=("cuGreenCtxCreate", "cuGreenCtxStreamCreate"))
    with pytest.raises(GreenContextsUnavailable, match="cuda-bindings has no cuGreenCtxCreate, cuGreenCtxStreamCreate"):
        green_stream(dev, 8)
    assert d.names(fake.start) == []


@no_gpu
def test_a_driver_library_without_the_symbol(fake):
    from cuda.bindings._internal.utils import FunctionNotFoundError  # what cuda-bindings raises for it

    d, dev = fake.setup(fail={"cuGreenCtxCreate": FunctionNotFoundError("function cuGreenCtxCreate is not found")})
    gs, why = green_stream_or_none(dev, 8)
    assert gs is None and "lacks a green-context call (function cuGreenCtxCreate is not found)" in why
    assert d.names(fake.start)[-1] == "cuCtxSetCurrent" and "cuGreenCtxDestroy" not in d.names(fake.start)


@no_gpu
@pytest.mark.parametrize("step", ["cuDeviceGetDevResource", "cuDevSmResourceSplitByCount", "cuGreenCtxCreate",
                                  "cuGreenCtxStreamCreate"])
def test_not_supported_falls_back_and_cleans_up(fake, step):
    d, dev = fake.setup(fail={step: d_not_supported()})
    with pytest.raises(GreenContextsUnavailable, match=f"{step} gave CUDA_ERROR_NOT_SUPPORTED"):
        green_stream(dev, 16)
    names = d.names(fake.start)
    made_green = GREEN_CALLS.index(step) > GREEN_CALLS.index("cuGreenCtxCreate")
    assert ("cuGreenCtxDestroy" in names) == made_green  # what was made is destroyed
    assert "cuStreamDestroy" not in names  # the stream was never made
    assert d.calls[-1].name == "cuCtxSetCurrent" and d.calls[-1].args[0] == dev.context
    assert green_stream_or_none(dev, 16)[0] is None


def d_not_supported():
    return R.real.CUresult.CUDA_ERROR_NOT_SUPPORTED


@no_gpu
def test_other_failures_raise_after_cleaning_up(fake):
    d, dev = fake.setup(fail={"cuGreenCtxGetDevResource": R.real.CUresult.CUDA_ERROR_INVALID_VALUE})
    with pytest.raises(CudaError, match="cuGreenCtxGetDevResource failed: CUDA_ERROR_INVALID_VALUE"):
        green_stream(dev, 16)
    names = d.names(fake.start)
    assert names[-3:] == ["cuStreamDestroy", "cuGreenCtxDestroy", "cuCtxSetCurrent"]  # stream first, then green
    with pytest.raises(CudaError):  # not a reason to fall back: the caller sees it
        green_stream_or_none(dev, 16)


@no_gpu
def test_more_sms_than_the_gpu_has(fake):
    d, dev = fake.setup()
    with pytest.raises(ValueError, match=r"a green context of 132 SMs needs 136 .* has 132"):
        green_stream(dev, 132)
    gs, why = green_stream_or_none(dev, 130)
    assert gs is None and "needs 136" in why and "cuDevSmResourceSplitByCount" not in d.names(fake.start)
    with pytest.raises(ValueError, match="at least 1"):  # a bad count is an error, not a fallback
        green_stream_or_none(dev, 0)


# ---------------------------------------------------------------- launching on a green stream
@no_gpu
def test_launch_on_a_green_stream(fake):
    d, dev = fake.setup()
    k = pf.parse(SMID.read_text(), filename=SMID.name).kernel("record_smid")
    out = DeviceBuffer((64,), np.uint32, device=dev, name="smids")
    with green_stream(dev, 16) as gs:
        mark = len(d.calls)
        res = k.launch(grid=(64,), block=(32,), args=[out, np.uint64(1000)], stream=gs)
        assert res.device == "cuda" and res.wall_s == pytest.approx(0.25e-3)
        calls = d.calls[mark:]
        names = [c.name for c in calls]
        load = names.index("cuModuleLoadData")
        assert calls[load].current == R.GREEN_CTX  # the module is loaded in the green context
        launch = calls[names.index("cuLaunchKernelEx")]
        cfg, f, params, extra = launch.args
        assert launch.current == R.GREEN_CTX and int(cfg.hStream) == R.STREAM  # on the green stream
        assert (cfg.gridDimX, cfg.blockDimX) == (64, 32)
        got = d.called("cuModuleGetFunction")[-1]
        assert got.current == R.GREEN_CTX and got.args[1] == b"record_smid"
        assert int(f) == int(got.result[1])  # the green context's function is the one launched
        assert int(got.args[0]) == int(calls[load].result[1])
        assert all(int(c.args[1]) == R.STREAM for c in calls if c.name == "cuEventRecord")
        assert calls[-1].name == "cuCtxSetCurrent" and calls[-1].args[0] == dev.context  # the primary again
        assert len(dev.modules) == 0 and len(gs.view.modules) == 1  # the primary context loaded nothing
        again = len(d.calls)
        k.launch(grid=(64,), block=(32,), args=[out, np.uint64(1000)], stream=gs)
        assert "cuModuleLoadData" not in d.names(again)  # the green context keeps its module
        mark = len(d.calls)
    names = d.names(mark)
    assert names[:2] == ["cuStreamDestroy", "cuCtxSetCurrent"] and names[-2:] == ["cuGreenCtxDestroy",
                                                                                    "cuCtxSetCurrent"]
    assert names.count("cuModuleUnload") == 1 and names.count("cuEventDestroy") == 2
    assert all(c.current == R.GREEN_CTX for c in d.calls[mark:] if c.name in ("cuModuleUnload", "cuEventDestroy"))
    with pytest.raises(LaunchError, match="was closed"):
        k.launch(grid=(64,), block=(32,), args=[out, np.uint64(1)], stream=gs)
    with pytest.raises(LaunchError, match="work on the emulator only"):
        k.launch(grid=(1,), block=(32,), args=[out, np.uint64(1)], stream=gs, options={"sanitize": True})
    with pytest.raises(LaunchError, match="names device='emu'"):
        k.launch(grid=(1,), block=(32,), args=[out, np.uint64(1)], stream=gs, device="emu")
    out.free()


def test_the_smid_kernel_assembles_and_is_confined_on_the_emulator():
    """The PTX of the GPU test: ptxas accepts it; on the emulator 4 SMs hold its blocks."""
    from ptxforge.toolchain import assemble

    assert assemble(SMID.read_text(), "sm_90").ok
    out = np.full(12, -1, np.int32)
    pf.parse(SMID.read_text()).kernel("record_smid").launch(grid=(12,), block=(32,), args=[out, np.uint64(50)],
                                                            device="emu", options={"num_sms": 4})
    assert sorted(set(out.tolist())) == [0, 1, 2, 3]


# ---------------------------------------------------------------- the kernel backend's SM budget
@no_gpu
def test_comm_rank_takes_a_green_stream_on_a_gpu(fake):
    from ptxforge.ep.intranode import CommRank

    d, dev = fake.setup()
    comm = CommRank(0, 2, dev, fabric=None)
    gs = comm.stream(20)
    assert gs is not None and comm.sm_budget == {"num_sms": 20, "how": "green context", "sms": 24, "why": ""}
    assert comm.stream(20) is gs and d.names().count("cuGreenCtxCreate") == 1  # one per budget
    comm.close_streams()
    assert gs.closed and d.names()[-2:] == ["cuGreenCtxDestroy", "cuCtxSetCurrent"]


@no_gpu
def test_comm_rank_falls_back_to_the_persistent_grid(fake, monkeypatch):
    from ptxforge.ep.intranode import CommRank

    d, dev = fake.setup(driver_version=12020)
    comm = CommRank(0, 2, dev, fabric=None)
    assert comm.stream(4) is None
    assert comm.sm_budget["how"] == "persistent grid" and comm.sm_budget["sms"] is None
    assert "the CUDA driver is 12.2" in comm.sm_budget["why"]
    d, dev = fake.setup()  # a driver with green contexts, switched off
    monkeypatch.setenv("PTXFORGE_GREEN_CONTEXTS", "0")
    comm = CommRank(0, 2, dev, fabric=None)
    assert comm.stream(4) is None and comm.sm_budget["why"] == "PTXFORGE_GREEN_CONTEXTS=0"
    assert "cuGreenCtxCreate" not in d.names()


def test_comm_rank_budgets_on_the_emulator():
    from ptxforge.emu import Node
    from ptxforge.emu.launch import EmuDevice
    from ptxforge.ep.intranode import CommRank

    node = Node(gpus=1, sms=8)
    comm = CommRank(0, 1, node.devices[0], fabric=None)
    assert comm.stream(4) is not None
    assert comm.sm_budget == {"num_sms": 4, "how": "SM partition", "sms": 4, "why": ""}
    alone = CommRank(0, 1, EmuDevice(), fabric=None)  # a gloo rank's emulated GPU: no streams
    assert alone.stream(4) is None and alone.sm_budget == {"num_sms": 4, "how": "persistent grid", "sms": None,
                                                           "why": ""}
