"""CUDA IPC handles (ptxforge.runtime.cuda_ipc) without a GPU: the driver's 64 bytes round-trip through a
real cuda-bindings CUipcMemHandle, the handle pickles, and misuse is refused by name. Opening handles
between processes on a GPU is tests/gpu/test_ep_kernels_cuda_ipc.py."""

import os
import pickle

import numpy as np
import pytest

from ptxforge.emu import ipc as emu_ipc
from ptxforge.runtime import cuda_ipc
from ptxforge.runtime.cuda_ipc import CudaIpcError, CudaIpcHandle, handle_bytes, handle_from_bytes

RAW = bytes(range(64))


def test_handle_bytes_round_trip_through_a_cuda_bindings_handle():
    pytest.importorskip("cuda.bindings")
    h = handle_from_bytes(RAW)
    assert type(h).__name__ == "CUipcMemHandle"
    assert handle_bytes(h) == RAW
    with pytest.raises(CudaIpcError, match="64 bytes, not 3"):
        handle_from_bytes(b"abc")


def test_handle_pickles_with_its_fields():
    h = CudaIpcHandle(RAW, 4096, 1234, 0, 0x7F0000000000, "comm buffer 1")
    back = pickle.loads(pickle.dumps(h))
    assert back == h and back.raw == RAW and back.nbytes == 4096
    assert repr(back) == "CudaIpcHandle(comm buffer 1 of process 1234 on GPU 0, 4096 bytes)"
    with pytest.raises(CudaIpcError, match="64 bytes, not 63"):
        CudaIpcHandle(RAW[:63], 1, 1, 0, 0)


def test_the_same_calls_as_the_emulators_ipc():
    import inspect

    for name in ("ipc_get_mem_handle", "ipc_open_mem_handle", "ipc_close_mem_handle"):
        a, b = inspect.signature(getattr(cuda_ipc, name)), inspect.signature(getattr(emu_ipc, name))
        assert list(a.parameters) == list(b.parameters), name


def test_misuse_is_refused_by_name():
    from ptxforge.runtime.buffers import DeviceBuffer

    buf = DeviceBuffer((16,), np.uint8, device="emu", name="x")
    with pytest.raises(CudaIpcError, match="ipc_get_mem_handle needs a CUDA device"):
        cuda_ipc.ipc_get_mem_handle(buf)
    with pytest.raises(CudaIpcError, match="takes a CudaIpcHandle, not int"):
        cuda_ipc.ipc_open_mem_handle(5, device=buf.device)
    own = CudaIpcHandle(RAW, 16, os.getpid(), 0, 0x1000, "x")
    with pytest.raises(CudaIpcError, match="made in this process; use the buffer's address"):
        cuda_ipc.ipc_open_mem_handle(own, device=buf.device)
    other = CudaIpcHandle(RAW, 16, os.getpid() + 1, 0, 0x1000, "x")
    with pytest.raises(CudaIpcError, match="ipc_open_mem_handle needs a CUDA device"):
        cuda_ipc.ipc_open_mem_handle(other, device=buf.device)
    with pytest.raises(CudaIpcError, match="ipc_close_mem_handle needs a CUDA device"):
        cuda_ipc.ipc_close_mem_handle(0x1000, device=buf.device)
    buf.free()
