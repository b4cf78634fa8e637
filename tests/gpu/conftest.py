"""GPU tests: collected only where a CUDA driver and GPU can be used (scripts/gpu_check.sh runs them)."""

from ptxforge.runtime.kernel import cuda_available

if not cuda_available():
    collect_ignore_glob = ["test_*.py"]
