"""The CUDA backend's parts that run without a GPU: device choice and its errors, which machine code the
GPU gets, PTX lowering for an older driver, parameter marshalling, and the argument types handed to the
real cuda-bindings functions (they convert arguments before they look for the driver library)."""

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.emu.launch import EmuDevice
from ptxforge.errors import KernelFault
from ptxforge.runtime import cuda_modules, to_device
from ptxforge.runtime.cuda_driver import STICKY, CudaError, CudaUnavailable, unavailable_reason
from ptxforge.runtime.kernel import cuda_available
from ptxforge.runtime.params import check_args, pack, param_offsets
from ptxforge.toolchain import assemble

DEMO = Path(pf.__file__).parent / "data" / "demo.sm_90a.ptx"
no_gpu = pytest.mark.skipif(cuda_available(), reason="checks the behaviour of a machine without a GPU")
d = pytest.importorskip("cuda.bindings.driver")


@pytest.fixture(scope="module")
def demo():
    return pf.parse(DEMO.read_text(), filename=DEMO.name)


def vadd_args(n=256):
    return [np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32), np.int32(n)]


# ---------------------------------------------------------------- choosing the device
@no_gpu
def test_cuda_without_a_driver_says_why(demo):
    assert "no CUDA driver" in unavailable_reason()
    with pytest.raises(CudaUnavailable, match=r"no CUDA driver on this machine .*use device='emu'"):
        demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args(), device="cuda")
    with pytest.raises(CudaUnavailable, match="no CUDA driver"):
        to_device(np.zeros(4, np.float32), device="cuda")


@no_gpu
def test_auto_runs_on_the_emulator_without_a_gpu(demo):
    args = vadd_args()
    res = demo.kernel("vadd").launch(grid=(1,), block=(256,), args=args, device="auto")
    assert res.device == "emu" and (args[2] == 2).all()
    assert isinstance(to_device(np.zeros(4), device="auto").device, EmuDevice)


@pytest.mark.parametrize("option", [{"sanitize": True}, {"num_sms": 4}, {"printf": print}])
def test_auto_with_an_emulator_option_uses_the_emulator(demo, option):
    res = demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args(), device="auto", options=option)
    assert res.device == "emu"


def test_default_device_comes_from_the_environment(demo, monkeypatch):
    monkeypatch.setenv("PTXFORGE_DEVICE", "tpu")
    with pytest.raises(LaunchError, match="unknown device 'tpu'"):
        demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args())
    monkeypatch.setenv("PTXFORGE_DEVICE", "emu")
    assert demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args()).device == "emu"


@pytest.mark.parametrize("name,msg", [("tpu", "unknown device 'tpu'"), ("cuda:one", "'cuda' or 'cuda:N'")])
def test_unknown_device_names(demo, name, msg):
    with pytest.raises(LaunchError, match=msg):
        demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args(), device=name)


