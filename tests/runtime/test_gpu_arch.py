"""`arch="auto"`: the GPU's own target, else sm_90a."""

import shutil

import pytest

from ptxforge.dsl.kernel import DEFAULT_ARCH, resolve_arch
from ptxforge.runtime import gpu


@pytest.mark.parametrize("cap,arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 6), "sm_86"), ((8, 9), "sm_89"),
                                      ((10, 0), "sm_100a"), ((12, 0), "sm_120a"), ((7, 5), "sm_75")])
def test_capability_to_target(cap, arch):
    assert gpu.arch_for_capability(*cap) == arch


def test_auto_uses_the_gpu_target_or_the_default(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_arch", lambda: "sm_86")
    assert resolve_arch("auto") == "sm_86"
    monkeypatch.setattr(gpu, "gpu_arch", lambda: None)
    assert resolve_arch("auto") == resolve_arch(None) == DEFAULT_ARCH == "sm_90a"
    assert resolve_arch("sm_80") == "sm_80"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_no_gpu_here_means_none():
    gpu.gpu_arch.cache_clear()
    assert gpu.gpu_arch() is None
