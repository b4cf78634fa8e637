"""The subcommands' table: each one's name, help and arguments, and the module that implements it.

Cheap to import (argparse, and the schedule, preset and parameter names of the pure-Python `pipeline` and `plan`
packages; no emulator, numpy or torch), so `ptxforge --help` and `ptxforge CMD --help` stay fast. Each parser
stores its implementation as the default `entry` ("ptxforge.cli.MODULE:FUNCTION");
`ptxforge.cli.main.run_command` imports that module when the subcommand runs, and the module imports what it
needs at its top.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ptxforge.pipeline.schedules import SCHEDULES
from ptxforge.plan.params import CHOICES, PARAM_NAMES, PARAM_TYPES
from ptxforge.plan.presets import PRESETS

__all__ = ["COMMANDS", "add_commands"]

Subparsers = argparse._SubParsersAction  # what `ArgumentParser.add_subparsers` returns

RUN_ARGUMENTS = """\
Arguments, one `--arg` per kernel parameter in order:
  a.npy                 a numpy array loaded from a.npy (an input: not written back unless named by --out)
  out.npy=zeros:N:DTYPE a new zero array of N elements (DTYPE: float32, int32, uint8 ...) saved to out.npy
  out.npy=empty-like:a.npy   zeros shaped and typed like another .npy file, saved to out.npy
  null                  a null pointer
  NUMBER                a scalar, converted to the parameter's type (int or float)
"""

PIPELINE_DESCRIPTION = """\
`ptxforge pipeline`: simulate pipeline schedules (1F1B, ZB1P, DualPipe, DualPipeV) and compare them with
DeepSeek's bubble/memory table; draw the timeline as PNG or SVG."""

PLAN_DESCRIPTION = """\
`ptxforge plan`: how many SMs expert-parallel dispatch/combine need on a cluster, and why.

    ptxforge plan --preset deepseek-v3-h800 [--PARAM VALUE ...] [--routing FILE | --scores random|skewed]
                  [--json] [--png FILE]
    ptxforge plan --measured spans.json [--schedule dualpipev --pp 2 --micro-batches 8] [--svg F] [--png F]

Every model parameter is an option (`--tokens 8192`, `--scaleout-gbs 100`); `--list` shows the presets and
the parameters with their values and sources.
"""


def _runs(p: argparse.ArgumentParser, module: str, function: str = "run") -> argparse.ArgumentParser:
    """`p` runs `function(args)` of ptxforge.cli.`module`, imported only then."""
    p.set_defaults(entry=f"ptxforge.cli.{module}:{function}")
    return p


def _fmt(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("fmt", help="print PTX in canonical layout",
                       description="Parse a PTX file and print it in ptxforge's canonical layout "
                                   "(ptxas builds the same code from it).")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--preserve", action="store_true",
                   help="keep the original text (round-trip check: output equals input)")
    return _runs(p, "fmt")


