"""The checks each rank runs, modeled on DeepEP's test_intranode.py / test_internode.py. `suite(rank, world,
ranks_per_node)` runs them all on one process group and returns {check: None (passed) or the failure}.

Data is encoded so each received row proves where it came from: column 0 holds the source rank, columns 1-2
the source token index (t % 32, t // 32), the rest small integers, so sums of copies are exact in BF16.
"""

from __future__ import annotations

import time
import traceback

import torch
import torch.distributed as dist

from ptxforge.ep.testing import calc_diff, moe_reference

T, H, E, K = 24, 256, 32, 4


def encoded_x(rank: int, tokens: int = T, hidden: int = H, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + rank)
    x = torch.randint(-4, 5, (tokens, hidden), generator=g).float()
    t = torch.arange(tokens)
    x[:, 0], x[:, 1], x[:, 2] = rank, t % 32, t // 32
    return x.to(torch.bfloat16)


def random_topk(rank: int, tokens: int = T, experts: int = E, k: int = K, seed: int = 0):
    g = torch.Generator().manual_seed(7919 * seed + rank)
    scores = torch.rand((tokens, experts), generator=g) + 1
    idx = torch.topk(scores, k, dim=-1, sorted=False).indices
    idx[3, 1] = -1  # a slot that selects nothing
    idx[5, :] = -1  # a token that goes nowhere
    w = torch.rand((tokens, k), generator=g)
    return idx.to(torch.int64), w


