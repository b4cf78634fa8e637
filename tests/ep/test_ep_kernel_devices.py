"""Which device and IPC layer backend="kernels" takes, by the device's kind: CUDA IPC on a GPU, emulator
IPC on an emulated GPU; without a GPU, asking for the CUDA path says why it cannot run."""

import pytest

from ptxforge.emu import ipc as emu_ipc
from ptxforge.ep import kernel_backend as KB
from ptxforge.errors import DeviceUnavailable
from ptxforge.runtime import cuda_ipc
from ptxforge.runtime.cuda_driver import unavailable_reason


def test_ipc_layer_by_device_kind():
    assert KB.ipc_module("cuda") is cuda_ipc
    assert KB.ipc_module("emu") is emu_ipc
    with pytest.raises(NotImplementedError, match="a device of kind 'hip' has no IPC"):
        KB.ipc_module("hip")


def test_emulated_comm_device_is_the_ranks_ipc_gpu():
    dev = KB.comm_device(0, 1, "emu")
    try:
        assert dev.kind == "emu" and dev.rank == 0 and dev.world == 1
        assert KB.comm_device(0, 1, "emu") is dev  # one a process, kept open
    finally:
        KB._IPC_DEVICES.pop((0, 1)).close()  # leave no segment behind in this test process
    with pytest.raises(ValueError, match="'cuda' or 'emu' devices, not 'tpu'"):
        KB.comm_device(0, 1, "tpu")


@pytest.mark.skipif(unavailable_reason() is None, reason="checks a machine without a GPU")
def test_cuda_comm_device_without_a_gpu_says_why():
    with pytest.raises(DeviceUnavailable) as e:
        KB.comm_device(0, 2, "cuda")
    assert str(e.value) == unavailable_reason()


@pytest.mark.skipif(unavailable_reason() is not None, reason="needs a GPU")
@pytest.mark.gpu
def test_cuda_comm_device_on_a_gpu():
    dev = KB.comm_device(0, 2, "cuda", 0)
    assert dev.kind == "cuda" and dev.ordinal == 0
    assert KB.IpcFabric(dev, None, 2).ipc is cuda_ipc
