"""One launch API over devices: `Kernel.launch(grid, block, args, device="auto"|"emu"|"cuda")`."""

from ptxforge.runtime.buffers import DeviceBuffer, empty, to_device
from ptxforge.runtime.kernel import Kernel, launch
from ptxforge.runtime.launch_config import EmulatorOptions, LaunchConfig
from ptxforge.runtime.occupancy import occupancy
from ptxforge.runtime.resources import resource_usage
from ptxforge.runtime.result import LaunchResult
from ptxforge.runtime.sass import sass
from ptxforge.runtime.tensor_map import tensor_map, tensor_map_im2col

__all__ = ["DeviceBuffer", "EmulatorOptions", "Kernel", "LaunchConfig", "LaunchResult", "empty", "launch", "occupancy",
           "resource_usage", "sass", "tensor_map", "tensor_map_im2col", "to_device"]
