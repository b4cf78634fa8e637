"""An on-disk cache of tool outputs (ptxas cubins), keyed by content, tool version and flags.

Entries live in `$PTXFORGE_CACHE_DIR` (default `$XDG_CACHE_HOME/ptxforge`, i.e. `~/.cache/ptxforge`);
`PTXFORGE_CACHE_DIR=off` turns the cache off. Each entry is written to a temporary file in the same
directory and renamed into place, so concurrent processes see a whole entry or none; an unreadable entry is
a miss. `ptxforge cache info` / `ptxforge cache clear` show and empty it.

Parsed modules are not cached on disk: unpickling a module costs as much as parsing its text (44 ms against
50 ms for a 4,000-line Triton matmul), so such a cache would only add files.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

FORMAT = 1  # bump when an entry's layout changes


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is off."""
    explicit = os.environ.get("PTXFORGE_CACHE_DIR")
    if explicit is not None:
        return None if explicit.strip().lower() in ("", "off", "0", "none") else Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptxforge"


def key(*parts: object) -> str:
    """A hex digest of the parts (text, bytes, or anything with a stable repr)."""
    h = hashlib.sha256(f"ptxforge-cache-{FORMAT}".encode())
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogateescape")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _path(kind: str, k: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / kind / k[:2] / k


def get(kind: str, k: str) -> bytes | None:
    """The entry's bytes, or None (absent, cache off, or unreadable)."""
    p = _path(kind, k)
    if p is None:
        return None
    try:
        return p.read_bytes()
    except OSError:
        return None


def put(kind: str, k: str, data: bytes) -> None:
    """Store an entry atomically; a cache that cannot be written is skipped silently (it is only a cache)."""
    p = _path(kind, k)
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def get_json(kind: str, k: str) -> Any:
    """The JSON value of an entry, or None (absent, cache off, unreadable or damaged)."""
    raw = get(kind, k)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:  # a damaged entry is a miss
        return None


def put_json(kind: str, k: str, value: Any) -> None:
    put(kind, k, json.dumps(value).encode())


def info() -> dict[str, Any]:
    """{'dir', 'entries', 'bytes'} of the cache."""
    d = cache_dir()
    if d is None or not d.is_dir():
        return {"dir": str(d) if d else None, "entries": 0, "bytes": 0}
    files = [f for f in d.rglob("*") if f.is_file() and not f.name.startswith(".tmp-")]
    return {"dir": str(d), "entries": len(files), "bytes": sum(f.stat().st_size for f in files)}


def clear() -> dict[str, Any]:
    """Remove every entry; returns what `info()` said before."""
    before = info()
    d = cache_dir()
    if d is not None and d.is_dir():
        for f in sorted(d.rglob("*"), key=lambda x: len(x.parts), reverse=True):
            try:
                f.unlink() if f.is_file() else f.rmdir()
            except OSError:
                pass
    return before
