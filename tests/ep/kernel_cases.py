"""Inputs shared by the kernel-backend tests: each rank's x (BF16, or FP8 + scales), top-k and weights, and
what the torch backend returns for them on real gloo ranks (the reference the kernels must match bit for bit)."""

from __future__ import annotations

import torch
from ep_checks import E, H, T, encoded_x, random_topk

WORLD = 4
FORMS = ("bf16", "fp8")
NUM_SMS = (2, 4, 20)


def inputs(rank: int, form: str):
    x = encoded_x(rank)
    idx, w = random_topk(rank)
    if form == "fp8":
        import ml_dtypes

        from ptxforge.kernels import fp8

        g = torch.Generator().manual_seed(50 + rank)
        xr = torch.randn((T, H), generator=g).to(torch.bfloat16)
        q, sf, _ = fp8.per_token_quant_ref(xr.view(torch.int16).numpy().view(ml_dtypes.bfloat16), True)
        x = (torch.from_numpy(q).view(torch.float8_e4m3fn), torch.from_numpy(sf))
    bias = (torch.full((T, H), 0.5, dtype=torch.bfloat16), torch.full((T, H), -0.25, dtype=torch.bfloat16))
    return x, idx, w, bias


def expert_out(recv_x, rank: int):
    """What the experts return: BF16 rows (FP8 ones dequantized), deterministic per rank."""
    if isinstance(recv_x, tuple):
        q, s = recv_x
        return (q.float().view(q.shape[0], -1, 128) * s.unsqueeze(2)).view(q.shape).to(torch.bfloat16)
    return (recv_x.float() * 0.5 + rank).to(torch.bfloat16)


def run_case(call_dispatch, call_combine, rank: int, form: str, num_sms: int) -> dict:
    """The calls every case makes, through `call_dispatch(x, idx, w, **kw)` / `call_combine(x, handle, **kw)`."""
    from ptxforge.ep import Config

    x, idx, w, bias = inputs(rank, form)
    cfg = Config(num_sms, 6, 16)
    recv, ridx, rw, counts, handle, _ = call_dispatch(x, idx, w, config=cfg, expert_alignment=4)
    cached = call_dispatch(x, None, None, handle=handle, config=cfg)[0]
    y = expert_out(recv, rank)
    comb, comb_w, _ = call_combine(y, handle, topk_weights=rw, bias=bias, config=Config(num_sms, 3, 8))
    plain, none_w, _ = call_combine(y, handle)
    return {"recv": recv, "idx": ridx, "w": rw, "counts": counts, "handle": tuple(handle), "cached": cached,
            "combined": comb, "combined_w": comb_w, "plain": plain, "none_w": none_w}


def torch_rank(rank: int, world: int) -> dict:
    import ptxforge.ep as deep_ep

    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world, timeout_s=30)

    def dispatch(x, idx, w, **kw):
        if idx is None:
            return buf.dispatch(x, **kw)
        ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
        return buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                            topk_idx=idx, topk_weights=w, **kw)
    return {(form, num_sms): plain(run_case(dispatch, buf.combine, rank, form, num_sms))
            for form in FORMS for num_sms in NUM_SMS}


def plain(obj):
    """Tensors as (dtype, shape, bytes), recursively: what a rank process can hand back through a queue."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return tuple(plain(v) for v in obj)
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        return (str(t.dtype), tuple(t.shape), t.view(torch.uint8).numpy().tobytes())
    return obj


def same(a, b, where: str = "") -> None:
    """Bit-equal results (as `plain` gives them): the same dtypes, shapes and bytes."""
    a, b = plain(a), plain(b)
    if isinstance(a, tuple) and len(a) == 3 and isinstance(a[2], bytes):
        assert a[:2] == b[:2], f"{where}: {b[:2]} vs {a[:2]}"
        assert a[2] == b[2], f"{where}: bits differ"
        return
    if isinstance(a, tuple | list):
        assert isinstance(b, tuple | list) and len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            same(u, v, f"{where}[{i}]")
        return
    assert a == b, f"{where}: {a!r} != {b!r}"
