"""Point-to-point plumbing of the executor: the shapes/dtype of the tensors pipeline stages exchange, buffer
allocation and the backend check (gloo for CPU tensors, NCCL for CUDA tensors)."""

from __future__ import annotations

import torch
import torch.distributed as dist

TENSOR_SHAPES: list[tuple[int, ...]] | None = None
TENSOR_DTYPE: torch.dtype | None = None


def set_p2p_tensor_shapes(shapes: list[tuple[int, ...]]) -> None:
    """Shapes of the tensors one stage sends to the next (one micro-batch); the same list for every stage."""
    global TENSOR_SHAPES
    TENSOR_SHAPES = [tuple(int(d) for d in s) for s in shapes]


def set_p2p_tensor_dtype(dtype: torch.dtype) -> None:
    """Dtype of the tensors stages exchange."""
    global TENSOR_DTYPE
    TENSOR_DTYPE = dtype


def require_configured() -> None:
    if TENSOR_SHAPES is None or TENSOR_DTYPE is None:
        raise RuntimeError("call set_p2p_tensor_shapes(...) and set_p2p_tensor_dtype(...) before step(): the "
                           "receiving rank must know the shapes and dtype of the incoming activations")


def recv_buffers(device: torch.device) -> list[torch.Tensor]:
    """Fresh receive buffers (leaves that require grad, so their .grad is the gradient to send back)."""
    require_configured()
    assert TENSOR_SHAPES is not None
    return [torch.empty(s, dtype=TENSOR_DTYPE, device=device, requires_grad=True) for s in TENSOR_SHAPES]


def check_backend(group: dist.ProcessGroup, device: torch.device) -> str:
    """Return the group's backend string; raise if it cannot move tensors of `device` point to point."""
    backend = str(dist.get_backend(group)).lower()
    need = "nccl" if device.type == "cuda" else "gloo"
    if need not in backend and "mpi" not in backend and not (device.type == "cuda" and "ucc" in backend):
        raise RuntimeError(f"the pipeline stages live on {device.type} but the process group's backend is "
                           f"{backend!r}; use backend='{need}' (or 'cpu:gloo,cuda:nccl') for {device.type} tensors")
    return backend
