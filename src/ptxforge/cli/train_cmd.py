"""`ptxforge train`: the small DeepSeek-V3-shaped model trained with DualPipe x expert parallelism on gloo
(`ptxforge.models.train`), a progress line with the loss of every step, and on exit the per-rank timeline of the
last steps (compute and communication spans, where they overlapped) and the overlap fraction.

On one machine it starts pp * ep processes itself (`ptxforge.ep.spawn.run_ranks`); under `torchrun` (RANK and
WORLD_SIZE set) each process is one rank and rank 0 prints and draws. (Its arguments and help: commands.py.)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ptxforge import environment
from ptxforge.cli.errors import UserError
from ptxforge.ep.spawn import run_ranks
from ptxforge.models.moe import MoEConfig
from ptxforge.models.train import TrainConfig, TrainingStopped, reference_losses, train_rank
from ptxforge.models.transformer import ModelConfig
from ptxforge.outputs import check_output, output_path
from ptxforge.pipeline import trace

BAR = 20


def config_of(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the options describe; UserError naming every bad option."""
    problems = []
    try:
        moe = MoEConfig(hidden=args.hidden, inter=args.inter, num_experts=args.experts, topk=args.topk,
                        n_group=args.groups, topk_group=args.topk_groups)
        model = ModelConfig(vocab=args.vocab, hidden=args.hidden, heads=args.heads, seq=args.seq, layers=args.layers,
                            moe=moe, seed=args.seed, dtype="float64" if args.float64 else "float32")
    except ValueError as e:
        raise UserError(str(e).replace("ModelConfig: ", "")) from None
    if args.topk > args.experts or args.experts % args.groups or args.topk_groups > args.groups:
        problems.append(f"--topk {args.topk} of --experts {args.experts} in --groups {args.groups} "
                        f"(--topk-groups {args.topk_groups}): the groups must split the experts evenly and "
                        f"the top-k must fit")
    cfg = TrainConfig(pp=args.pp, ep=args.ep, steps=args.steps, chunks=args.chunks, micro_batch=args.micro_batch,
                      lr=args.lr, fp8=args.fp8, overlap=not args.sync, backend=args.backend,
                      timeout_s=args.timeout, model=model, fail_rank=args.fail_rank, fail_step=args.fail_step)
    problems += cfg.problems()
    if args.record_steps < 1:
        problems.append("--record-steps must be at least 1")
    if problems:
        raise UserError("; ".join(problems))
    return cfg


def progress_line(step: int, steps: int, loss: float, seconds: float) -> str:
    done = round(BAR * step / steps)
    return f"step {step:>{len(str(steps))}}/{steps} [{'#' * done}{'.' * (BAR - done)}] loss {loss:.6f}  {seconds:.2f} s"


def _print_step(steps: int):
    def on_step(step: int, loss: float, seconds: float) -> None:
        print(progress_line(step, steps, loss, seconds), flush=True)
    return on_step


def rank_main(rank: int, world: int, cfg: TrainConfig, record_steps: int, quiet: bool) -> dict:
    """One rank of `ptxforge train`: train, then gather every rank's spans of the last `record_steps` steps on
    rank 0. Rank 0 returns {"losses", "seconds", "spans"}, the others their losses and times."""
    torch.set_num_threads(1)  # pp * ep processes on a few cores: intra-op threads would only fight
    rec = trace.Recorder(rank)
    on_step = _print_step(cfg.steps) if rank == 0 and not quiet else None
    res = train_rank(rank, world, cfg, recorder=rec, on_step=on_step, record_steps=record_steps)
    spans = trace.gather_spans(rec)
    return dict(res, spans=spans)


def spawned(cfg: TrainConfig, record_steps: int, quiet: bool) -> dict:
    """Rank 0's result of pp * ep ranks started here; TrainingStopped naming the rank that failed first."""
    world = cfg.pp * cfg.ep
    try:
        # a rank that fails returns its TrainingStopped text; the others' name the same first failure
        results = run_ranks(_caught, world, cfg, record_steps, quiet,
                            timeout_s=cfg.timeout_s * 2 + 30 * cfg.steps + 120)
    except TimeoutError as e:
        raise UserError(f"ptxforge train: {e}") from None
    for r in results:
        if "stopped" in r:
            raise TrainingStopped(r["stopped"])
    return results[0]


def _caught(rank: int, world: int, cfg: TrainConfig, record_steps: int, quiet: bool) -> dict:
    try:
        return rank_main(rank, world, cfg, record_steps, quiet)
    except TrainingStopped as e:
        return {"stopped": str(e)}


