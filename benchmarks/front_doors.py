"""The front doors next to their peers, in one run.

CUDA C++: `pf.compile_cuda` (NVRTC in-process; cold with the cache off, then warm from the cache) against
`nvcc -ptx` (a subprocess, what users did by hand) on the templated block-sum kernel of
tests/front/data. Triton: the planted race of tests/triton (`racy_shift_kernel`) and a 64K vector add under
`ptxforge.triton.emulate` (plain and sanitized) against Triton's own interpreter (`TRITON_INTERPRET=1`, in a
subprocess: the variable is read when kernels are decorated): seconds, whether the result equals torch's,
and whether the race is reported. Best of --repeat wall seconds; the first Triton call's compile is
excluded on both sides (a warm-up call).

    python benchmarks/front_doors.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "triton"))
SOURCE = ROOT / "tests" / "front" / "data" / "block_sum_race.cu"

TRITON_ROWS = r'''
import json, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from triton_kernels import add_kernel, racy_shift_kernel
repeat = int(sys.argv[2])
mode = sys.argv[3]  # interpret | emu | emu-sanitize


def best(fn):
    fn()  # warm-up: compiles
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return min(times)


def rows():
    n = 1 << 16
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    add_s = best(lambda: add_kernel[(n // 1024,)](x, y, out, n, BLOCK=1024))
    equal = bool(torch.equal(out, x + y))
    reported = False
    race = torch.arange(512.0)
    try:
        race_s = best(lambda: racy_shift_kernel[(4,)](race.copy_(torch.arange(512.0)), 512, BLOCK=128))
    except Exception as e:  # the sanitizer's report
        reported, race_s = type(e).__name__ == "SanitizerError", float("nan")
    return {"add_s": add_s, "add_equal": equal, "race_s": race_s, "race_reported": reported}


if mode == "interpret":
    print(json.dumps(rows()))
else:
    import ptxforge.triton
    with ptxforge.triton.emulate(sanitize=mode == "emu-sanitize"):
        print(json.dumps(rows()))
'''


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def cuda_rows(repeat: int) -> list[tuple[str, float]]:
    import ptxforge as pf
    from ptxforge.toolchain import find_tool

    text = SOURCE.read_text()
    names = ("block_sum<float, 64>",)
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PTXFORGE_CACHE_DIR"] = "off"
        rows.append(("pf.compile_cuda, cache off (NVRTC in-process)",
                     best_of(lambda: pf.compile_cuda(text, "sm_90a", name_expressions=names), repeat)))
        os.environ["PTXFORGE_CACHE_DIR"] = cache
        pf.compile_cuda(text, "sm_90a", name_expressions=names)
        rows.append(("pf.compile_cuda, from the cache",
                     best_of(lambda: pf.compile_cuda(text, "sm_90a", name_expressions=names), repeat)))
        nvcc = str(find_tool("nvcc"))
        inst = Path(cache) / "inst.cu"
        inst.write_text(text + "\ntemplate __global__ void block_sum<float, 64>(const float*, float*, int);\n")
        out = Path(cache) / "k.ptx"
        rows.append(("peer: nvcc -ptx -arch=sm_90a -lineinfo (subprocess)",
                     best_of(lambda: subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-lineinfo", str(inst), "-o",
                                                     str(out)], check=True), repeat)))
    return rows


def triton_rows(repeat: int) -> list[tuple[str, dict]]:
    out = []
    for mode in ("interpret", "emu", "emu-sanitize"):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("PTXFORGE_TRITON", None)
        if mode == "interpret":
            env["TRITON_INTERPRET"] = "1"
        run = subprocess.run([sys.executable, "-c", TRITON_ROWS, str(ROOT / "tests" / "triton"), str(repeat), mode],
                             capture_output=True, text=True, env=env, timeout=1800)
        if run.returncode != 0:
            raise SystemExit(f"{mode}: {run.stderr[-2000:]}")
        out.append((mode, json.loads(run.stdout.strip().splitlines()[-1])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("CUDA C++ to PTX (block_sum<float, 64>, sm_90a)")
    for name, s in cuda_rows(args.repeat):
        print(f"  {name:55s} {s * 1e3:8.1f} ms")
    print("Triton (64K vector add; the planted cross-program race), best wall seconds after a warm-up call")
    print(f"  {'runner':35s} {'vector add':>10s} {'= torch':>8s} {'race run':>9s} {'race reported':>14s}")
    labels = {"interpret": "peer: TRITON_INTERPRET=1", "emu": "ptxforge.triton.emulate()",
              "emu-sanitize": "ptxforge.triton.emulate(sanitize=True)"}
    for mode, r in triton_rows(args.repeat):
        race = "-" if r["race_s"] != r["race_s"] else f"{r['race_s']:.3f}"
        print(f"  {labels[mode]:35s} {r['add_s']:10.3f} {str(r['add_equal']):>8s} {race:>9s} "
              f"{str(r['race_reported']):>14s}")


if __name__ == "__main__":
    main()
