"""One launch API over devices: `Kernel.launch(grid, block, args, device="auto"|"emu"|"cuda")`."""

from ptxforge.runtime.buffers import DeviceBuffer, empty, to_device
from ptxforge.runtime.kernel import Kernel, launch
from ptxforge.runtime.result import LaunchResult

__all__ = ["DeviceBuffer", "Kernel", "LaunchResult", "empty", "launch", "to_device"]
