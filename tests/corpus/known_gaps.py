"""Known gaps of the compatibility sweep: corpus files or kernels that fail a stage today, with the bug named.

Tests read this one table and mark the matching cases as strict xfails, so a fix shows up as an XPASS
failure and its line here must then be deleted. Keys: (file glob relative to tests/corpus/, stage, kernel
or None for every kernel of the file). Stages: "check" (the validator finds no error), "emulate" (the
emulator runs the kernel and matches the numpy reference), "sanitize" (the sanitizer reports nothing on a
correct kernel).
"""

from __future__ import annotations

import fnmatch

LABELS = ("block-scoped labels: a label declared inside `{ }` is local to that block in PTX; ptxforge "
          "treats labels as function-wide (validator: 'already declared'; emulator: jumps to the last one)")
WARP_SZ = "WARP_SZ (CUDA's warpSize) is not a known constant: 'not declared' in check, refused by the emulator"
EXPECT_TX_LANES = ("mbarrier.expect_tx executed by several lanes at once: internal error 'truth value of an array "
                   "is ambiguous' (libcu++'s memcpy_async with a cuda::barrier on sm_90)")
SYNC = ("sanitizer: the race checker does not follow release/acquire synchronization through atomics, flags "
        "and fences (st.release/ld.acquire, red.release, atom + fence.acq_rel locks), nor mbarrier.inval after "
        "the last phase: correct handoffs are reported as races")
COOP_LAUNCH = ("cooperative launch is not modeled: grid.sync() reads its grid-barrier workspace from "
               "%envreg1/%envreg2, which the emulator sets to 0")

KNOWN_GAPS: dict[tuple[str, str, str | None], str] = {
    ("ptx/cuda/cute_style_tiles.*.O3.ptx", "check", None): LABELS,
    ("ptx/*/gemm_style_sync_sm90a.*", "check", None): LABELS,
    ("ptx/*/gemm_style_sync_sm90a.*", "emulate", "gemm_sync_labeled_wait"): LABELS,
    ("ptx/cuda/warp_softmax_warpsize.*", "check", None): WARP_SZ,
    ("ptx/cuda/warp_softmax_warpsize.*", "emulate", None): WARP_SZ,
    ("ptx/*/coop_groups.*", "emulate", "cg_grid_sync_shift"): COOP_LAUNCH,
    ("ptx/cuda/libcu_pipeline_barrier.sm_90a.*", "emulate", "barrier_memcpy_reverse"): EXPECT_TX_LANES,
    ("ptx/*/libcu_pipeline_barrier.*", "sanitize", "pipe_block_stages"): SYNC,
    ("ptx/*/libcu_atomics.*", "sanitize", "atomic_flag_handoff"): SYNC,
    ("ptx/*/ep_style_asm.*", "sanitize", "ep_channel_handoff"): SYNC,
    ("ptx/*/ep_style_asm.*", "sanitize", "ep_ticket_lock"): SYNC,
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
