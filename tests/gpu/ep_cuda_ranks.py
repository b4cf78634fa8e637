"""Rank functions of the GPU test of backend="kernels": every rank's process on the one GPU (ordinal 0),
gloo for the process group, CUDA tensors in and out, so Buffer picks the CUDA path (CUDA IPC buffers)."""

from __future__ import annotations

import torch
from ep_checks import E
from kernel_cases import FORMS, NUM_SMS, plain, run_case


def _cuda(obj):
    if isinstance(obj, tuple | list):
        return type(obj)(_cuda(o) for o in obj)
    return obj.cuda() if isinstance(obj, torch.Tensor) else obj


def kernels_cuda_rank(rank: int, world: int) -> tuple[dict, dict]:
    """run_case's calls on a backend="kernels" Buffer with CUDA inputs, for every form and num_sms; and per
    num_sms how the kernels were held to it (`Buffer.sm_budget()`: a green context, or the persistent grid)."""
    import ptxforge.ep as deep_ep

    torch.cuda.set_device(0)  # several ranks on one GPU: CUDA IPC between processes of one device
    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world, timeout_s=60, backend="kernels")

    def dispatch(x, idx, w, **kw):
        x = _cuda(x)
        if idx is None:
            return buf.dispatch(x, **kw)
        idx, w = idx.cuda(), w.cuda()
        ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
        return buf.dispatch(x, num_tokens_per_rank=ntr.cuda(), is_token_in_rank=in_rank.cuda(),
                            num_tokens_per_expert=nte.cuda(), topk_idx=idx, topk_weights=w, **kw)

    def combine(x, handle, **kw):
        return buf.combine(_cuda(x), handle, **{k: _cuda(v) for k, v in kw.items()})

    out, budgets = {}, {}
    for form in FORMS:
        for num_sms in NUM_SMS:
            res = run_case(dispatch, combine, rank, form, num_sms)
            assert buf._comm_rank.device.kind == "cuda", "the CUDA path did not run"
            out[(form, num_sms)] = plain(res)
            budgets[num_sms] = buf.sm_budget()
    buf.destroy()  # closes the green contexts
    return out, budgets
