"""The CUDA backend on a real GPU: the same launches as on the emulator give the same bits."""

import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.runtime import empty, occupancy, resource_usage, tensor_map, to_device
from ptxforge.runtime.cuda_device import cuda_device
from ptxforge.runtime.gpu import gpu_arch

DEMO = Path(pf.__file__).parent / "data" / "demo.sm_90a.ptx"
rng = np.random.default_rng(3)


@pytest.fixture(scope="module")
def demo():
    return pf.parse(DEMO.read_text(), filename=DEMO.name)


def corpus_module(name: str, flavor: str):
    """A corpus module, through the emulator tests' loader (tests/emu/emu_corpus.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emu"))
    from emu_corpus import corpus_module as load

    return load(name, flavor)


def both(kernel, grid, block, make_args):
    """Launch on the emulator and the GPU with fresh copies of the same inputs; the two argument lists."""
    out = []
    for device in ("emu", "cuda"):
        args = make_args()
        res = kernel.launch(grid=grid, block=block, args=args, device=device)
        assert res.device == device
        out.append(args)
    return out


def test_device_identity():
    dev = cuda_device()
    assert dev.arch == gpu_arch()
    assert dev.num_sms > 0 and dev.max_shared_per_block >= 48 * 1024
    print(dev, "driver", dev.driver_version)


def test_vadd_matches_numpy_and_emulator(demo):
    n = 1 << 16
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    emu, gpu = both(demo.kernel("vadd"), (n // 256,), (256,),
                    lambda: [a.copy(), b.copy(), np.zeros(n, np.float32), np.int32(n)])
    np.testing.assert_array_equal(gpu[2], a + b)
    np.testing.assert_array_equal(gpu[2], emu[2])
    res = demo.kernel("vadd").launch(grid=(n // 256,), block=(256,), args=[a, b, gpu[2], np.int32(n)], device="cuda")
    assert res.wall_s > 0 and "ms kernel time" in str(res)


def test_fp8_quant_bit_exact_with_emulator(demo):
    rows, cols = 16, 1024
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    emu, gpu = both(demo.kernel("quant_fp8_1x128"), (rows,), (32, cols // 128),
                    lambda: [x.copy(), np.zeros((rows, cols), np.uint8), np.zeros((rows, cols // 128), np.float32),
                             np.int32(cols)])
    np.testing.assert_array_equal(gpu[1], emu[1])
    np.testing.assert_array_equal(gpu[2], emu[2])
    groups = x.reshape(rows, cols // 128, 128)
    want_s = np.abs(groups).max(-1) / np.float32(448)
    want_q = (groups / want_s[..., None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(rows, cols)
    np.testing.assert_array_equal(gpu[1], want_q)


def test_device_buffers_stay_on_the_gpu(demo):
    n = 4096
    a = to_device(rng.random(n, np.float32), device="cuda")
    b = to_device(rng.random(n, np.float32), device="cuda")
    c = empty(n, np.float32, device="cuda")
    demo.kernel("vadd").launch(grid=(n // 256,), block=(256,), args=[a, b, c, np.int32(n)], device="cuda")
    np.testing.assert_array_equal(c.to_host(), a.to_host() + b.to_host())
    emu_buf = to_device(np.zeros(n, np.float32), device="emu")
    with pytest.raises(LaunchError, match="lives on the emulator"):
        demo.kernel("vadd").launch(grid=(n // 256,), block=(256,), args=[a, b, emu_buf, np.int32(n)], device="cuda")
    for buf in (a, b, c):
        buf.free()


@pytest.mark.parametrize("name", ["vadd", "block_sum", "quant_fp8_1x128"])
def test_registers_match_ptxas(demo, name):
    dev = cuda_device()
    got = dev.kernel_attributes(demo, name)
    want = resource_usage(demo, dev.arch)[name]
    assert got["registers"] == want.registers
    assert got["shared_bytes"] == want.shared


@pytest.mark.parametrize("name", ["vadd", "block_sum"])
@pytest.mark.parametrize("threads", [64, 128, 256, 512, 1024])
def test_occupancy_matches_driver(demo, name, threads):
    dev = cuda_device()
    attrs = dev.kernel_attributes(demo, name)
    ours = occupancy(dev.arch, threads, attrs["registers"], attrs["shared_bytes"])
    assert ours.blocks_per_sm == dev.max_active_blocks(demo, name, threads)


def test_illegal_address_is_named():
    """A store through a null pointer: the error names CUDA_ERROR_ILLEGAL_ADDRESS and points at the sanitizer.
    Run in a child process: the error leaves the CUDA context unusable."""
    code = textwrap.dedent(f"""
        import numpy as np, ptxforge as pf
        m = pf.parse(open({str(DEMO)!r}).read())
        try:
            m.kernel("vadd").launch(grid=(4,), block=(256,), args=[np.ones(1024, np.float32),
                                    np.ones(1024, np.float32), None, np.int32(1024)], device="cuda")
        except Exception as e:
            print(type(e).__name__, e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "CudaError" in out.stdout and "CUDA_ERROR_ILLEGAL_ADDRESS" in out.stdout, out.stdout + out.stderr
    assert "sanitize=True" in out.stdout


def test_block_larger_than_register_budget_is_refused_before_launch():
    src = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry small(.param .u64 p) .maxntid 128, 1, 1
{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ret;
}
"""
    k = pf.parse(src).kernel("small")
    with pytest.raises(LaunchError, match="at most 128 threads"):
        k.launch(grid=(1,), block=(256,), args=[None], device="cuda")


def test_tma_transpose_with_driver_tensor_maps():
    m = corpus_module("tma_bulk_sm90", "sm_90a.O3")
    H, W = 70, 100
    x = rng.standard_normal((H, W)).astype(np.float32)
    src = to_device(x, device="cuda")
    dst = to_device(np.full((W + 4, H + 2), -7.5, np.float32), device="cuda")
    in_map = tensor_map(src, np.float32, (W, H), (W * 4,), (32, 32))
    out_map = tensor_map(dst, np.float32, (H, W), ((H + 2) * 4,), (32, 32))
    m.kernel("tma_transpose_2d").launch(grid=(-(-W // 32), -(-H // 32)), block=(256,), args=[in_map, out_map],
                                        device="cuda")
    out = dst.to_host()
    np.testing.assert_array_equal(out[:W, :H], x.T)
    # dimension 0 is stored in 16-byte pieces: the 2 floats after each 70-float row are written too
    assert (out[:W, H:] == 0).all() and (out[W:] == -7.5).all()


@pytest.mark.parametrize("flavor", ["sm_90a.O3", "sm_90a.G"])
def test_cluster_kernels(flavor):
    m = corpus_module("cluster_sm90", flavor)
    nb = 6
    inp = rng.integers(-1000, 1000, nb * 128).astype(np.int32)
    out = np.zeros(nb // 2, np.int32)
    m.kernel("cluster_dsmem_reduce").launch(grid=(nb,), block=(128,), args=[inp, out], device="cuda")
    np.testing.assert_array_equal(out, inp.reshape(nb // 2, 256).sum(1))
    slots = np.zeros(4 * 8, np.int32)
    m.kernel("cluster_push_slots").launch(grid=(4,), block=(64,), args=[slots], cluster=(2, 1, 1), device="cuda")
    want = np.zeros((4, 8), np.int32)
    want[:, :2] = [1, 2]
    np.testing.assert_array_equal(slots.reshape(4, 8), want)


def test_dsl_auto_arch_targets_this_gpu():
    from ptxforge.dsl import kernel, ptr, st, tid, u32

    @kernel(arch="auto")
    def fill(out: ptr(u32), v: u32):
        st(out[tid.x], v)

    assert f".target {gpu_arch()}" in fill.ptx()
    out = np.zeros(32, np.uint32)
    fill.launch(grid=(1,), block=(32,), args=[out, np.uint32(7)], device="cuda")
    assert (out == 7).all()


def test_cli_run_on_the_gpu(tmp_path, capsys):
    from ptxforge.cli.main import main

    np.save(tmp_path / "a.npy", np.arange(256, dtype=np.float32))
    argv = ["run", str(DEMO), "--kernel", "vadd", "--block", "256", "--arg", str(tmp_path / "a.npy"),
            "--arg", str(tmp_path / "a.npy"), "--arg", f"{tmp_path / 'c.npy'}=zeros:256:float32", "--arg", "256",
            "--device", "cuda"]
    assert main(argv) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), 2 * np.arange(256, dtype=np.float32))
    assert main([*argv, "--sanitize"]) == 1
    assert "work on the emulator only" in capsys.readouterr().err


def test_cli_devices_lists_the_gpu(capsys):
    from ptxforge.cli.main import main

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert f"cuda:0   {cuda_device().name}, {cuda_device().arch}" in out
