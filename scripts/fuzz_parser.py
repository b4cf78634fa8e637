#!/usr/bin/env python3
"""A mutation fuzzing campaign against the PTX parser, printer and validator.

Seeds are the corpus's functions (tests/corpus/ptx), each with its module header; every input is a seed
with one to four random edits (see `ptxforge.ptx.fuzz.mutate`) and must satisfy
`ptxforge.ptx.fuzz.check_input`: parse or raise PTXSyntaxError, print back exactly, reparse its canonical
print, validate without raising. One process; an input that runs past --timeout CPU seconds is a hang, one
that takes more than --budget CPU seconds per 100 KB (an input under 100 KB counts as 100 KB) is over budget.
Failing and over-budget inputs are written to --out. Prints the figures at the end (and as JSON with --json).

    nice -n 19 python scripts/fuzz_parser.py --inputs 50000 --seed 1
    python scripts/fuzz_parser.py --atheris      # coverage-guided, if atheris is installed
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import signal
import sys
import time
from pathlib import Path

from ptxforge.ptx.fuzz import check_input, mutate, seed_texts

ROOT = Path(__file__).resolve().parent.parent
PER_CHARS = 100_000  # the time budget is per 100 KB of input


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def load_seeds(corpus: Path) -> list[str]:
    files = sorted(glob.glob(str(corpus / "*" / "*.ptx")))
    if not files:
        sys.exit(f"fuzz_parser: no PTX files under {corpus}")
    return seed_texts([Path(f).read_text(encoding="utf-8", errors="surrogateescape") for f in files])


def save(out: Path, kind: str, n: int, text: str, detail: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{kind}-{n}.ptx").write_text(text, encoding="utf-8", errors="surrogateescape")
    (out / f"{kind}-{n}.txt").write_text(detail, encoding="utf-8")


def campaign(args) -> dict:
    seeds = load_seeds(args.corpus)
    rng = random.Random(args.seed)
    signal.signal(signal.SIGPROF, _alarm)  # CPU time: a loaded machine does not fake hangs
    counts = {"parsed": 0, "syntax-error": 0}
    crashes = hangs = over_budget = 0
    slowest = (0.0, -1, "")  # CPU seconds (a fair measure on a shared machine), input number, text
    worst_rate = (0.0, -1, 0)  # CPU seconds per 100 KB (an input under 100 KB counts as 100 KB), input, chars
    largest = 0
    total_chars = 0
    t0 = time.perf_counter()
    for n in range(args.inputs):
        text = mutate(rng.choice(seeds), rng)
        total_chars += len(text)
        t = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, args.timeout)
        try:
            counts[check_input(text)] += 1
        except Hang:
            hangs += 1
            save(args.out, "hang", n, text, f"ran past {args.timeout} s")
        except Exception as e:  # noqa: BLE001 - anything that escapes is a finding
            crashes += 1
            save(args.out, "crash", n, text, f"{type(e).__name__}: {e}")
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        dt = time.process_time() - t
        if dt > slowest[0]:
            slowest = (dt, n, text)
        rate = dt / max(len(text), PER_CHARS) * PER_CHARS
        if rate > worst_rate[0]:
            worst_rate = (rate, n, len(text))
        if rate > args.budget:
            over_budget += 1
            save(args.out, "slow", n, text, f"{dt:.3f} CPU seconds for {len(text)} characters")
        largest = max(largest, len(text))
        if args.progress and (n + 1) % args.progress == 0:
            print(f"{n + 1} inputs, {crashes} crashes, {hangs} hangs, {over_budget} over budget, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    if slowest[1] >= 0:
        save(args.out, "slowest", slowest[1], slowest[2], f"{slowest[0]:.3f} CPU seconds")
    wall = time.perf_counter() - t0
    return {
        "inputs": args.inputs, "seed": args.seed, "seeds": len(seeds), **counts, "crashes": crashes,
        "hangs": hangs, "over_budget": over_budget, "timeout_s": args.timeout, "budget_s_per_100kb": args.budget,
        "mean_input_chars": round(total_chars / max(args.inputs, 1)), "largest_input_chars": largest,
        "slowest_input_cpu_s": round(slowest[0], 3), "slowest_input": slowest[1],
        "slowest_input_chars": len(slowest[2]), "worst_cpu_s_per_100kb": round(worst_rate[0], 3),
        "worst_rate_input": worst_rate[1], "worst_rate_input_chars": worst_rate[2], "wall_s": round(wall, 1),
        "inputs_per_s": round(args.inputs / max(wall, 1e-9)),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run_atheris(args) -> None:
    try:
        import atheris
    except ImportError:
        sys.exit("fuzz_parser: --atheris needs `pip install atheris`")

    def one(data: bytes) -> None:
        check_input(data.decode("utf-8", errors="surrogateescape"))

    atheris.Setup([sys.argv[0], *args.atheris_args], one)
    atheris.Fuzz()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=int, default=10_000, help="how many mutated inputs (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (the campaign is reproducible)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before one input counts as a hang")
    p.add_argument("--budget", type=float, default=1.0,
                   help="CPU seconds per 100 KB an input may take (one under 100 KB counts as 100 KB; default 1)")
    p.add_argument("--corpus", type=Path, default=ROOT / "tests" / "corpus" / "ptx")
    p.add_argument("--out", type=Path, default=Path("fuzz-findings"), help="where failing inputs are saved")
    p.add_argument("--progress", type=int, default=5000, help="print a line every N inputs (0: never)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--atheris", action="store_true", help="coverage-guided fuzzing with atheris instead")
    p.add_argument("atheris_args", nargs="*", help="arguments passed on to atheris (after --)")
    args = p.parse_args(argv)
    if args.atheris:
        run_atheris(args)
        return 0
    res = campaign(args)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>18}: {v}")
    return 1 if res["crashes"] or res["hangs"] or res["over_budget"] else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
