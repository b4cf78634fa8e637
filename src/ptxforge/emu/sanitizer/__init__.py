"""The sanitizer of the CPU emulator: memory errors, races and synchronization bugs in PTX kernels.

`kernel.launch(..., device="emu", sanitize=True)` (or `ptxforge run --sanitize --report FILE`) runs the
kernel under a `Sanitizer` and raises `SanitizerError` at the end if anything was found, after the
results of the in-bounds work were copied back. Pass a `Sanitizer(...)` instead of True for options
(`shuffle_seed`, `max_reports`, `races=False` ...); its `.reports` stay readable after the launch.

What it checks, for every thread of every block:
- out-of-bounds and misaligned accesses in every state space (the bad lanes are skipped, the rest run);
  in shared memory, bytes outside the shared variables the kernel uses count as out of bounds;
- uninitialized values, reported where they are used (an address, a guard or branch condition, a
  warp-collective operand, a store to other memory), not where they are loaded (definedness.py):
  shared memory, global memory no allocation held at launch (device malloc), local memory with
  `Sanitizer(init_local=True)`; `Sanitizer(eager=True)` reports at the load;
- races (byte-accurate) on shared and global memory: conflicting accesses, at least one a plain store,
  that neither a barrier, `bar.warp.sync`, an mbarrier phase nor a release/acquire pair of sufficient
  scope orders (the PTX memory model's causality order, order.py; too narrow a scope is named); a store
  of the value already there is not a race; the check does not depend on the order warps run in;
- barrier divergence (threads of a block released from different aligned barrier instructions);
- member masks of shfl/vote/match/redux/elect/bar.warp.sync (a lane outside its own mask, masks that
  disagree, named lanes that take another path);
- use of cp.async / cp.async.bulk destinations before the wait that completes them;
- reads of Blackwell tensor memory (tcgen05.ld, tcgen05.mma with enable-input-d) that no tcgen05.st or
  tcgen05.mma wrote since tcgen05.alloc, and tcgen05.ld of an MMA's result before a thread of the block
  saw the mbarrier phase of the issuing thread's tcgen05.commit. Other tensor-memory orderings (st/ld
  between warps, the waits of tcgen05.ld/st) are not checked.
"""

from ptxforge.emu.sanitizer.core import Sanitizer
from ptxforge.emu.sanitizer.report import ReportLog, SanitizerError, SanitizerReport, report_json, write_json

__all__ = ["Sanitizer", "SanitizerError", "SanitizerReport", "ReportLog", "report_json", "write_json"]
