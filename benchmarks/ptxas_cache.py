"""What a ptxas verdict cache hit costs against running ptxas (the peer), for a few corpus modules.

    python benchmarks/ptxas_cache.py [--repeat N] [PTX ...]

For each module: ptxas itself (cache off, best of --repeat), then `assemble` answered from a fresh cache
folder (best of --repeat hits: read, header and digest check, JSON, field checks). Runs on any tree whose
`ptxforge.toolchain.assemble` exists, so the same script measures before and after a change (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ptxforge.ptx.parser import parse
from ptxforge.toolchain import assemble

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "ptx"
DEFAULT = ("triton/matmul_f16.sm_80.ptx", "cuda/softmax_layernorm.sm_90a.O3.ptx", "cuda/curand_xorwow.sm_90a.O3.ptx")


def best(repeat: int, text: str, arch: str) -> float:
    """The fastest of `repeat` assembles (seconds)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        assemble(text, arch)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ptx", nargs="*", default=[str(CORPUS / p) for p in DEFAULT])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'module':<40} {'bytes':>9} {'cubin':>9} {'ptxas (peer)':>13} {'cache hit':>10} {'ratio':>7}")
    for path in args.ptx:
        text = Path(path).read_text()
        arch = parse(text, filename=path).target.arch
        with tempfile.TemporaryDirectory() as d:
            os.environ["PTXFORGE_CACHE_DIR"] = "off"
            cold = best(args.repeat, text, arch)
            os.environ["PTXFORGE_CACHE_DIR"] = d
            first = assemble(text, arch)
            hit = best(args.repeat * 4, text, arch)
        print(f"{Path(path).name:<40} {len(text):>9,} {len(first.cubin):>9,} {cold * 1e3:>10.1f} ms "
              f"{hit * 1e3:>7.2f} ms {cold / hit:>6.0f}x")


if __name__ == "__main__":
    main()
