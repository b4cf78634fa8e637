"""The backends of `Buffer`, one interface (`base.Backend`): `torch_transport.TorchBackend` (all_to_all over
the process group) and `kernels.KernelsBackend` (the DSL communication kernels)."""

from ptxforge.ep.backends.base import Backend, CombineCall, DispatchCall, EPGroup, LowLatencyOps
from ptxforge.ep.backends.kernels import KernelsBackend
from ptxforge.ep.backends.torch_transport import TorchBackend

BACKENDS: dict[str, type[Backend]] = {"torch": TorchBackend, "kernels": KernelsBackend}


def backend_class(name: str) -> type[Backend]:
    """The backend named `name` ("torch" or "kernels")."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be 'torch' or 'kernels', got {name!r}")
    return BACKENDS[name]


__all__ = ["BACKENDS", "Backend", "CombineCall", "DispatchCall", "EPGroup", "KernelsBackend", "LowLatencyOps",
           "TorchBackend", "backend_class"]