def gather(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    return out


class Ctx:
    def __init__(self, rank, world, rpn, backend="torch"):
        import ptxforge.ep as deep_ep

        self.ep = deep_ep
        self.rank, self.world, self.rpn = rank, world, rpn
        self.buf = deep_ep.Buffer(None, int(1e9), int(1e9) if world > rpn else 0, num_ranks_per_node=rpn,
                                  timeout_s=30, backend=backend)
        self.x = encoded_x(rank)
        self.idx, self.w = random_topk(rank)

    def dispatch(self, x=None, **kw):
        ntr, _, nte, in_rank, _ = self.buf.get_dispatch_layout(self.idx, E)
        args = dict(num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                    topk_idx=self.idx, topk_weights=self.w)
        args.update(kw)
        return self.buf.dispatch(self.x if x is None else x, **args), in_rank


# --------------------------------------------------------------------------- checks

def check_layout(c: Ctx):
    ntr, ntrr, nte, in_rank, event = c.buf.get_dispatch_layout(c.idx, E)
    epr = E // c.world
    rank_of = torch.where(c.idx >= 0, c.idx // epr, -1)
    for r in range(c.world):
        assert in_rank[:, r].equal((rank_of == r).any(1)), f"is_token_in_rank[:, {r}]"
        assert int(ntr[r]) == int((rank_of == r).any(1).sum())
    for e in range(E):
        assert int(nte[e]) == int((c.idx == e).sum())
    assert ntr.dtype == torch.int32 and nte.dtype == torch.int32 and in_rank.dtype == torch.bool
    if c.world == c.rpn:
        assert ntrr is None
    else:
        nodes = c.world // c.rpn
        for n in range(nodes):
            assert int(ntrr[n]) == int(in_rank[:, n * c.rpn:(n + 1) * c.rpn].any(1).sum())
    from ptxforge.kernels import ops  # the DSL kernel on the emulator gives the same layout

    k = ops.get_dispatch_layout(c.idx, E, c.world, c.rpn, device="emu")
    assert k[0].equal(ntr) and k[2].equal(nte) and k[3].equal(in_rank)
    assert (k[1] is None and ntrr is None) or k[1].equal(ntrr)
    kb = c.ep.Buffer(None, 0, 0, num_ranks_per_node=c.rpn, backend="kernels")
    kl = kb.get_dispatch_layout(c.idx, E)
    assert kl[0].equal(ntr) and kl[3].equal(in_rank)
    event.current_stream_wait()


def check_dispatch_rows(c: Ctx):
    (recv_x, recv_idx, recv_w, counts, handle, _), in_rank = c.dispatch()
    all_x, all_idx, all_w = gather(c.x, c.world), gather(c.idx, c.world), gather(c.w, c.world)
    all_in = gather(in_rank, c.world)
    rank_prefix, _, _, recv_src_idx, _, send_head = handle
    # the rows come by source rank (segments given by rank_prefix_matrix), then token order
    start = 0
    epr = E // c.world
    for s in range(c.world):
        end = int(rank_prefix[s][c.rank])
        tokens = torch.nonzero(all_in[s][:, c.rank]).flatten()
        assert end - start == tokens.numel(), f"segment from rank {s}"
        assert recv_src_idx[start:end].to(torch.int64).equal(tokens)
        seg = recv_x[start:end]
        assert seg.view(torch.int16).equal(all_x[s][tokens].view(torch.int16)), f"rows from rank {s} not bit-equal"
        assert torch.all(seg[:, 0] == s)  # the encoding agrees without the handle
        assert (seg[:, 1].long() + 32 * seg[:, 2].long()).equal(tokens)
        g = all_idx[s][tokens]
        local = (g >= c.rank * epr) & (g < (c.rank + 1) * epr)
        assert recv_idx[start:end].equal(torch.where(local, g - c.rank * epr, -1))
        assert recv_w[start:end].equal(torch.where(local, all_w[s][tokens], 0.0))
        start = end
    assert start == recv_x.shape[0]
    gbl = torch.zeros(E, dtype=torch.int64)
    for s in range(c.world):
        gbl += torch.bincount(all_idx[s][all_idx[s] >= 0], minlength=E)
    assert counts == gbl.view(c.world, -1)[c.rank].tolist()
    assert counts == [int((recv_idx == e).sum()) for e in range(epr)]
    assert torch.all((recv_idx == -1) | ((recv_idx >= 0) & (recv_idx < epr)))
    # send_head: where each of my tokens landed in each destination's recv_x
    heads = gather(send_head, c.world)
    for s in range(c.world):
        mine = heads[s][:, c.rank]
        rows = torch.nonzero(mine >= 0).flatten()
        assert recv_x[mine[rows].long()].view(torch.int16).equal(all_x[s][rows].view(torch.int16))
    # aligned counts and fixed-size output
    (_, _, _, aligned, _, _), _ = c.dispatch(expert_alignment=8)
    assert aligned == [-(-n // 8) * 8 for n in counts]
    worst = T * c.world
    (wx, widx, ww, empty, _, _), _ = c.dispatch(num_worst_tokens=worst)
    n = recv_x.shape[0]
    assert empty == [] and wx.shape[0] == worst and widx.shape[0] == worst and ww.shape[0] == worst
    assert wx[:n].equal(recv_x) and widx[:n].equal(recv_idx) and ww[:n].equal(recv_w)
    assert torch.all(widx[n:] == -1) and torch.all(wx[n:] == 0)
    # without top-k: rows only (the counts still come from the layout), also across nodes
    ntr, _, nte, in_rank, _ = c.buf.get_dispatch_layout(c.idx, E)
    bx, bidx, bw, bcounts, bh, _ = c.buf.dispatch(c.x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                                  num_tokens_per_expert=nte)
    assert bx.equal(recv_x) and bidx is None and bw is None and bcounts == counts and bh[3].equal(recv_src_idx)
    # cached dispatch reuses the layout
    cx, none_idx, none_w, none_counts, none_handle, _ = c.buf.dispatch(c.x, handle=handle)
    assert cx.equal(recv_x) and none_idx is None and none_w is None and none_counts is None and none_handle is None


def check_combine(c: Ctx):
    (recv_x, recv_idx, recv_w, _, handle, _), in_rank = c.dispatch()
    combined, combined_w, _ = c.buf.combine(recv_x, handle, topk_weights=recv_w)
    copies = in_rank.sum(1, keepdim=True)
    assert combined.equal((c.x.float() * copies).to(torch.bfloat16)), "combine is not x times its copies"
    assert torch.all(combined[5] == 0)  # the token that went nowhere
    assert combined_w.equal(torch.where(c.idx >= 0, c.w, 0.0))  # one rank holds each expert: exact
    bias = (torch.ones_like(c.x), torch.full_like(c.x, 2.0))
    with_bias, _, _ = c.buf.combine(recv_x, handle, bias=bias)
    assert with_bias.equal((c.x.float() * copies + 3).to(torch.bfloat16))
    (wx, _, _, _, wh, _), _ = c.dispatch(num_worst_tokens=T * c.world)
    padded, _, _ = c.buf.combine(wx, wh)
    assert padded.equal(combined)


def check_fp8_lossless(c: Ctx):
    from ptxforge.kernels import ops

    x = torch.randn((T, H), generator=torch.Generator().manual_seed(c.rank)).to(torch.bfloat16)
    for packed in (False, True):
        q, s = ops.per_token_cast_to_fp8(x, packed_ue8m0=packed, device="emu")
        ((rq, rs), _, _, _, handle, _), _ = c.dispatch((q, s))
        all_q, all_s = gather(q.view(torch.uint8), c.world), gather(s, c.world)
        src_rank = torch.repeat_interleave(torch.arange(c.world), torch.diff(
            torch.cat([torch.zeros(1, dtype=torch.int32), handle[0][:, c.rank]])).long())
        for i in range(rq.shape[0]):
            sr, st = int(src_rank[i]), int(handle[3][i])
            assert rq[i].view(torch.uint8).equal(all_q[sr][st]), f"fp8 row {i}"
            assert rs[i].view(torch.int32).equal(all_s[sr][st].view(torch.int32)), f"scales of row {i}"
        assert rq.dtype == torch.float8_e4m3fn and rs.dtype == s.dtype


def expert_weights():
    g = torch.Generator().manual_seed(42)
    return (torch.randn((E, H, H), generator=g) / H ** 0.5).to(torch.bfloat16)


def check_moe_matches_reference(c: Ctx):
    from ptxforge.kernels import ops

    weights = expert_weights()
    epr = E // c.world
    mine = weights[c.rank * epr:(c.rank + 1) * epr]
    x = torch.randn((T, H), generator=torch.Generator().manual_seed(100 + c.rank)).to(torch.bfloat16)
    logits = torch.randn((T, E), generator=torch.Generator().manual_seed(200 + c.rank))
    bias = torch.randn(E, generator=torch.Generator().manual_seed(3)) * 0.05
    groups = c.world // c.rpn if c.world > c.rpn else 4
    idx, w = ops.route(logits, bias, n_group=groups, topk_group=min(2, groups), topk=K, routed_scaling_factor=2.5,
                       device="emu")
    ref = moe_reference(x, idx, w, weights)
    c.idx, c.w = idx, w
    (rx, ri, rw, _, handle, _), _ = c.dispatch(x)
    out, _, _ = c.buf.combine(moe_reference(rx, ri, rw, mine), handle)
    diff_bf16 = calc_diff(out, ref)
    assert diff_bf16 < 5e-6, f"BF16 calc_diff {diff_bf16}"
    q, s = ops.per_token_cast_to_fp8(x, round_scale=True)
    ((rq, rs), ri, rw, _, handle, _), _ = c.dispatch((q, s))
    back = ops.per_token_cast_back(rq, rs)
    out8, _, _ = c.buf.combine(moe_reference(back, ri, rw, mine), handle)
    diff_fp8 = calc_diff(out8, ref)
    assert diff_fp8 < 2e-3, f"FP8 calc_diff {diff_fp8}"
    if c.world > c.rpn:  # node-limited routing: at most topk_group nodes a token
        nodes = torch.where(idx >= 0, idx // (E // groups), -1)
        assert all(len(set(r.tolist()) - {-1}) <= 2 for r in nodes)
    return {"bf16": diff_bf16, "fp8": diff_fp8}


def check_stats(c: Ctx):
    from ptxforge.kernels import ops

    c.buf.stats(reset=True)
    c.dispatch()
    bf = c.buf.stats()[-1]
    q, s = ops.per_token_cast_to_fp8(c.x)
    c.dispatch((q, s))
    f8 = c.buf.stats()[-1]
    assert bf.form == "bf16" and f8.form == "fp8"
    wire = lambda st, f: sum(getattr(st, f"{w}_node_sent").payload + (getattr(st, f"{w}_node_sent").scales if f else 0)  # noqa: E731
                             for w in ("intra", "inter"))
    ratio = wire(f8, True) / max(1, wire(bf, False))
    assert abs(ratio - (H + 4 * H / 128) / (2 * H)) < 1e-12, ratio
    assert f8.intra_node_sent.scales + f8.inter_node_sent.scales > 0 and bf.intra_node_sent.scales == 0
    assert sum(t.total for t in bf.sent.values()) == bf.wire_sent
    # what each rank sent to a peer is what that peer received from it
    records = [None] * c.world
    dist.all_gather_object(records, {p: t.total for p, t in bf.sent.items()} | {
        f"r{p}": t.total for p, t in bf.recv.items()})
    for a in range(c.world):
        for b in range(c.world):
            if a != b:
                assert records[a].get(b, 0) == records[b].get(f"r{a}", 0), (a, b)
    if c.world > c.rpn:
        node, local = c.rank // c.rpn, c.rank % c.rpn
        assert all(p % c.rpn == local for p, t in bf.sent.items() if p // c.rpn != node and t.total)
        _, _, _, in_rank, _ = c.buf.get_dispatch_layout(c.idx, E)
        to_node = in_rank.view(T, -1, c.rpn).any(-1)
        remote_rows = int(to_node.sum()) - int(to_node[:, node].sum())
        assert bf.inter_node_sent.payload == remote_rows * H * 2, "a token crossed to a node more than once"
    return {"ratio": ratio}


def check_empty_ranks(c: Ctx):
    """Rank 0 has no tokens and nobody selects rank 1's experts: both still take part and get empty results."""
    epr = E // c.world
    tokens = 0 if c.rank == 0 else T
    idx = c.idx[:tokens].clone()
    idx[(idx >= epr) & (idx < 2 * epr)] = -1
    x, w = c.x[:tokens], c.w[:tokens]
    ntr, _, nte, in_rank, _ = c.buf.get_dispatch_layout(idx, E)
    rx, ri, rw, counts, handle, _ = c.buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                                   num_tokens_per_expert=nte, topk_idx=idx, topk_weights=w)
    if c.rank == 1:
        assert rx.shape == (0, H) and ri.shape == (0, K) and counts == [0] * epr
    combined, cw, _ = c.buf.combine(rx, handle, topk_weights=rw)
    assert combined.shape == (tokens, H) and cw.shape == (tokens, K)
    assert combined.equal((x.float() * in_rank.sum(1, keepdim=True)).to(torch.bfloat16))


def expect_everywhere(c: Ctx, bad_rank: int, fn, match: str, error=None):
    """fn() must raise `error` (EPInputError) on every rank, naming `match`, within a few seconds."""
    error = error or c.ep.EPInputError
    t0 = time.monotonic()
    try:
        fn(c.rank == bad_rank)
    except error as e:
        took = time.monotonic() - t0
        assert match in str(e), f"message lacks {match!r}: {e}"
        assert f"rank {bad_rank}" in str(e) or "disagree" in str(e), str(e)
        assert took < 5, f"took {took:.1f} s"
        return str(e)
    raise AssertionError(f"rank {c.rank}: no {error.__name__} (bad input was on rank {bad_rank})")


def check_bad_input(c: Ctx):
    ntr, _, nte, in_rank, _ = c.buf.get_dispatch_layout(c.idx, E)
    lay = dict(num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte)
    msgs = {}

    def out_of_range(bad):
        idx = c.idx.clone()
        if bad:
            idx[2, 0] = E
        c.buf.get_dispatch_layout(idx, E)
    msgs["range"] = expect_everywhere(c, 1 % c.world, out_of_range, f"topk_idx[2, 0] = {E} is not an expert id")

    def below_minus_one(bad):
        idx = c.idx.clone()
        if bad:
            idx[0, 0] = -2
        c.buf.dispatch(c.x, topk_idx=idx, topk_weights=c.w, **lay)
    msgs["negative"] = expect_everywhere(c, 2 % c.world, below_minus_one, "= -2 is not an expert id")

    def fp8_hidden(bad):
        h = 200 if bad else 256
        q = torch.zeros((T, h), dtype=torch.float8_e4m3fn)
        c.buf.dispatch((q, torch.ones((T, 2))), topk_idx=c.idx, topk_weights=c.w, **lay)
    msgs["fp8"] = expect_everywhere(c, 3 % c.world, fp8_hidden, "hidden size 200 is not a multiple of 128")

    def wrong_dtype(bad):
        c.buf.dispatch(c.x.float() if bad else c.x, topk_idx=c.idx, topk_weights=c.w, **lay)
    msgs["dtype"] = expect_everywhere(c, 0, wrong_dtype, "x must be torch.bfloat16, got torch.float32")

    def wrong_weights(bad):
        c.buf.dispatch(c.x, topk_idx=c.idx, topk_weights=c.w[:, :2] if bad else c.w, **lay)
    msgs["shape"] = expect_everywhere(c, 1 % c.world, wrong_weights, "topk_weights must have shape")

    def experts_disagree(bad):
        c.buf.get_dispatch_layout(c.idx, 2 * E if bad else E)
    msgs["num_experts"] = expect_everywhere(c, 1 % c.world, experts_disagree, "disagree on num_experts")

    (rx_a, _, _, _, ha, _), _ = c.dispatch()
    (rx_b, _, _, _, hb, _), _ = c.dispatch()

    def stale_handle(bad):
        c.buf.combine(rx_a if bad else rx_b, ha if bad else hb)
    msgs["handle"] = expect_everywhere(c, 0, stale_handle, "disagree on handle_serial")

    other = c.ep.Buffer(None, 0, 0, num_ranks_per_node=c.rpn)

    def foreign_handle(bad):
        other.combine(rx_b, hb)
    msgs["foreign"] = expect_everywhere(c, 0, foreign_handle, "handle is not one that a dispatch of this Buffer")

    def wrong_rows(bad):
        c.buf.combine(rx_b[:-1] if bad else rx_b, hb)
    msgs["rows"] = expect_everywhere(c, 2 % c.world, wrong_rows, "a handle from another call?")
    # the group still works after all of that
    (rx, _, _, _, h, _), in_rank = c.dispatch()
    combined, _, _ = c.buf.combine(rx, h)
    assert combined.equal((c.x.float() * in_rank.sum(1, keepdim=True)).to(torch.bfloat16))
    return msgs


def survivors_meet(n: int, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until `n` ranks got here, through the rendezvous store (the process group is broken)."""
    store = dist.distributed_c10d._get_default_store()
    store.add("survivors", 1)
    deadline = time.monotonic() + timeout_s
    while store.add("survivors", 0) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def check_timeout(c: Ctx):
    """The last check: rank world-1 skips a dispatch; the others time out naming the call and the ranks."""
    buf = c.ep.Buffer(None, 0, 0, num_ranks_per_node=c.rpn, timeout_s=2)
    if c.rank == c.world - 1:
        time.sleep(4)
        return None
    t0 = time.monotonic()
    from ptxforge.ep import layout

    ntr, _, nte, in_rank = layout.dispatch_layout(c.idx, E, c.world, c.rpn)
    try:
        buf.dispatch(c.x, topk_idx=c.idx, topk_weights=c.w, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                     num_tokens_per_expert=nte)
    except c.ep.EPTimeoutError as e:
        took = time.monotonic() - t0
        survivors_meet(c.world - 1)  # a survivor that left at once would reset a slower one's wait: a lost peer
        assert 1.5 < took < 15, took
        assert "dispatch" in str(e) and "waited 2 s" in str(e) and "ranks" in str(e), str(e)
        assert f"these ranks never entered it: rank {c.world - 1} (its last was call 1, Buffer())" in str(e), str(e)
        return str(e)
    raise AssertionError("no timeout")


def _tensors(out) -> list:
    """Every tensor (and int, list or None) of a call's results, handle fields included, in order."""
    if hasattr(out, "current_stream_wait"):  # an event
        return []
    if isinstance(out, tuple):
        return [t for o in out for t in _tensors(o)]
    return [out]


def _bits(t):
    return t.view(torch.uint8) if isinstance(t, torch.Tensor) and t.dtype.itemsize == 1 else t


def check_async_matches_sync(c: Ctx):
    """async_finish=True gives bit for bit the synchronous calls' results once the event is waited for (the
    `with` form, and current_stream_wait): BF16 dispatch, cached dispatch and combine with a bias; FP8 dispatch
    padded to num_worst_tokens. Each async call's event holds its pending work and its inputs until then."""
    from ptxforge.kernels import ops

    q, s = ops.per_token_cast_to_fp8(c.x)
    bias = torch.full_like(c.x, 0.5)
    runs: dict = {}
    for async_finish in (False, True):
        (recv, idx, w, counts, handle, ev), _ = c.dispatch(async_finish=async_finish)
        held = [ev.event is not None and ev.extra_tensors is not None]
        with ev:
            pass
        cached, *_, ev2 = c.buf.dispatch(c.x, handle=handle, async_finish=async_finish)
        combined, cw, ev3 = c.buf.combine(recv, handle, topk_weights=w, bias=bias, async_finish=async_finish)
        (fp8, fidx, fw, fcounts, fhandle, ev4), _ = c.dispatch((q, s), num_worst_tokens=T * c.world,
                                                               async_finish=async_finish)
        for e in (ev2, ev3, ev4):
            held.append(e.event is not None and e.extra_tensors is not None)
            e.current_stream_wait()
        released = all(e.extra_tensors is None for e in (ev, ev2, ev3, ev4))
        runs[async_finish] = ({"dispatch": (recv, idx, w, counts, tuple(handle)), "cached": cached,
                               "combine": (combined, cw), "fp8": (fp8, fidx, fw, fcounts, tuple(fhandle))},
                              all(held), released)
    (sync, sync_held, _), (asyn, async_held, released) = runs[False], runs[True]
    assert not sync_held and async_held and released, "an async call's event holds its work and inputs until waited"
    for part in sync:
        ta, tb = _tensors(sync[part]), _tensors(asyn[part])
        assert len(ta) == len(tb), part
        for u, v in zip(ta, tb, strict=True):
            same = (u is None and v is None) or (isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor)
                                                 and u.dtype == v.dtype and _bits(u).equal(_bits(v))) or u == v
            assert same, part


CHECKS = [check_layout, check_dispatch_rows, check_combine, check_fp8_lossless, check_moe_matches_reference,
          check_stats, check_empty_ranks, check_bad_input, check_async_matches_sync]


# the checks whose outcome depends on how many channels the communication kernels use (rows split over
# channels, empty channels, ring wrap-around); the others (layout, agreement, stats, MoE numerics through the
# same combine) take the same path whatever num_sms is
CHANNEL_CHECKS = [check_dispatch_rows, check_combine, check_fp8_lossless, check_empty_ranks]


def suite(rank: int, world: int, ranks_per_node: int, with_timeout: bool = False, backend: str = "torch",
          num_sms: int | None = None, checks: list | None = None) -> dict:
    """backend="kernels" runs dispatch/combine with the communication kernels (num_sms: Buffer.set_num_sms);
    `checks`: a subset of CHECKS (default: all)."""
    if num_sms is not None:
        import ptxforge.ep as deep_ep

        deep_ep.Buffer.set_num_sms(num_sms)
    c = Ctx(rank, world, ranks_per_node, backend)
    results = {}
    for check in (CHECKS if checks is None else checks) + ([check_timeout] if with_timeout else []):
        t0 = time.monotonic()
        try:
            value = check(c)
            results[check.__name__] = {"ok": True, "value": value, "s": time.monotonic() - t0}
        except BaseException:  # noqa: BLE001 - reported per check
            results[check.__name__] = {"ok": False, "error": traceback.format_exc(), "s": time.monotonic() - t0}
            if check is not check_timeout:
                dist.barrier()  # keep the ranks in step for the next check
    return results
