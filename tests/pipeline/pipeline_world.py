"""Per-rank code of the executor tests: one 8-process gloo world runs every scenario on sub-groups and returns
a report per scenario (compared against a single-process reference computed on every rank)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ptxforge.pipeline import (
    DualPipe,
    DualPipeV,
    OneFOneB,
    ScheduleError,
    ZeroBubbleH1,
    run_backward,
    set_p2p_tensor_dtype,
    set_p2p_tensor_shapes,
)
from ptxforge.pipeline.layers import SplitGradLinear

HIDDEN, SEQ, MB = 8, 3, 2


class PlainStage(nn.Module):
    """Two split-gradient linears with a GELU between (no overlap hook); one tensor in, one out."""

    arity = 1

    def __init__(self, h: int = HIDDEN) -> None:
        super().__init__()
        self.fc1 = SplitGradLinear(h, 2 * h, bias=True)
        self.fc2 = SplitGradLinear(2 * h, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class OverlapStage(PlainStage):
    """Same stage with an `overlapped_forward_backward` hook (forward of one chunk, then backward of another)."""

    calls = 0

    @classmethod
    def overlapped_forward_backward(cls, module0, inputs0, criterion0, labels0, module1, loss1, outputs1,
                                    output_grads1):
        outputs0 = module0(*inputs0)
        outputs0 = [outputs0] if isinstance(outputs0, torch.Tensor) else outputs0
        loss0 = criterion0(*outputs0, *labels0) if criterion0 is not None else None
        if loss1 is not None:
            loss1.backward()
            loss1.detach_()
        else:
            run_backward(outputs1, output_grads1)
        OverlapStage.calls += 1
        return outputs0, loss0


class PairStage(nn.Module):
    """Two tensors in, two out (exercises multi-tensor p2p)."""

    arity = 2

    def __init__(self, h: int = HIDDEN) -> None:
        super().__init__()
        self.fc = SplitGradLinear(h, h, bias=True)
        self.gate = SplitGradLinear(h, h, bias=False)

    def forward(self, x: torch.Tensor, z: torch.Tensor):
        return x + self.fc(F.gelu(z)), z * torch.tanh(self.gate(x))


def criterion(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target).clone()


def pair_criterion(out: torch.Tensor, aux: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target) + aux.square().mean()


def cos_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum().item()
    return 0.0 if den == 0 else 1 - 2 * (x * y).sum().item() / den


def reference(stages, xs, labels, chunks: int, crit, bd: int):
    """Single-process step: every micro-batch through all stages, loss backward; (losses, outputs tuple)."""
    outs, losses = [], []
    parts = [x.chunk(chunks, dim=bd) for x in xs]
    for i, li in enumerate(labels.chunk(chunks, dim=bd)):
        y = tuple(p[i] for p in parts)
        for s in stages:
            y = s(*y)
            y = (y,) if isinstance(y, torch.Tensor) else tuple(y)
        loss = crit(*y, li)
        loss.backward()
        outs.append([t.detach() for t in y])
        losses.append(loss.detach())
    return torch.stack(losses), tuple(torch.cat(col, dim=bd) for col in zip(*outs, strict=True))


def _shape(bd: int) -> tuple[int, int, int]:
    return (MB, SEQ, HIDDEN) if bd == 0 else (SEQ, MB, HIDDEN)


def _data(chunks: int, seed: int, arity: int, bd: int, dtype: torch.dtype, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    shape = list(_shape(bd))
    shape[bd] *= chunks
    xs = tuple(torch.randn(*shape, generator=g, dtype=dtype).to(device) for _ in range(arity))
    lab = torch.randn(*shape, generator=g, dtype=dtype).to(device)
    return xs, lab


def _stages(cls, n: int, seed: int, dtype: torch.dtype, device: str = "cpu") -> list[nn.Module]:
    torch.manual_seed(seed)
    return [cls().to(dtype).to(device) for _ in range(n)]


def _copy(stage: nn.Module, cls) -> nn.Module:
    p = next(stage.parameters())
    m = cls().to(p.dtype).to(p.device)
    m.load_state_dict(stage.state_dict())
    return m


def _grads_of(m: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in m.parameters()])


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        a = (a,)
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def scenario(kind: str, size: int, chunks: int, cls, group, g_rank: int, seed: int, mapping=None,
             bd: int = 0, dtype: torch.dtype = torch.float64, device: str = "cpu") -> dict:
    """Run one pipeline kind on `group` (this rank is `g_rank` in it) and compare with the reference."""
    set_p2p_tensor_shapes([_shape(bd)] * cls.arity)
    set_p2p_tensor_dtype(dtype)
    pp = mapping[g_rank] if mapping else g_rank  # this rank's pipeline position
    n_stages = {"dualpipe": size, "dualpipev": 2 * size, "1f1b": size, "zb1p": size}[kind]
    crit = pair_criterion if cls.arity == 2 else criterion
    full = _stages(cls, n_stages, seed, dtype, device)
    xs, lab = _data(chunks, seed + 1, cls.arity, bd, dtype, device)
    ref_loss, ref_out = reference(full, xs, lab, chunks, crit, bd)
    half = lambda t, i: t.chunk(2, dim=bd)[i]  # noqa: E731
    if kind == "dualpipe":
        local = (_copy(full[pp], cls), _copy(full[size - 1 - pp], cls))
        model = DualPipe(local, batch_dim=bd, process_group=group, rank_mapping=mapping)
        if pp == 0:
            my_x, my_l, want = tuple(half(x, 0) for x in xs), half(lab, 1), 1
        elif pp == size - 1:
            my_x, my_l, want = tuple(half(x, 1) for x in xs), half(lab, 0), 0
        else:
            my_x, my_l, want = (), None, None
    elif kind == "dualpipev":
        local = (_copy(full[pp], cls), _copy(full[2 * size - 1 - pp], cls))
        model = DualPipeV(local, batch_dim=bd, process_group=group, rank_mapping=mapping)
        my_x, my_l, want = (xs, lab, "all") if pp == 0 else ((), None, None)
    else:
        local = (_copy(full[pp], cls),)
        model = (OneFOneB if kind == "1f1b" else ZeroBubbleH1)(local[0], batch_dim=bd, process_group=group,
                                                                rank_mapping=mapping)
        my_x = xs if pp == 0 else ()
        my_l, want = (lab, "all") if pp == size - 1 else (None, None)

    def expect(t):
        if want is None:
            return None
        if isinstance(t, tuple):
            return t if want == "all" else tuple(half(x, want) for x in t)
        return t if want == "all" else t.chunk(2)[want]

    def run(return_outputs: bool):
        return model.step(*my_x, num_chunks=chunks, criterion=crit, labels=(my_l,), return_outputs=return_outputs)

    rep: dict = {"kind": kind, "size": size, "chunks": chunks, "pp": pp, "overlap": cls is OverlapStage}
    OverlapStage.calls = 0
    # 1: training step, no outputs
    loss, out = run(False)
    rep["train_loss_equal"] = (loss is None) if want is None else bool(torch.equal(loss, expect(ref_loss)))
    rep["train_outputs_none"] = out is None
    rep["hook_calls"] = OverlapStage.calls
    # gradients: a stage may live on two ranks (DualPipe); sum its copies across the group
    mine = [_grads_of(m) for m in local]
    if kind == "dualpipe":
        gathered = [[torch.empty_like(g) for _ in range(size)] for g in mine]
        for g, bucket in zip(mine, gathered, strict=True):
            dist.all_gather(bucket, g, group=group)
        inv = [0] * size
        for gr in range(size):
            inv[mapping[gr] if mapping else gr] = gr
        mine[0] = mine[0] + gathered[1][inv[size - 1 - pp]]
        mine[1] = mine[1] + gathered[0][inv[size - 1 - pp]]
    refs = [full[pp]] + ([full[size - 1 - pp]] if kind == "dualpipe" else
                         [full[2 * size - 1 - pp]] if kind == "dualpipev" else [])
    rep["grad_cos_diff"] = max(cos_diff(g, _grads_of(r)) for g, r in zip(mine, refs, strict=True))
    model.zero_grad()
    # 2: training step returning outputs
    loss, out = run(True)
    if want is None:
        rep["train_outputs_equal"] = out is None and loss is None
    else:
        rep["train_outputs_equal"] = _equal(out, expect(ref_out)) and bool(torch.equal(loss, expect(ref_loss)))
    model.zero_grad()
    # 3: inference step
    with torch.no_grad():
        loss, out = run(True)
    if want is None:
        rep["infer_equal"] = out is None and loss is None
    else:
        rep["infer_equal"] = _equal(out, expect(ref_out)) and bool(torch.equal(loss, expect(ref_loss)))
    rep["infer_no_grads"] = all(p.grad is None or not p.grad.any() for m in local for p in m.parameters())
    # 4: a schedule rule violation is reported before any message is exchanged
    bad = {"dualpipe": chunks + 1, "dualpipev": 2 * size - 1}.get(kind, 0)
    try:
        model.step(*my_x, num_chunks=bad, criterion=crit, labels=(my_l,))
        rep["bad_chunks_error"] = ""
    except ScheduleError as e:
        rep["bad_chunks_error"] = e.rule
    return rep


# (kind, group ranks, chunks, stage class, rank_mapping or None, batch_dim, dtype); float64 unless stated
_S = [
    ("dualpipe", list(range(8)), 16, OverlapStage, None, 0),
    ("dualpipe", [0, 1, 2, 3], 10, PlainStage, None, 0),
    ("dualpipe", [4, 5, 6, 7], 8, OverlapStage, [3, 2, 1, 0], 0),
    ("dualpipe", [4, 5], 6, PlainStage, None, 0),
    ("dualpipe", [6, 7], 4, OverlapStage, None, 0),
    ("dualpipev", [0], 2, OverlapStage, None, 0),
    ("dualpipev", [1], 5, PlainStage, None, 0),
    ("dualpipev", [2, 3], 6, OverlapStage, None, 0),
    ("dualpipev", [4, 5, 6], 7, PlainStage, None, 0),
    ("dualpipev", [0, 1, 2, 3], 8, OverlapStage, None, 0),
    ("dualpipev", [4, 5, 6, 7], 10, PlainStage, [1, 0, 3, 2], 0),
    ("1f1b", [0, 1, 2, 3], 6, PlainStage, None, 0),
    ("zb1p", [4, 5, 6, 7], 6, PlainStage, None, 0),
    ("dualpipe", [0, 1, 2, 3], 8, PairStage, None, 1),
    ("dualpipev", [4, 5], 4, PairStage, None, 1),
]
SCENARIOS = [(*s, torch.float64) for s in _S] + [
    ("dualpipe", [0, 1, 2, 3], 8, OverlapStage, None, 0, torch.float32),
    ("dualpipev", [4, 5, 6, 7], 8, PlainStage, None, 0, torch.float32),
]


def _count_deferred() -> list[int]:
    """Count WeightGradStore.put calls (deferred W closures) in this process."""
    from ptxforge.pipeline import WeightGradStore

    counter = [0]
    orig = WeightGradStore.put.__func__

    def put(cls, func):
        counter[0] += 1
        orig(cls, func)

    WeightGradStore.put = classmethod(put)
    return counter


def run_all(rank: int, world: int) -> list[dict]:
    """Every scenario in order; sub-groups are created by all ranks, run by their members."""
    counter = _count_deferred()
    reports = []
    groups = [dist.new_group(ranks) for _, ranks, *_ in SCENARIOS]
    for idx, ((kind, ranks, chunks, cls, mapping, bd, dt), group) in enumerate(zip(SCENARIOS, groups,
                                                                                   strict=True)):
        if rank in ranks:
            before = counter[0]
            rep = scenario(kind, len(ranks), chunks, cls, group, ranks.index(rank), 100 + idx, mapping, bd, dt)
            rep["deferred_w"] = counter[0] - before
            rep["scenario"] = idx
            reports.append(rep)
    dist.barrier()
    return reports
