"""`ptxforge cache info|clear`: show or empty the on-disk cache of assembled cubins. `clear` deletes only
the cache's own entries and refuses (deleting nothing) a folder that holds anything else."""

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
        foreign = f"; and {now['foreign']} file(s) or folder(s) that are not ptxforge's" if now["foreign"] else ""
        print(f"{now['dir']}: {now['entries']} entries, {now['bytes']:,} bytes{foreign}")
    return 0
