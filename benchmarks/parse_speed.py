"""Parse speed on the whole PTX corpus: ptxforge vs pyptx's parser (PyPI `pyptx`), in one run.

    python benchmarks/parse_speed.py [--repeat N] [--files GLOB]

Prints MB/s for each parser over the same files, plus the files each could not parse.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from pathlib import Path

import ptxforge as pf

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "ptx"


def best_time(fn, texts, repeat: int) -> tuple[float, int]:
    """Best-of-`repeat` seconds to parse all `texts`, and how many failed."""
    best, failed = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        failed = 0
        t0 = time.perf_counter()
        for t in texts:
            try:
                fn(t)
            except Exception:
                failed += 1
        best = min(best, time.perf_counter() - t0)
    return best, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs per parser; the best is reported")
    ap.add_argument("--files", default="**/*.ptx", help="glob under tests/corpus/ptx")
    args = ap.parse_args()
    paths = sorted(CORPUS.glob(args.files))
    texts = [p.read_text() for p in paths]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"corpus: {len(paths)} files, {mb:.2f} MB  ({platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()})")
    rows = [("ptxforge " + pf.__version__, pf.parse)]
    try:
        import pyptx
        from pyptx.parser import parse as pyptx_parse

        rows.append((f"pyptx {getattr(pyptx, '__version__', '0.1.1')}", pyptx_parse))
    except ImportError:
        print("pyptx not installed (pip install pyptx==0.1.1); ptxforge only")
    results = []
    for name, fn in rows:
        secs, failed = best_time(fn, texts, args.repeat)
        results.append((name, secs, failed))
    base = results[-1][1] if len(results) > 1 else None
    print(f"{'parser':<16} {'seconds':>8} {'MB/s':>7} {'failed':>7} {'vs pyptx':>9}")
    for name, secs, failed in results:
        ratio = f"{base / secs:.1f}x" if base else "-"
        print(f"{name:<16} {secs:>8.3f} {mb / secs:>7.2f} {failed:>7} {ratio:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
