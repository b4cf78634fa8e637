"""Known gaps of the compatibility sweep: corpus files or kernels that fail a stage today, with the bug named.

Tests read this one table and mark the matching cases as strict xfails, so a fix shows up as an XPASS
failure and its line here must then be deleted. Keys: (file glob relative to tests/corpus/, stage, kernel
or None for every kernel of the file). Stages: "check" (the validator finds no error), "emulate" (the
emulator runs the kernel and matches the numpy reference), "sanitize" (the sanitizer reports nothing on a
correct kernel).
"""

from __future__ import annotations

import fnmatch

KNOWN_GAPS: dict[tuple[str, str, str | None], str] = {
}


def known_gap(path: str, stage: str, kernel: str | None = None) -> str | None:
    """The reason `path` (relative to tests/corpus/) is expected to fail `stage` for `kernel`, else None.

    With kernel=None only gaps of the whole file match; with a kernel name, gaps of the file or the kernel.
    """
    for (pattern, st, k), reason in KNOWN_GAPS.items():
        if st == stage and fnmatch.fnmatch(path, pattern) and (k is None or k == kernel):
            return reason
    return None


def xfail_marks(path: str, stage: str, kernel: str | None = None) -> list:
    """pytest marks for a parametrized case: a strict xfail when the table lists it, else none."""
    import pytest

    reason = known_gap(path, stage, kernel)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
