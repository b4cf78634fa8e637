"""`Device`: what the runtime asks of a device, so that no launch path tells devices apart by their class.

Three classes satisfy it structurally (none inherits from it): the emulator's `ptxforge.emu.EmuDevice`, a
`ptxforge.emu.Node`'s `NodeGpu`, and a GPU's `ptxforge.runtime.cuda_device.CudaDevice`. `kind` says which
launch path runs ("emu": the SIMT emulator, with its options: sanitize, num_sms, printf capture,
time_limit_s; "cuda": the driver), the rest is the same on every device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ptxforge.ptx import ir

DEVICE_KINDS = ("emu", "cuda")


@runtime_checkable
class DeviceMemory(Protocol):
    """A device's global memory: allocations with a device address `base`, copies in and out."""

    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> Any: ...

    def free(self, alloc: Any) -> None: ...

    def write(self, alloc: Any, data: Any) -> None: ...

    def read(self, alloc: Any) -> np.ndarray: ...


@runtime_checkable
class Device(Protocol):
    """A device kernels launch on and buffers live on."""

    @property
    def kind(self) -> str:
        """ "emu" or "cuda": which launch path runs, and `LaunchResult.device`."""
        ...

    @property
    def name(self) -> str:
        """Its short name: "the emulator", "GPU 1 of the emulated node", the GPU's own ("NVIDIA H200")."""
        ...

    @property
    def description(self) -> str:
        """The device as messages name it: "the emulator", "GPU 0 (NVIDIA H200)"."""
        ...

    @property
    def num_sms(self) -> int: ...

    @property
    def max_shared_per_block(self) -> int:
        """Bytes of shared memory (static plus dynamic) one block may use."""
        ...

    @property
    def memory(self) -> DeviceMemory: ...

    def owns_address(self, address: int) -> bool:
        """Whether `address` lies in live device memory this device's kernels may use as it is."""
        ...

    def write_global(self, module: ir.Module, name: str, raw: np.ndarray, offset: int = 0) -> None:
        """Copy bytes into the module-scope variable `name` of `module` as loaded on this device."""
        ...

    def synchronize(self) -> None:
        """Wait for (or run) the work queued on this device."""
        ...


def is_emulated(device: Device) -> bool:
    """Whether launches on `device` run on the emulator (and take its options)."""
    return device.kind == "emu"


if TYPE_CHECKING:  # checked by mypy (`make lint`): each device class satisfies the protocol
    from ptxforge.emu.launch import EmuDevice
    from ptxforge.emu.node import NodeGpu
    from ptxforge.runtime.cuda_device import CudaDevice

    def _conforms(emu: EmuDevice, node_gpu: NodeGpu, gpu: CudaDevice) -> tuple[Device, Device, Device]:
        return emu, node_gpu, gpu