def _torchrun(cfg: TrainConfig, record_steps: int, quiet: bool, rank: int, world: int) -> dict | None:
    """This process is one rank of a torchrun world: rank 0's result, None on the others."""
    if world != cfg.pp * cfg.ep:
        raise UserError(f"torchrun started {world} processes but --pp {cfg.pp} x --ep {cfg.ep} = "
                        f"{cfg.pp * cfg.ep}")
    dist.init_process_group("gloo", timeout=timedelta(seconds=max(60.0, cfg.timeout_s)))
    try:
        res = rank_main(rank, world, cfg, record_steps, quiet)
    finally:
        dist.destroy_process_group()
    return res if rank == 0 else None


def _default_picture() -> str:
    return os.path.join(tempfile.gettempdir(), "ptxforge_train_timeline.svg")


def report(res: dict, cfg: TrainConfig, picture: str, spans_json: str | None, record_steps: int) -> None:
    """Print the overlap fraction per rank and overall, and write the timeline (and the spans)."""
    spans = res["spans"]
    shown = min(record_steps, cfg.steps)
    print(f"overlap fraction (communication time hidden behind computation, last {shown} step(s)): "
          f"{trace.overlap_fraction(spans):.2f} overall; per rank "
          + ", ".join(f"{r}: {trace.overlap_fraction(spans, r):.2f}" for r in range(cfg.pp * cfg.ep)))
    steady = sorted(res["seconds"][1:] or res["seconds"])
    print(f"step time: median {steady[len(steady) // 2]:.3f} s over steps {2 if cfg.steps > 1 else 1}-{cfg.steps}")
    title = (f"ptxforge train: DualPipe PP {cfg.pp} x EP {cfg.ep}, {'FP8' if cfg.fp8 else 'BF16'} dispatch, "
             f"{'overlapped' if cfg.overlap else 'synchronous'}, last {shown} step(s)")
    with output_path(picture, "--timeline") as tmp:
        if picture.lower().endswith(".png"):
            trace.to_png(spans, tmp, title=title)
        else:
            trace.to_svg(spans, tmp, title=title)
    print(f"wrote the timeline to {picture}")
    if spans_json:
        with output_path(spans_json, "--spans") as tmp:
            trace.save_json(spans, tmp, meta={"schedule": "dualpipe", "pp": cfg.pp, "micro_batches": cfg.chunks,
                                              "ep": cfg.ep, "fp8": cfg.fp8, "overlap": cfg.overlap,
                                              "steps": shown, "first_step": cfg.steps - shown + 1})
        print(f"wrote the spans to {spans_json}")


def run(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    picture = args.timeline or _default_picture()
    check_output(picture, "--timeline")
    if args.spans:
        check_output(args.spans, "--spans", {picture: "--timeline"})
    try:
        torchrun = environment.torchrun_rank()
    except environment.EnvironmentVariableError as e:
        raise UserError(str(e)) from None
    if torchrun is None or torchrun[0] == 0:
        print(f"training: DualPipe PP {cfg.pp} x EP {cfg.ep} = {cfg.pp * cfg.ep} gloo processes, "
              f"{cfg.model.layers} layers (hidden {cfg.model.hidden}, {cfg.model.moe.num_experts} routed experts "
              f"top-{cfg.model.moe.topk} + 1 shared), {cfg.chunks} micro-batches of {cfg.micro_batch} x "
              f"{cfg.model.seq} tokens per EP rank, {'FP8' if cfg.fp8 else 'BF16'} dispatch, "
              f"{'overlapped' if cfg.overlap else 'synchronous'} calls, backend {cfg.backend}", flush=True)
    t0 = time.perf_counter()
    res = _torchrun(cfg, args.record_steps, args.quiet, *torchrun) if torchrun is not None else \
        spawned(cfg, args.record_steps, args.quiet)
    if res is None:
        return 0
    losses = res["losses"]
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} in {cfg.steps} steps ({time.perf_counter() - t0:.1f} s)")
    report(res, cfg, picture, args.spans, args.record_steps)
    if args.check:
        return _check(cfg, losses)
    return 0


def _check(cfg: TrainConfig, losses: list[float]) -> int:
    ref = reference_losses(cfg)
    rel = [abs(a - b) / abs(b) for a, b in zip(losses, ref, strict=True)]
    print("single-process run of the same model, weights and data:")
    for i, (a, b, r) in enumerate(zip(losses, ref, rel, strict=True), 1):
        print(f"  step {i:>3}  {a:.9f}  one process {b:.9f}  relative difference {r:.1e}")
    same = sum(a == b for a, b in zip(losses, ref, strict=True))
    print(f"largest relative difference {max(rel):.1e}; {same} of {len(ref)} steps equal bit for bit")
    return 0
