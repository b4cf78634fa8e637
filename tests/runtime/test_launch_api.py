"""The launch API: argument checking before anything runs, device buffers, None, results, CLI run."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.runtime import DeviceBuffer, empty, to_device

PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry scale(.param .u64 x, .param .u64 y, .param .f32 s, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.f32 %f1, [s];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r5, %r3, %r4, %r2;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra $END;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.rn.f32 %f3, %f2, %f1;
    st.global.f32 [%rd5], %f3;
$END:
    ret;
}
"""


@pytest.fixture
def k():
    return pf.parse(PTX, filename="scale.ptx").kernel("scale")


def test_arrays_in_and_out(k):
    x = np.arange(300, dtype=np.float32)
    y = np.zeros_like(x)
    r = k.launch(grid=(2,), block=(256,), args=[x, y, 2.0, 300], device="emu")
    np.testing.assert_array_equal(y, 2 * x)
    assert r.thread_instructions > 0 and r.wall_s > 0 and r.per_sm.sum() == r.thread_instructions
    assert "scale" in str(r) and r.rate > 0


def test_device_buffers_persist(k):
    xb = to_device(np.arange(64, dtype=np.float32), device="emu")
    yb = empty((64,), np.float32, device="emu")
    k.launch(grid=(1,), block=(64,), args=[xb, yb, np.float32(3), np.uint32(64)])
    k.launch(grid=(1,), block=(64,), args=[yb, yb, np.float32(0.5), np.uint32(64)])
    np.testing.assert_array_equal(yb.to_host(), 1.5 * np.arange(64, dtype=np.float32))
    assert isinstance(yb, DeviceBuffer)
    yb.free()
    with pytest.raises(ValueError, match="freed"):
        yb.to_host()


def test_null_pointer_with_no_work(k):
    k.launch(grid=(1,), block=(32,), args=[None, None, 1.0, 0])


@pytest.mark.parametrize("args, match", [
    ([np.zeros(4, np.float32)], "takes 4 argument"),
    ([np.zeros(4), np.zeros(4), 1.0, -1], "does not fit .u32"),
    ([np.zeros(4), np.zeros(4), 1.0, 2.5], "expected an integer"),
    ([np.zeros(4), np.zeros(4), np.float64(1.0), 4], "32-bit float"),
    ([np.zeros(4), np.zeros(4), np.int32(1), 4], "expected a float"),
    ([np.zeros(4), 7.0, 1.0, 4], "y is a pointer; expected an array"),
    ([np.zeros(4), np.zeros(4), 1.0, np.int64(4)], "32-bit integer"),
    ([np.zeros(4), np.zeros(4), np.zeros(4), 4], "needs a 64-bit integer parameter"),
])
def test_bad_arguments_rejected_before_running(k, args, match):
    sentinel = np.full(4, 7, np.float32)
    if len(args) == 4 and isinstance(args[0], np.ndarray):
        args[0] = sentinel
    with pytest.raises(LaunchError, match=match):
        k.launch(grid=(1,), block=(4,), args=args)
    assert (sentinel == 7).all()


def test_bad_launch_configuration(k):
    x = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match="1024"):
        k.launch(grid=(1,), block=(2048,), args=[x, x, 1.0, 4])
    with pytest.raises(LaunchError, match="positive"):
        k.launch(grid=(0,), block=(1,), args=[x, x, 1.0, 4])
    with pytest.raises(LaunchError, match="unknown device"):
        k.launch(grid=(1,), block=(1,), args=[x, x, 1.0, 4], device="tpu")
    r = k.launch(grid=(1,), block=(4,), args=[x, x, 1.0, 4], device="auto")
    from ptxforge.runtime.kernel import cuda_available

    assert r.device == ("cuda" if cuda_available() else "emu")


def test_kernel_lookup_lists_kernels():
    m = pf.parse(PTX, filename="scale.ptx")
    with pytest.raises(KeyError, match="scale"):
        m.kernel("nope")


def test_cli_run(tmp_path, capsys):
    from ptxforge.cli.main import main

    p = tmp_path / "scale.ptx"
    p.write_text(PTX)
    np.save(tmp_path / "x.npy", np.arange(10, dtype=np.float32))
    rc = main(["run", str(p), "--grid", "1", "--block", "32", "--arg", str(tmp_path / "x.npy"),
               "--arg", f"{tmp_path / 'y.npy'}=zeros:10:float32", "--arg", "4", "--arg", "10"])
    assert rc == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), 4 * np.arange(10, dtype=np.float32))
    assert "thread-instructions" in capsys.readouterr().err
    assert main(["run", str(p), "--arg", "1"]) == 1
    assert "takes 4 argument" in capsys.readouterr().err
    assert main(["run", str(p), "--grid", "0", "--arg", "null", "--arg", "null", "--arg", "1",
                 "--arg", "1"]) == 1
