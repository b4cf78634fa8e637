"""`ptxforge cache info|clear`: show or empty the on-disk cache of assembled cubins."""

from __future__ import annotations

import argparse

from ptxforge import cache


def run(args: argparse.Namespace) -> int:
    if cache.cache_dir() is None:
        print("the cache is off (PTXFORGE_CACHE_DIR=off)")
        return 0
    if args.action == "clear":
        before = cache.clear()
        print(f"removed {before['entries']} entries ({before['bytes']:,} bytes) from {before['dir']}")
    else:
        now = cache.info()
        print(f"{now['dir']}: {now['entries']} entries, {now['bytes']:,} bytes")
    return 0
