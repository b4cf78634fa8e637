"""Every environment variable ptxforge reads, each with one validated reader (docs/environment.md lists them).

A value that cannot be used is an `EnvironmentVariableError` naming the variable, the value and what is
expected, never a raw ValueError or a silent guess. Paths to tools must be absolute: a relative
`CUDA_HOME` or an empty/relative PATH entry would run whatever sits in the current directory.
This module imports nothing of ptxforge but `ptxforge.errors`, so every layer may read the environment here.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

from ptxforge.errors import Error, LaunchError

DEVICE_NAMES = ("auto", "emu", "cuda")  # and "cuda:N"
_CUDA_ORDINAL = re.compile(r"^cuda:\d+$")
_OFF = ("off", "0", "none")


class EnvironmentVariableError(Error, ValueError):
    """An environment variable holds a value ptxforge cannot use; the message names it and what it expects."""

    def __init__(self, name: str, value: str, expected: str) -> None:
        super().__init__(f"environment variable {name}={value!r}: {expected}")
        self.name, self.value = name, value


class DeviceVariableError(EnvironmentVariableError, LaunchError):
    """PTXFORGE_DEVICE names no device: the launches that would read it are refused (a LaunchError too)."""


def _get(name: str) -> str | None:
    """The variable's value with surrounding blanks removed; None when unset or empty."""
    value = os.environ.get(name)
    return value.strip() if value is not None and value.strip() else None


def device() -> str | None:
    """PTXFORGE_DEVICE: where launches that name no device run ("auto", "emu", "cuda", "cuda:N"); None if unset."""
    value = _get("PTXFORGE_DEVICE")
    if value is None:
        return None
    if value not in DEVICE_NAMES and not _CUDA_ORDINAL.match(value):
        raise DeviceVariableError("PTXFORGE_DEVICE", value, f"unknown device {value!r}; expected auto, emu, cuda "
                                  f"or cuda:N")
    return value


def cache_dir() -> Path | None:
    """The ptxas cache's folder: PTXFORGE_CACHE_DIR (absolute, or off/0/none to turn the cache off), else
    $XDG_CACHE_HOME/ptxforge (a relative XDG_CACHE_HOME is ignored, as the XDG spec says), else
    ~/.cache/ptxforge. None when the cache is off."""
    if "PTXFORGE_CACHE_DIR" in os.environ:
        value = _get("PTXFORGE_CACHE_DIR")
        if value is None or value.lower() in _OFF:
            return None
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise EnvironmentVariableError("PTXFORGE_CACHE_DIR", value, "expected an absolute folder (or off): a "
                                           "relative one would make the cache depend on the current directory")
        return path
    xdg = _get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg is not None and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "ptxforge"


def _absolute_folder(name: str, what: str) -> Path | None:
    value = _get(name)
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise EnvironmentVariableError(name, value, f"expected an absolute path to {what}; ptxforge runs tools "
                                       f"only from absolute paths (a relative one means the current directory)")
    return path


def cuda_home() -> Path | None:
    """CUDA_HOME, else CUDA_PATH: the CUDA toolkit's folder (absolute); None if neither is set."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        path = _absolute_folder(name, "the CUDA toolkit (the folder holding bin/ptxas)")
        if path is not None:
            return path
    return None


def nvdisasm_path() -> Path | None:
    """NVDISASM_PATH: the folder holding nvdisasm (absolute); None if unset."""
    return _absolute_folder("NVDISASM_PATH", "the folder holding nvdisasm")


def search_path() -> list[str]:
    """PATH's absolute entries ('' and '.' and other relative entries mean the current directory: skipped)."""
    return [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(d)]


def which(name: str) -> Path | None:
    """The executable `name` in an absolute PATH entry, or None."""
    found = shutil.which(name, path=os.pathsep.join(search_path()))
    return Path(found) if found else None


def local_world_size() -> int | None:
    """LOCAL_WORLD_SIZE (torchrun's ranks per node): a whole number of at least 1; None if unset."""
    value = _get("LOCAL_WORLD_SIZE")
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise EnvironmentVariableError("LOCAL_WORLD_SIZE", value, "expected the number of ranks per node, a whole "
                                       "number of at least 1")
    return int(value)


def nic_transport() -> str | None:
    """PTXFORGE_NIC_TRANSPORT: how the NICs of a `ptxforge.emu.ClusterRank` job reach other processes, "shm"
    (shared memory, one machine) or "dist" (torch.distributed point-to-point); None if unset."""
    value = _get("PTXFORGE_NIC_TRANSPORT")
    if value is None:
        return None
    if value not in ("shm", "dist"):
        raise EnvironmentVariableError("PTXFORGE_NIC_TRANSPORT", value, "expected shm (shared memory between the "
                                       "processes of one machine) or dist (torch.distributed point-to-point)")
    return value


