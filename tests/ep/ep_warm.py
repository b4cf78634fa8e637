"""Called by the rank tests' world fixtures just before they fork the ranks (see ptxforge.ep.spawn): builds and
runs, once, the kernels the checks launch on the emulator, so every rank inherits them compiled instead of
compiling its own. Nothing runs at import: collecting the tests (on every xdist worker) costs nothing here."""

import torch


def warm() -> None:
    """The DSL kernels every backend's checks launch with device="emu" (quantization, routing, layout)."""
    from ptxforge.kernels import ops

    x = torch.ones((1, 256), dtype=torch.bfloat16)
    for packed in (False, True):
        q, s = ops.per_token_cast_to_fp8(x, packed_ue8m0=packed)
        ops.per_token_cast_back(q, s)
    ops.per_token_cast_to_fp8(x, round_scale=True)
    idx = torch.zeros((1, 4), dtype=torch.int64)
    for ranks, groups in ((4, 4), (8, 2)):
        ops.route(torch.zeros((1, 32)), torch.zeros(32), n_group=groups, topk_group=2, topk=4)
        ops.get_dispatch_layout(idx, 32, ranks, 4)


def warm_comm(ranks: int = 4) -> None:
    """Trace the communication kernels the kernel-backend checks specialize (for `ranks` ranks)."""
    from ptxforge.ep.intranode import _special
    from ptxforge.kernels import comm

    for scales in (False, True):
        for topk in (False, True):
            _special(comm.intranode_dispatch, R=ranks, UNIT=16, HAS_SCALES=scales, HAS_TOPK=topk, HAS_W=topk,
                     BUG="").module()
    for bias in (0, 2):
        for w in (False, True):
            _special(comm.intranode_combine, R=ranks, UNIT=16, NUM_BIAS=bias, HAS_W=w).module()
