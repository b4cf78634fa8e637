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


def best_time(fn, texts, repeat: int) -> tuple[float, int]:  # noqa: D401
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
    try:
        import pyptx  # noqa: F401
        from pyptx.parser import parse as pyptx_parse
    except ImportError:
        pyptx_parse = None
        print("pyptx not installed (pip install pyptx==0.1.1): ptxforge only")
    ours, failed = best_time(pf.parse, texts, args.repeat)
    print(f"{'parser':<16} {'files':>6} {'MB':>6} {'seconds':>8} {'MB/s':>7} {'failed':>7}")
    print(f"{'ptxforge':<16} {len(texts):>6} {mb:>6.2f} {ours:>8.3f} {mb / ours:>7.2f} {failed:>7}")
    if pyptx_parse is None:
        return 0
    # pyptx rejects some files; compare both on the files pyptx parses, so both do the same work
    ok = []
    for t in texts:
        try:
            pyptx_parse(t)
            ok.append(t)
        except Exception:
            pass
    mb_ok = sum(len(t.encode()) for t in ok) / 1e6
    theirs, _ = best_time(pyptx_parse, ok, args.repeat)
    ours_ok, _ = best_time(pf.parse, ok, args.repeat)
    print(f"{'ptxforge':<16} {len(ok):>6} {mb_ok:>6.2f} {ours_ok:>8.3f} {mb_ok / ours_ok:>7.2f} {0:>7}"
          "   (files pyptx parses)")
    print(f"{'pyptx 0.1.1':<16} {len(ok):>6} {mb_ok:>6.2f} {theirs:>8.3f} {mb_ok / theirs:>7.2f} {0:>7}"
          f"   ({len(texts) - len(ok)} other files it rejects)")
    print(f"ptxforge / pyptx on the same files: {theirs / ours_ok:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
