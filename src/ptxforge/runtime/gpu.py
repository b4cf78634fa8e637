"""Which GPU, if any, this machine has: its PTX target, for `arch="auto"`.

Asked of the CUDA driver through cuda-bindings when installed (the `cuda` extra), else of
`nvidia-smi`. Launching on the GPU is `cuda_device` / `Kernel.launch(device="cuda")`; this only names
the target.
"""

from __future__ import annotations

import functools
import subprocess

from ptxforge import environment
from ptxforge.runtime.cuda_driver import driver, unavailable_reason

# Targets whose arch-specific features (wgmma, setmaxnreg, tcgen05 ...) exist only with the 'a' suffix;
# for these the GPU's own target is the 'a' one, which also runs all the portable code.
_ARCH_SPECIFIC = frozenset({90, 100, 101, 103, 110, 120, 121})


def arch_for_capability(major: int, minor: int) -> str:
    """Compute capability (9, 0) -> 'sm_90a'; (8, 6) -> 'sm_86'."""
    sm = major * 10 + minor
    return f"sm_{sm}a" if sm in _ARCH_SPECIFIC else f"sm_{sm}"


@functools.lru_cache(maxsize=1)
def gpu_arch() -> str | None:
    """The PTX target of GPU 0, or None when there is no usable GPU."""
    cap = _capability_from_driver() or _capability_from_smi()
    return arch_for_capability(*cap) if cap else None


def _capability_from_driver() -> tuple[int, int] | None:
    if unavailable_reason() is not None:
        return None
    d = driver()
    try:
        err, dev = d.cuDeviceGet(0)
        attr = d.CUdevice_attribute
        err1, major = d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        err2, minor = d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    except Exception:  # a broken driver install means no usable GPU, not a crash
        return None
    if any(e != d.CUresult.CUDA_SUCCESS for e in (err, err1, err2)):
        return None
    return int(major), int(minor)


def _capability_from_smi() -> tuple[int, int] | None:
    smi = environment.which("nvidia-smi")  # absolute PATH entries only: never ./nvidia-smi
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    try:
        major, minor = first.split(".")
        return int(major), int(minor)
    except ValueError:
        return None
