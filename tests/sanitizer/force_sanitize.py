"""A pytest plugin that runs every emulator launch under the sanitizer (like wrapping a test run in
compute-sanitizer): a kernel with an error then fails its test with a SanitizerError.

    PYTHONPATH=tests/sanitizer python -m pytest -p force_sanitize tests/emu -k "not semantics"

Used to check the emulator's own conformance kernels for false positives; tests that launch a
deliberately faulty kernel and expect a MemoryFault fail with the SanitizerError that reports it.
"""

from ptxforge.runtime import kernel as _kernel

_launch = _kernel.Kernel.launch


def _sanitized_launch(self, grid=(1,), block=(1,), args=(), **kwargs):
    if kwargs.get("device", "auto") in ("auto", "emu") and not kwargs.get("sanitize"):
        kwargs["sanitize"] = True
    return _launch(self, grid, block, args, **kwargs)


_kernel.Kernel.launch = _sanitized_launch