def _check(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("check", help="report every error in PTX files",
                       description="Parse and validate PTX: declarations, labels, operand types, and the "
                                   "instructions the target and PTX ISA version allow. Prints "
                                   "FILE:LINE:COL: error: ... for each problem; exit 1 if there is any.")
    p.add_argument("files", nargs="+", metavar="FILE", help="PTX files (- for standard input)")
    p.add_argument("--arch", help="check against this target instead of the module's .target")
    p.add_argument("--ptx-version", help="check against this PTX ISA version instead of .version")
    p.add_argument("--ptxas", action="store_true", help="also assemble with ptxas and report its messages")
    p.add_argument("--ptxas-path", help="the ptxas to use (default: CUDA_HOME, PATH, then the pip wheel)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    return _runs(p, "check")


def _retarget(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("retarget", help="move PTX to another GPU target or PTX ISA version",
                       description="Rewrite .target (and .version) of a PTX file. Every instruction the "
                                   "new target or version lacks is reported with its line, and nothing is "
                                   "written.")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("--arch", required=True, help="new target, e.g. sm_80, sm_90a, sm_100a")
    p.add_argument("--ptx-version", help="new .version, e.g. 9.0 (default: keep the module's)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    return _runs(p, "retarget")


def _run(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run a kernel on the CPU emulator or a GPU",
                       description="Launch a kernel of a PTX file on the SIMT emulator (default) or a GPU. "
                                   "Arrays come from and go back to .npy files.",
                       epilog=RUN_ARGUMENTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="PTX file, or a CUDA C++ .cu file (compiled with NVRTC for --arch)")
    p.add_argument("--kernel", "-k", help="kernel name, a C++ name for a .cu file (default: the only kernel)")
    p.add_argument("--arch", default=None, help="the target a .cu file is compiled for (default sm_90a)")
    p.add_argument("--grid", default="1", help="X[,Y[,Z]] blocks (default 1)")
    p.add_argument("--block", default="1", help="X[,Y[,Z]] threads per block (default 1)")
    p.add_argument("--arg", "-a", action="append", default=[], help="a kernel argument (see below)")
    p.add_argument("--out", action="append", default=[], metavar="FILE.npy|PARAM",
                   help="also write this input array back after the launch (its .npy path or parameter name)")
    p.add_argument("--device", choices=("emu", "cuda", "auto"), default=None,
                   help="where to run: the CPU emulator, the GPU (cuda), or the GPU when there is one "
                        "(default: $PTXFORGE_DEVICE, else emu)")
    p.add_argument("--shared-mem", type=int, default=0, help="dynamic shared memory bytes per block")
    p.add_argument("--sms", type=int, default=None, help="number of SMs to emulate (default 132)")
    p.add_argument("--watchdog", type=float, default=60.0,
                   help="seconds without progress (the machine's state repeating) before stopping (default 60)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop the launch after S seconds of wall time, progress or not (default on the emulator: "
                        "600; inf: no limit)")
    p.add_argument("--sanitize", action="store_true", help="run under the memory/race sanitizer")
    p.add_argument("--cooperative", action="store_true",
                   help="a cooperative launch (every block resident at once; cooperative groups' grid.sync())")
    p.add_argument("--report", metavar="FILE", help="write the sanitizer's findings as JSON to FILE (implies "
                                                    "--sanitize; exit status 1 when it found errors)")
    p.add_argument("--sarif", metavar="FILE", help="write the sanitizer's findings as SARIF 2.1.0 to FILE, for CI "
                                                   "annotations (implies --sanitize)")
    p.add_argument("--tool", choices=("memcheck", "racecheck", "initcheck", "synccheck"), default=None,
                   help="one family of checks, as compute-sanitizer's --tool (implies --sanitize; default: all). "
                        "Out-of-bounds accesses are reported by every tool")
    p.add_argument("--print-limit", type=int, default=None, metavar="N",
                   help="report at most N distinct error sites (the rest are counted; default 100)")
    return _runs(p, "run")


def _emit(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("emit", help="print the PTX of DSL kernels in a Python file",
                       description="Run a Python file that defines @kernel functions (ptxforge.dsl) and print "
                                   "the PTX of one kernel (FILE.py:NAME) or of all of them, as one module.")
    p.add_argument("target", metavar="FILE.py[:NAME]", help="Python file, optionally with a kernel name")
    p.add_argument("--arch", default=None,
                   help="target such as sm_80 or sm_90a (default: each kernel's own; 'auto' = this GPU or sm_90a)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    return _runs(p, "emit")


DEFAULT_BLOCK = 256  # `ptxforge stats`' occupancy column without --block, .reqntid or .maxntid


def _stats(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("stats", help="per-kernel registers, spills, shared memory and occupancy",
                       description="Assemble PTX with ptxas -v (no GPU needed) and print, per function, "
                                   "registers, barriers, stack, spill bytes, static shared memory, and the "
                                   "theoretical occupancy at a block size: --block, else the kernel's "
                                   f".reqntid/.maxntid, else {DEFAULT_BLOCK}.")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("--arch", help="assemble for this target instead of the module's .target")
    p.add_argument("--block", type=int, metavar="N", help="threads per block for the occupancy column")
    return _runs(p, "stats")


def _sass(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("sass", help="disassemble the SASS ptxas makes from PTX",
                       description="Assemble PTX with ptxas (no GPU needed) and print the SASS of each "
                                   "function, or of --kernel alone, as cuobjdump -sass lists it.")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("--arch", help="assemble for this target instead of the module's .target")
    p.add_argument("--kernel", metavar="K", help="print only this function")
    p.add_argument("--encodings", action="store_true", help="keep the hex instruction words")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    return _runs(p, "sass")


def _devices(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("devices", help="the devices kernels can run on here, and the tools found",
                       description="List the devices a launch can use (the CPU emulator always; a GPU when the "
                                   "CUDA driver, cuda-bindings and a GPU are all present, else why not) and "
                                   "where ptxas, cuobjdump and nvdisasm were found.")
    return _runs(p, "devices")


def _demo(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="parse, check, round-trip, run and sanitize the bundled kernels",
                       description="Show ptxforge on bundled nvcc output (data/demo.cu): parse it, validate it, "
                                   "print it back (byte-identical, and canonical) and check that ptxas builds "
                                   "the identical cubin; run the kernels on the CPU emulator against numpy (and on "
                                   "the GPU against the emulator, when there is one); let "
                                   "the sanitizer find a planted race; build a kernel with the DSL.")
    p.add_argument("--file", help="use this PTX file instead of the bundled one (front end only)")
    p.add_argument("--sm-map", metavar="PNG", default=None,
                   help="where to draw the emulated node's SM map (default: ptxforge_node_sm_map.png in the "
                        "temp directory)")
    return _runs(p, "demo")


def _pipeline(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("pipeline", help="simulate and compare pipeline schedules (DualPipe, 1F1B, ...)",
                       description=PIPELINE_DESCRIPTION)
    subs = p.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser, chunks_default: int) -> None:
        q.add_argument("--pp", type=int, default=8, help="pipeline stages (DualPipeV uses PP/2 devices)")
        q.add_argument("--chunks", type=int, default=chunks_default, help="micro-batches per step")
        q.add_argument("--costs", default="1,2,1,3",
                       help="F,B,W[,FB]: forward, full backward, weight-gradient part, overlapped F&B "
                            "(default 1,2,1,3; FB defaults to F+B)")
        q.add_argument("--p2p", type=float, default=0.0, help="latency of one p2p message (default 0)")

    s = subs.add_parser("simulate", help="simulate one schedule; optional timeline picture")
    s.add_argument("--schedule", choices=SCHEDULES, default="dualpipe", type=str.lower)
    common(s, 20)
    s.add_argument("--png", metavar="FILE", help="write the timeline as PNG (needs matplotlib)")
    s.add_argument("--svg", metavar="FILE", help="write the timeline as SVG")
    s.add_argument("--ops", action="store_true", help="also print every rank's compute op list")
    _runs(s, "pipeline_cmd", "simulate")

    c = subs.add_parser("compare", help="all schedules side by side, with DeepSeek's table formulas")
    common(c, 20)
    _runs(c, "pipeline_cmd", "compare")
    p.set_defaults(help_of=p)  # `ptxforge pipeline` alone prints this parser's help (and exits 1)
    return p


class _StrictParams(argparse.ArgumentParser):
    """Mixed into the plan parser: an unknown `--PARAM` is an error that lists the valid ones."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]  # typeshed overloads
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            bad = next((a for a in extras if a.startswith("-")), extras[0])
            valid = ", ".join("--" + n.replace("_", "-") for n in PARAM_NAMES)
            self.exit(1, f"{self.prog}: error: unknown parameter {bad!r}; valid parameters: {valid} "
                         f"(and --preset, --routing, --scores, --seed, --json, --png, --list, --measured, "
                         f"--schedule, --warmup-steps, --svg)\n")
        return ns, []


def _plan(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="SMs for expert-parallel dispatch/combine: cost model and DualPipe overlap",
                       description=PLAN_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                       allow_abbrev=False)
    p.__class__ = type("PlanParser", (_StrictParams, type(p)), {})
    p.add_argument("--preset", default="deepseek-v3-h800", metavar="NAME",
                   help=f"one of {', '.join(PRESETS)} (default deepseek-v3-h800)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of the table")
    p.add_argument("--png", metavar="FILE", help="write step time and link utilization vs SM budget (matplotlib)")
    p.add_argument("--routing", metavar="FILE", help="top-k expert ids (.npy or .pt, [T, k] or [R, T, k])")
    p.add_argument("--scores", choices=("random", "skewed"), help="route generated scores with the group-limited "
                                                                  "top-k instead of the average-case formula")
    p.add_argument("--seed", type=int, default=0, help="seed of --scores (default 0)")
    p.add_argument("--list", action="store_true", help="list the presets and parameters with their sources")
    m = p.add_argument_group("a measured run (ptxforge.pipeline.trace spans): predicted against measured")
    m.add_argument("--measured", metavar="SPANS.json", help="read a run's spans (save_json), take its per-op "
                   "costs, predict its step and overlap, print both side by side; --pp (pipeline ranks) and "
                   "--micro-batches default to the file's meta")
    m.add_argument("--schedule", choices=SCHEDULES, type=str.lower,
                   help="with --measured: the run's schedule (default: the file's meta, else dualpipev)")
    m.add_argument("--warmup-steps", type=int, default=0, metavar="N",
                   help="with --measured: leave out the first N steps (spans with attrs step < N)")
    m.add_argument("--svg", metavar="FILE", help="with --measured: the measured timeline, the comparison in its "
                   "caption (--png writes it as PNG)")
    g = p.add_argument_group("model parameters (default: the preset's)")
    for n in PARAM_NAMES:
        kind: Any = PARAM_TYPES[n]
        dashed = "--" + n.replace("_", "-")
        names = [dashed] if "_" not in n else [dashed, "--" + n]
        g.add_argument(*names, dest=n, type=kind, default=None, metavar=kind.__name__.upper(),
                       choices=CHOICES.get(n))
    return _runs(p, "plan")


TRAIN_DESCRIPTION = """\
`ptxforge train`: a small DeepSeek-V3-shaped model (multi-head attention + MoE with a shared expert, sigmoid
group-limited routing with bias balancing) trained with DualPipe x expert parallelism on gloo processes: FP8
(--fp8) or BF16 dispatch, BF16 combine through ptxforge.ep, one micro-batch's dispatch and combine overlapped
with another's attention and experts (--sync: every call synchronous). Prints the loss of every step; on exit
the overlap fraction and a per-rank timeline of the last steps (SVG, or PNG by the name's suffix).

    ptxforge train --pp 2 --ep 2 --steps 20 [--fp8] [--check] [--timeline t.svg]

Starts pp * ep processes itself; under torchrun (RANK, WORLD_SIZE set; several machines by torchrun's usual
flags) each process is one rank."""


def _train(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("train", help="train a small DeepSeek-V3-shaped MoE model with DualPipe x EP on gloo",
                       description=TRAIN_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pp", type=int, default=2, help="pipeline ranks (DualPipe: even)")
    p.add_argument("--ep", type=int, default=2, help="expert-parallel ranks per pipeline rank")
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--chunks", type=int, default=4, help="micro-batches per step and EP rank (even, >= 2 * pp)")
    p.add_argument("--micro-batch", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--seq", type=int, default=16, help="tokens per sequence")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (a multiple of --pp)")
    p.add_argument("--hidden", type=int, default=128, help="model width (a multiple of 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--vocab", type=int, default=128, help="vocabulary size")
    p.add_argument("--experts", type=int, default=8, help="routed experts (split evenly over the EP ranks)")
    p.add_argument("--inter", type=int, default=64, help="each expert's intermediate size")
    p.add_argument("--topk", type=int, default=2, help="routed experts per token")
    p.add_argument("--groups", type=int, default=4, help="expert groups of the group-limited routing")
    p.add_argument("--topk-groups", type=int, default=2, help="groups a token's experts may come from")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="weights and tokens")
    p.add_argument("--fp8", action="store_true", help="dispatch FP8 1x128 activations (default BF16)")
    p.add_argument("--sync", action="store_true", help="every EP call synchronous, no overlap (the baseline)")
    p.add_argument("--backend", choices=("torch", "kernels"), default="torch",
                   help="ptxforge.ep.Buffer's backend (kernels: the DSL communication kernels on emulated GPUs)")
    p.add_argument("--float64", action="store_true",
                   help="compute in float64 (default float32; either equals one process bit for bit: --check)")
    p.add_argument("--check", action="store_true",
                   help="also run the same training in one process and print both losses of every step")
    p.add_argument("--timeline", metavar="FILE", default=None,
                   help="the timeline picture, .svg or .png (default: ptxforge_train_timeline.svg in the temp "
                        "directory)")
    p.add_argument("--spans", metavar="FILE.json", default=None, help="also write the measured spans as JSON")
    p.add_argument("--record-steps", type=int, default=2, help="the last steps the timeline shows")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds any rank waits for another before every rank stops with an error")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    p.add_argument("--fail-rank", type=int, default=None, metavar="RANK",
                   help="fault injection: this rank raises inside its first overlapped chunk of --fail-step "
                        "(every rank must then stop with an error naming it)")
    p.add_argument("--fail-step", type=int, default=1, help="the step --fail-rank fails in")
    return _runs(p, "train_cmd")


def _cache(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("cache", help="show or clear the on-disk cache of ptxas builds",
                       description="ptxforge keeps what ptxas built, keyed by the PTX text, arch, flags and the "
                                   "ptxas binary, in $PTXFORGE_CACHE_DIR (default ~/.cache/ptxforge; 'off' turns "
                                   "it off).")
    p.add_argument("action", choices=("info", "clear"),
                   help="info: where and how big; clear: remove every entry (refused, nothing deleted, when the "
                        "folder holds anything that is not an entry)")
    return _runs(p, "cache_cmd")


# name -> what adds its parser, in the order `ptxforge --help` lists them
_TABLE: dict[str, Callable[[Subparsers], argparse.ArgumentParser]] = {
    "fmt": _fmt, "check": _check, "retarget": _retarget, "run": _run, "emit": _emit, "stats": _stats, "sass": _sass,
    "devices": _devices, "demo": _demo, "pipeline": _pipeline, "plan": _plan, "train": _train, "cache": _cache,
}
COMMANDS = tuple(_TABLE)


def add_commands(sub: Subparsers, names: Sequence[str] = COMMANDS) -> None:
    """Add the parsers of the subcommands `names` (default: all of them) to `sub`."""
    for name in names:
        _TABLE[name](sub)

