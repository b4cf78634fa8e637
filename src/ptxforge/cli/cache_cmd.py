"""`ptxforge cache info|clear`: show or empty the on-disk cache of assembled cubins."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the on-disk cache of ptxas builds",
                       description="ptxforge keeps what ptxas built, keyed by the PTX text, arch, flags and the "
                                   "ptxas binary, in $PTXFORGE_CACHE_DIR (default ~/.cache/ptxforge; 'off' turns "
                                   "it off).")
    p.add_argument("action", choices=("info", "clear"), help="info: where and how big; clear: remove every entry")
    p.set_defaults(func=run)


def run(args) -> int:
    from ptxforge import cache

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
