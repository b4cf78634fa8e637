"""Emulator before/after in CPU seconds: the rows of emu_speed.py, two trees in alternating fresh interpreters.

On a machine shared with other jobs wall times swing 2-4x with the load; CPU seconds (`time.process_time`,
one thread: the emulator is single-threaded) move far less, so this is the A/B to trust there. Each round
runs every tree once (the order alternates between rounds) and each row keeps its best launch over all rounds.

    python benchmarks/emu_speed_cpu.py --baseline <other tree>/src [--rows vadd_1m,reduce] [--repeat 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
src, rows, repeat = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
sys.path.insert(0, src)
import ptxforge  # the tree under test, before emu_speed puts this checkout's src first
sys.path.insert(0, sys.argv[4]); sys.path.insert(0, sys.argv[5])
import numpy as np
import emu_speed as E
from emu_corpus import corpus_module
mods = {m: corpus_module(m, "sm_80.O3") for m in E.CORPUS_MODULES}
info = {k: (kind, n) for k, _, kind, n in E.POCL_ROWS}
out = {"ptxforge": ptxforge.__file__}
for key in rows:
    kind, n = info[key]
    k, grid, block, args, bufs, check = E._pocl_row_launch(kind, n, mods, np.random.default_rng(0), repeat)
    run = lambda: k.launch(grid=grid, block=block, args=args, options={"sanitize": kind is None})
    r = run()
    cpu = wall = float("inf")
    for _ in range(repeat):
        t, w = time.process_time(), time.perf_counter()
        run()
        cpu, wall = min(cpu, time.process_time() - t), min(wall, time.perf_counter() - w)
    assert check(1 + repeat), key
    out[key] = [int(r.thread_instructions), cpu, wall]
    for b in bufs:
        b.free()
print(json.dumps(out))
"""


def measure(src: str, rows: list[str], repeat: int) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, src, ",".join(rows), str(repeat), str(ROOT / "benchmarks"),
                        str(ROOT / "tests" / "emu")], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"{src}: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other tree's src/")
    ap.add_argument("--rows", default="vadd_1k,vadd_16k,vadd_64k,vadd_1m,vadd_16m,reduce,matmul,collatz")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    rows = a.rows.split(",")
    trees = [("before", a.baseline), ("after", str(ROOT / "src"))]
    best: dict = {name: {} for name, _ in trees}
    for i in range(a.rounds):
        for name, src in trees if i % 2 == 0 else trees[::-1]:
            got = measure(src, rows, a.repeat)
            for key in rows:
                ti, cpu, wall = got[key]
                old = best[name].get(key, (ti, cpu, wall))
                if old[0] != ti:
                    raise SystemExit(f"{key}: the trees count different thread-instructions ({old[0]} and {ti})")
                best[name][key] = (ti, min(old[1], cpu), min(old[2], wall))
    print(f"CPU seconds per launch, best of {a.repeat} x {a.rounds} rounds (wall in brackets)\n")
    print("| row | thread-instr | before CPU s | after CPU s | speed-up (CPU) | after M thr-instr/s (CPU) |")
    print("|---|---|---|---|---|---|")
    for key in rows:
        ti, b_cpu, b_wall = best["before"][key]
        ti_after, cpu, wall = best["after"][key]
        if ti_after != ti:
            raise SystemExit(f"{key}: before and after count different thread-instructions ({ti} and {ti_after})")
        print(f"| {key} | {ti:,} | {b_cpu:.4f} ({b_wall:.4f}) | {cpu:.4f} ({wall:.4f}) | {b_cpu / cpu:.2f}x | "
              f"{ti / cpu / 1e6:.1f} |")


if __name__ == "__main__":
    main()