def test_missing_cuda_bindings_names_the_extra():
    code = ("import sys; sys.modules['cuda.bindings'] = None\n"
            "from ptxforge.runtime.cuda_driver import unavailable_reason; print(unavailable_reason())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'ptxforge[cuda]'" in out.stdout, out.stderr


def test_auto_runs_where_the_buffers_live(demo):
    other = EmuDevice()
    c = to_device(np.zeros(256, np.float32), device=other)
    args = vadd_args()
    args[2] = c
    assert demo.kernel("vadd").launch(grid=(1,), block=(256,), args=args, device="auto").device == "emu"
    assert (c.to_host() == 2).all() and c.device is other


def test_buffer_from_another_device_is_refused(demo):
    buf = to_device(np.zeros(256, np.float32), device="emu")
    other = EmuDevice()
    args = vadd_args()
    args[2] = buf
    with pytest.raises(LaunchError, match="argument .*: the buffer lives on the emulator but this launch runs on"):
        demo.kernel("vadd").launch(grid=(1,), block=(256,), args=args, emu_device_=other)
    assert other.memory.allocations == ()  # the arrays copied in before the refusal were freed
    buf.free()


# ---------------------------------------------------------------- machine code for the GPU
@pytest.mark.parametrize("target,gpu,arch", [
    ("sm_80", "sm_90a", "sm_90"), ("sm_90", "sm_90a", "sm_90"), ("sm_90a", "sm_90a", "sm_90a"),
    ("sm_80", "sm_100a", "sm_100"), ("sm_100f", "sm_103a", "sm_103"), ("sm_86", "sm_89", "sm_89"),
])
def test_cubin_arch(target, gpu, arch):
    assert cuda_modules.cubin_arch(target, gpu) == arch


@pytest.mark.parametrize("target,gpu,msg", [
    ("sm_90a", "sm_100a", "exist only on sm_90 GPUs; this GPU is sm_100a"),
    ("sm_100a", "sm_90a", "exist only on sm_100 GPUs"),
    ("sm_90", "sm_80", "newer than this GPU"),
    ("sm_100f", "sm_120a", "sm_10x family"),
])
def test_cubin_arch_refuses_code_for_another_gpu(target, gpu, msg):
    with pytest.raises(LaunchError, match=msg) as e:
        cuda_modules.cubin_arch(target, gpu)
    assert "ptxforge retarget" in str(e.value) and "device='emu'" in str(e.value)


@pytest.mark.parametrize("gpu", ["sm_90a", "sm_100a"])
def test_ptxas_builds_sm80_corpus_code_for_newer_gpus(gpu):
    """The arch cubin_arch picks is one ptxas accepts for that PTX (real ptxas, real nvcc output)."""
    text = (Path(__file__).resolve().parents[1] / "corpus/ptx/cuda/atomics.sm_80.O3.ptx").read_text()
    arch = cuda_modules.cubin_arch("sm_80", gpu)
    assert assemble(text, arch).ok


def test_debug_targets_get_ptxas_g():
    text = (Path(__file__).resolve().parents[1] / "corpus/ptx/cuda/atomics.sm_80.G.ptx").read_text()
    m = pf.parse(text)
    assert cuda_modules.ptxas_flags(m) == ["-g"]
    assert assemble(text, "sm_90", cuda_modules.ptxas_flags(m)).ok
    assert cuda_modules.ptxas_flags(pf.parse(DEMO.read_text())) == []


# ---------------------------------------------------------------- PTX for an older driver's JIT
def test_driver_ptx_isa():
    assert cuda_modules.driver_ptx_isa(12040) == (8, 4)
    assert cuda_modules.driver_ptx_isa(12060) == (8, 5)
    assert cuda_modules.driver_ptx_isa(12090) == (8, 8)
    assert cuda_modules.driver_ptx_isa(13000) == (9, 0)
    assert cuda_modules.driver_ptx_isa(11000) is None


def test_jit_text_lowers_version_when_nothing_needs_it(demo):
    newer = pf.parse(DEMO.read_text().replace(".version 9.0", ".version 9.0", 1))
    assert newer.version == (9, 0)
    text = cuda_modules.jit_text(newer, 12040)  # CUDA 12.4 knows PTX ISA 8.4
    assert ".version 8.4" in text and ".version 9.0" not in text
    assert assemble(text, "sm_90a").ok
    assert cuda_modules.jit_text(newer, 13000) == newer.to_ptx()  # nothing to lower


def test_jit_text_refuses_what_the_old_driver_lacks():
    src = """.version 8.6
.target sm_100a
.address_size 64
.visible .entry k()
{
    .reg .b32 %r<2>;
    .shared .b32 where;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [where], 32;
    ret;
}
"""
    with pytest.raises(LaunchError, match=r"reads PTX ISA up to 8\.4; the module is \.version 8\.6"):
        cuda_modules.jit_text(pf.parse(src), 12040)


# ---------------------------------------------------------------- parameters
def test_pack_lays_out_parameters_at_their_alignment(demo):
    k = demo.kernel("quant_fp8_1x128")
    plan = check_args(k.name, k.params, [None, None, None, np.int32(3)], lambda a: False)
    packed, offsets = pack(plan, lambda p, a: 0x1000 + 8 * len(p.name))
    assert offsets == list(param_offsets(k.params)[0]) == [0, 8, 16, 24]
    assert packed[24:28] == np.int32(3).tobytes() and len(packed) == 28
    first = k.params[0].name
    assert packed[:8] == (0x1000 + 8 * len(first)).to_bytes(8, "little")  # the address the device gave


def test_pack_aligns_aggregates_and_small_scalars():
    src = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u8 a, .param .align 64 .b8 m[128], .param .u16 b, .param .f64 c)
{
    ret;
}
"""
    k = pf.parse(src).kernel("k")
    blob = np.arange(128, dtype=np.uint8)
    plan = check_args(k.name, k.params, [np.uint8(9), blob, 513, 1.5], lambda a: False)
    packed, offsets = pack(plan, lambda p, a: 0)
    assert offsets == [0, 64, 192, 200]
    assert packed[0] == 9 and packed[64:192] == blob.tobytes()
    assert packed[192:194] == (513).to_bytes(2, "little") and packed[200:208] == np.float64(1.5).tobytes()


def test_param_pointers_point_at_each_parameter():
    from ptxforge.runtime.cuda_launch import param_pointers

    packed = bytes(range(40))
    offsets = [0, 8, 16, 32]
    storage, ptrs = param_pointers(packed, offsets)
    assert ptrs.dtype == np.uint64 and len(ptrs) == 4
    for off, p in zip(offsets, ptrs, strict=True):
        assert ctypes.string_at(int(p), 8 if off < 32 else 8) == packed[off:off + 8]
    assert storage.ctypes.data == int(ptrs[0])


# ---------------------------------------------------------------- what the bindings are handed
def _reaches_the_driver(call, *args):
    """The bindings accepted the argument types: the call got as far as looking for the driver."""
    try:
        result = call(*args)
    except TypeError:
        raise
    except Exception as e:  # no libcuda.so.1 here
        assert "driver" in str(e).lower() or "cuda" in str(e).lower()
        return
    assert isinstance(result, tuple)


@no_gpu
def test_launch_arguments_are_accepted_by_cuda_bindings():
    from ptxforge.runtime.cuda_launch import launch_config, param_pointers

    cfg = launch_config(d, (4, 2, 1), (128, 1, 1), 2048, (2, 1, 1))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.blockDimX, cfg.sharedMemBytes, cfg.numAttrs) == (4, 2, 128, 2048, 1)
    attr = cfg.attrs[0]
    assert attr.id == d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (2, 1, 1)
    assert launch_config(d, (1, 1, 1), (32, 1, 1), 0, None).numAttrs == 0
    coop = launch_config(d, (4, 1, 1), (128, 1, 1), 0, (2, 1, 1), cooperative=True)
    assert [a.id for a in coop.attrs] == [d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                          d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE]
    assert coop.numAttrs == 2 and coop.attrs[1].value.cooperative == 1
    _reaches_the_driver(d.cuLaunchKernelEx, coop, d.CUfunction(), None, 0)
    storage, ptrs = param_pointers(b"\0" * 16, [0, 8])
    _reaches_the_driver(d.cuLaunchKernelEx, cfg, d.CUfunction(), int(ptrs.ctypes.data), 0)
    _reaches_the_driver(d.cuMemcpyHtoD, d.CUdeviceptr(1 << 20), storage.ctypes.data, 16)
    _reaches_the_driver(d.cuMemcpyDtoH, storage.ctypes.data, d.CUdeviceptr(1 << 20), 16)
    log = bytearray(64)
    _reaches_the_driver(d.cuModuleLoadDataEx, b".version 8.0\0", 2,
                        [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                        [log, len(log)])
    # every other call the backend makes, with the argument types it uses (cuda_device.py, cuda_launch.py)
    dev, fn, ev, ptr = d.CUdevice(0), d.CUfunction(), d.CUevent(), d.CUdeviceptr(1 << 20)
    FA, A = d.CUfunction_attribute, d.CUdevice_attribute
    for call, *args in [
        (d.cuDeviceGet, 0), (d.cuDeviceGetCount,), (d.cuDevicePrimaryCtxRetain, dev),
        (d.cuCtxSetCurrent, d.CUcontext()),
        (d.cuDeviceGetName, 256, dev), (d.cuDeviceGetAttribute, A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        (d.cuDriverGetVersion,), (d.cuCtxSynchronize,), (d.cuMemAlloc, 1024), (d.cuMemsetD8, ptr, 0, 1024),
        (d.cuMemFree, ptr), (d.cuModuleLoadData, b"\x7fELF"), (d.cuModuleGetFunction, d.CUmodule(), b"vadd"),
        (d.cuFuncGetAttribute, FA.CU_FUNC_ATTRIBUTE_NUM_REGS, fn),
        (d.cuFuncSetAttribute, fn, FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536),
        (d.cuOccupancyMaxActiveBlocksPerMultiprocessor, fn, 256, 0), (d.cuEventCreate, 0),
        (d.cuEventRecord, ev, d.CUstream(0)), (d.cuEventSynchronize, ev), (d.cuEventElapsedTime, ev, ev),
        (d.cuEventDestroy, ev), (d.cuGetErrorName, d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS),
    ]:
        _reaches_the_driver(call, *args)
    with pytest.raises(TypeError):  # the check above can tell a wrong type from a missing driver
        _reaches_the_driver(d.cuMemcpyHtoD, "not a pointer", 1, 2)


@no_gpu
def test_tensor_map_arguments_are_accepted_by_cuda_bindings():
    from ptxforge.runtime.cuda_tensor_map import data_type_name, driver_arguments

    args = driver_arguments(d, 1 << 20, np.float16, (64, 32), (128,), (64, 16), None, "128B", "zero")
    assert args[0] == d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 and args[1] == 2
    assert [int(x) for x in args[3]] == [64, 32] and [int(x) for x in args[4]] == [128]
    assert args[8] == d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    _reaches_the_driver(d.cuTensorMapEncodeTiled, *args)
    import ml_dtypes

    assert data_type_name(ml_dtypes.bfloat16) == "BFLOAT16" and data_type_name(ml_dtypes.float8_e4m3fn) == "UINT8"
    assert data_type_name(np.int16) == "UINT16" and data_type_name(np.float32) == "FLOAT32"


@no_gpu
def test_im2col_tensor_map_arguments_are_accepted_by_cuda_bindings():
    from ptxforge.runtime.cuda_tensor_map import driver_arguments_im2col

    args = driver_arguments_im2col(d, 1 << 20, np.float32, (16, 9, 7, 2), (64, 576, 4032), (-1, -1), (-1, -1), 16,
                                   32, (1, 2, 2, 1), "none", "zero")
    assert args[1] == 4 and args[5:9] == ([-1, -1], [-1, -1], 16, 32)
    assert [int(x) for x in args[9]] == [1, 2, 2, 1]
    _reaches_the_driver(d.cuTensorMapEncodeIm2col, *args)
    with pytest.raises(ValueError, match="outside 1..1024"):
        driver_arguments_im2col(d, 1 << 20, np.float32, (16, 9, 7, 2), (64, 576, 4032), (-1, -1), (-1, -1), 16,
                                2048, None, "none", "zero")


def test_tensor_map_checks_match_the_emulator():
    from ptxforge.runtime.cuda_tensor_map import driver_arguments

    with pytest.raises(ValueError, match="must be a positive multiple of 16"):
        driver_arguments(d, 1 << 20, np.float32, (10, 10), (40,), (8, 8), None, "none", "zero")
    with pytest.raises(ValueError, match="inner box"):
        driver_arguments(d, 1 << 20, np.float32, (64, 64), (256,), (64, 8), None, "32B", "zero")


# ---------------------------------------------------------------- errors
def test_cuda_error_message_names_the_call_and_what_to_do():
    e = CudaError("the kernel", "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                  "(vadd<<<(4, 1, 1), (256, 1, 1)>>> on NVIDIA H200)")
    text = str(e)
    assert text.startswith("the kernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access")
    assert "sanitize=True" in text and "context is now unusable" in text
    # a fault of the kernel on the GPU: a KernelFault, neither a refused launch nor an emulator error
    assert isinstance(e, KernelFault) and not isinstance(e, LaunchError | pf.EmulatorError)
    assert e.code == "CUDA_ERROR_ILLEGAL_ADDRESS"
    plain = str(CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"))
    assert "DeviceBuffer.free" in plain and "unusable" not in plain
    assert "CUDA_ERROR_OUT_OF_MEMORY" not in STICKY


# ---------------------------------------------------------------- the CLI
@no_gpu
def test_cli_run_on_cuda_without_a_gpu_is_a_one_line_error(tmp_path, capsys):
    from ptxforge.cli.main import main

    np.save(tmp_path / "a.npy", np.ones(256, np.float32))
    argv = ["run", str(DEMO), "--kernel", "vadd", "--block", "256", "--arg", str(tmp_path / "a.npy"),
            "--arg", str(tmp_path / "a.npy"), "--arg", f"{tmp_path / 'c.npy'}=zeros:256:float32", "--arg", "256"]
    assert main([*argv, "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA driver on this machine (libcuda.so.1 not found)" in err and "Traceback" not in err
    assert not (tmp_path / "c.npy").exists()
    assert main([*argv, "--device", "auto"]) == 0  # auto falls back to the emulator
    assert (np.load(tmp_path / "c.npy") == 2).all()



@no_gpu
def test_cli_devices_lists_the_emulator_and_why_no_gpu(capsys):
    from ptxforge.cli.main import main

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "emu      CPU SIMT emulator" in out
    assert "cuda     not available: no CUDA driver on this machine (libcuda.so.1 not found)" in out
    assert "launches that name no device use: emu (PTXFORGE_DEVICE)" in out  # set by tests/conftest.py
    assert "ptxas      /" in out and "(CUDA 13." in out


def test_environment_device_yields_to_buffers_and_emulator_options(demo, monkeypatch):
    monkeypatch.setenv("PTXFORGE_DEVICE", "cuda")  # a preference: never used here, so no GPU is needed
    res = demo.kernel("vadd").launch(grid=(1,), block=(256,), args=vadd_args(), options={"sanitize": True})
    assert res.device == "emu"
    args = vadd_args()
    args[2] = to_device(args[2], device="emu")
    assert demo.kernel("vadd").launch(grid=(1,), block=(256,), args=args).device == "emu"


def test_ptxas_version_and_lowering_triton_output():
    from ptxforge.toolchain import ptxas_max_ptx_version

    newest = ptxas_max_ptx_version()
    assert newest is not None and newest >= (9, 0)
    m = pf.parse((Path(__file__).resolve().parents[1] / "corpus/ptx/triton/fused_softmax.sm_90a.ptx").read_text())
    assert m.version > (9, 0)  # Triton 3.9 writes .version 9.4
    text = cuda_modules.lowered_text(m, (9, 0), "ptxas 13.0")
    assert ".version 9.0" in text and assemble(text, "sm_90a").ok
    assert cuda_modules.lowered_text(m, (9, 4), "ptxas") == m.to_ptx()


def test_calls_after_a_sticky_error_name_the_first_fault():
    from ptxforge.runtime import cuda_driver as cd

    first = CudaError("the kernel", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered",
                      "(k<<<(1, 1, 1), (32, 1, 1)>>> on NVIDIA H200)")
    cd._LOST.append(first)  # what check() records when a kernel faults
    try:
        assert cd.lost_context() is first
        fake = (d.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None)  # any failing result after the fault
        with pytest.raises(KernelFault, match=r"cuMemAlloc failed because an earlier kernel broke this "
                                              r"process's CUDA context: CUDA_ERROR_ILLEGAL_INSTRUCTION in "
                                              r"the kernel \(k<<<"):
            cd.check(fake, "cuMemAlloc")
    finally:
        cd._LOST.clear()
