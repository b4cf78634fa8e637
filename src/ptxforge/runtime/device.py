"""`Device`: what the runtime asks of a device, so that no launch path tells devices apart by their class.

Four classes satisfy it structurally (none inherits from it): the emulator's `ptxforge.emu.EmuDevice`, a
`ptxforge.emu.Node`'s `NodeGpu`, an emulator IPC rank's `ptxforge.emu.ipc.IpcDevice`, and a GPU's
`ptxforge.runtime.cuda_device.CudaDevice`. `kind` says which launch path runs ("emu": the SIMT emulator, with
its options: sanitize, num_sms, printf capture, time_limit_s; "cuda": the driver), the rest is the same on
every device: what differs between devices (a node to synchronize, streams, a GPU index for reports, a note on
a foreign address) is a member every device answers, never an attribute a caller probes for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.emu.node import Node, Stream

DEVICE_KINDS = ("emu", "cuda")


@runtime_checkable
class DeviceMemory(Protocol):
    """A device's global memory: allocations with a device address `base`, copies in and out."""

    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> Any: ...

    def free(self, alloc: Any) -> None: ...

    def write(self, alloc: Any, data: Any) -> None: ...

    def read(self, alloc: Any) -> np.ndarray: ...

    def view(self, alloc: Any) -> np.ndarray:
        """The allocation's bytes to read now: a view of them where device memory is host memory (the
        emulator's; valid until the next allocation), a copy on a GPU."""
        ...


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

    @property
    def node(self) -> Node | None:
        """The emulated `ptxforge.emu.Node` this device is a GPU of (its stream launches run when the node
        synchronizes; its peers' buffers are reachable from its kernels); None for every other device."""
        ...

    @property
    def gpu(self) -> int | None:
        """Its index among the emulated GPUs it works with (a node GPU's index, an IPC device's rank), which
        errors and sanitizer reports name; None for a lone emulated device and a CUDA GPU."""
        ...

    @property
    def streams_supported(self) -> bool:
        """Whether `stream()` gives a stream `Kernel.launch(stream=...)` queues on (a GPU of an emulated node)."""
        ...

    def stream(self, sms: Iterable[int] | None = None, priority: int = 0) -> Stream:
        """A new stream whose launches run in order on the SMs `sms` (default all); a LaunchError naming the
        device where `streams_supported` is False."""
        ...

    def owns_address(self, address: int) -> bool:
        """Whether `address` lies in live device memory a kernel launched here may take as it is (a node GPU:
        any GPU's of its node, a peer whose access is disabled included: the kernel's access then faults)."""
        ...

    def address_note(self, address: int) -> str:
        """Why `address` is not live memory here when the device knows more than "no allocation" (an IPC
        device: a peer's memory not opened, or a closed peer), as a clause for an error message; else ""."""
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
    from ptxforge.emu.ipc import IpcDevice
    from ptxforge.emu.launch import EmuDevice
    from ptxforge.emu.node import NodeGpu
    from ptxforge.runtime.cuda_device import CudaDevice

    def _conforms(emu: EmuDevice, node_gpu: NodeGpu, ipc: IpcDevice,
                  gpu: CudaDevice) -> tuple[Device, Device, Device, Device]:
        return emu, node_gpu, ipc, gpu