def torchrun_rank() -> tuple[int, int] | None:
    """(RANK, WORLD_SIZE) when both are set (torchrun's, or `init_method="env://"`'s): whole numbers, the rank
    below the size; None if either is unset."""
    rank, size = _get("RANK"), _get("WORLD_SIZE")
    if rank is None or size is None:
        return None
    if not size.isdigit() or int(size) < 1:
        raise EnvironmentVariableError("WORLD_SIZE", size, "expected the number of processes, a whole number of "
                                       "at least 1")
    if not rank.isdigit() or int(rank) >= int(size):
        raise EnvironmentVariableError("RANK", rank, f"expected this process's rank, a whole number below "
                                       f"WORLD_SIZE={size}")
    return int(rank), int(size)


def malloc_tuned_by_user() -> bool:
    """MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ set (glibc's own tunables): the emulator leaves malloc
    as the user tuned it."""
    return "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ


def green_contexts() -> bool:
    """PTXFORGE_GREEN_CONTEXTS: 1 (default) lets the communication kernels use green contexts on a GPU, 0 not."""
    value = _get("PTXFORGE_GREEN_CONTEXTS")
    if value is None or value == "1":
        return True
    if value == "0":
        return False
    raise EnvironmentVariableError("PTXFORGE_GREEN_CONTEXTS", value, "expected 0 or 1")


def validate_launches() -> bool:
    """PTXFORGE_VALIDATE: 1 (default; also true/yes/on) validates a module before its first launch, 0 (also
    false/no/off) skips it."""
    value = _get("PTXFORGE_VALIDATE")
    if value is None or value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise EnvironmentVariableError("PTXFORGE_VALIDATE", value, "expected 1 or 0 (true/false, yes/no, on/off)")


def emu_reference() -> bool:
    """PTXFORGE_EMU_REFERENCE: 1 runs every emulated launch in reference mode (each instruction through its
    semantics function, no fast path), 0 (default) the fast paths where they apply."""
    value = _get("PTXFORGE_EMU_REFERENCE")
    if value is None or value == "0":
        return False
    if value == "1":
        return True
    raise EnvironmentVariableError("PTXFORGE_EMU_REFERENCE", value, "expected 0 or 1")


def pipeline_timeout_s() -> str | None:
    """PTXFORGE_PIPELINE_TIMEOUT_S as written (the pipeline executor checks it is a positive number of
    seconds, naming the variable); None if unset."""
    return _get("PTXFORGE_PIPELINE_TIMEOUT_S")


def nvrtc_path() -> str | None:
    """PTXFORGE_NVRTC: the NVRTC library (or its folder) to use, an absolute path; None if unset."""
    value = _get("PTXFORGE_NVRTC")
    if value is not None and not os.path.isabs(value):
        raise EnvironmentVariableError("PTXFORGE_NVRTC", value, "expected an absolute path to libnvrtc.so or "
                                       "its folder")
    return value


def triton_emulation() -> tuple[bool, bool, str]:
    """(on, sanitize, arch) from PTXFORGE_TRITON (1 runs Triton launches on the emulator), PTXFORGE_TRITON_SANITIZE
    (1 runs them sanitized) and PTXFORGE_TRITON_ARCH (the target compiled for, sm_90a by default)."""
    flags = []
    for name in ("PTXFORGE_TRITON", "PTXFORGE_TRITON_SANITIZE"):
        value = _get(name)
        if value not in (None, "0", "1"):
            raise EnvironmentVariableError(name, str(value), "expected 0 or 1")
        flags.append(value == "1")
    return flags[0], flags[1], _get("PTXFORGE_TRITON_ARCH") or "sm_90a"


def emu_tier() -> str | None:
    """PTXFORGE_EMU_TIER as written (auto, native or interp: the emulator checks it, naming the variable)."""
    return _get("PTXFORGE_EMU_TIER")


def native_level() -> str | None:
    """PTXFORGE_NATIVE_LEVEL as written (auto, quick or opt: the emulator checks it, naming the variable)."""
    return _get("PTXFORGE_NATIVE_LEVEL")


def native_spin_s() -> float | None:
    """PTXFORGE_NATIVE_SPIN_S: seconds the native tier's helper threads stay awake after a launch for the next one
    (0 to 1; 0: they sleep at once, spending no CPU between launches); None if unset."""
    value = _get("PTXFORGE_NATIVE_SPIN_S")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= 1:
        raise EnvironmentVariableError("PTXFORGE_NATIVE_SPIN_S", value, "expected seconds from 0 to 1 (0: no spin)")
    return seconds
