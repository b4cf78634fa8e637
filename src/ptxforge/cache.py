"""An on-disk cache of tool outputs (ptxas cubins) and of ptxforge's own traced DSL kernels (`dsl.trace_cache`),
keyed by content, tool version and flags.

Entries live in `$PTXFORGE_CACHE_DIR` (default `$XDG_CACHE_HOME/ptxforge`, i.e. `~/.cache/ptxforge`);
`PTXFORGE_CACHE_DIR=off` turns the cache off. Each entry is written to a temporary file in the same
directory and renamed into place, so concurrent processes see a whole entry or none. `ptxforge cache info` /
`ptxforge cache clear` show and empty it.

An entry is `KIND/KK/KEY` (KEY: 64 hex digits, KK its first two) holding one header line
`ptxforge-cache FORMAT KIND KEY SHA256\\n` and the payload, SHA256 being the payload's digest. It is read
only when it is a regular file (not a link) owned by this user and writable by nobody else, no larger than
MAX_ENTRY_BYTES, and its header names its own kind and key with a digest the payload matches; anything else
is a miss. The digest is no signature: it catches damaged, truncated, foreign and copied files; the owner and
mode checks keep other users' files out. `clear` deletes only files laid out and headed so (and the
temporary files of unfinished writes), and refuses a directory that holds anything else.

Parsed modules are not cached on disk: unpickling a module costs as much as parsing its text (44 ms against
50 ms for a 4,000-line Triton matmul), so such a cache would only add files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from ptxforge import environment
from ptxforge.errors import Error

FORMAT = 2  # bump when an entry's layout changes
MAX_ENTRY_BYTES = 256 << 20  # a cubin of a big module is a few MB
_KIND = re.compile(r"^[a-z0-9_-]{1,32}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")
_TEMP = re.compile(r"^\.tmp-[A-Za-z0-9_]{1,32}$")
_MAGIC = b"ptxforge-cache "
_LEGACY = {"ptxas": b'{"ok": '}  # format 1: bare JSON, no header (recognised by `clear` only, never read)


class ForeignFilesInCache(Error):
    """`cache clear` found files that are not cache entries; it deleted nothing."""


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is off (EnvironmentVariableError for an unusable value)."""
    return environment.cache_dir()


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
    if d is None:
        return None
    if not _KIND.match(kind) or not _KEY.match(k):
        raise ValueError(f"cache entry {kind}/{k}: a kind is [a-z0-9_-]{{1,32}}, a key 64 hex digits")
    return d / kind / k[:2] / k


def _header(kind: str, k: str, payload: bytes) -> bytes:
    return _MAGIC + f"{FORMAT} {kind} {k} {hashlib.sha256(payload).hexdigest()}\n".encode()


def get(kind: str, k: str) -> bytes | None:
    """The entry's payload, or None: absent, cache off, not ours, damaged or foreign (see the module doc)."""
    p = _path(kind, k)
    if p is None:
        return None
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not _trusted(st):
            return None
        try:
            raw = f.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
    head, nl, payload = raw.partition(b"\n")
    if not nl or len(raw) > MAX_ENTRY_BYTES or head + nl != _header(kind, k, payload):
        return None
    return payload


def _trusted(st: os.stat_result) -> bool:
    """A regular file of this user's that no one else may write."""
    mine = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return stat.S_ISREG(st.st_mode) and mine and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def put(kind: str, k: str, payload: bytes) -> None:
    """Store an entry atomically; a cache that cannot be written is skipped silently (it is only a cache)."""
    p = _path(kind, k)
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_header(kind, k, payload) + payload)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def get_json(kind: str, k: str) -> Any:
    """The JSON value of an entry, or None (absent, cache off, not ours, damaged, or JSON too deep to read)."""
    raw = get(kind, k)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # a damaged entry is a miss
        return None


def put_json(kind: str, k: str, value: Any) -> None:
    put(kind, k, json.dumps(value).encode())


def _survey(d: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(entries and temporary files, our folders deepest first, foreign paths) under the cache folder `d`."""
    ours: list[Path] = []
    folders: list[Path] = []
    foreign: list[Path] = []
    walk_into: set[str] = set()
    for root, dirs, files in os.walk(d, followlinks=False):
        here = Path(root)
        depth = len(here.relative_to(d).parts)
        for name in dirs:
            sub = here / name
            if sub.is_symlink() or not (depth == 0 and _KIND.match(name)
                                        or depth == 1 and re.fullmatch(r"[0-9a-f]{2}", name)):
                foreign.append(sub)
            else:
                folders.append(sub)
                walk_into.add(str(sub))
        dirs[:] = [n for n in dirs if str(here / n) in walk_into]
        for name in files:
            f = here / name
            (ours if depth == 2 and _recognised(f, here.parent.name, here.name) else foreign).append(f)
    folders.sort(key=lambda x: len(x.parts), reverse=True)
    return ours, folders, foreign


def _recognised(f: Path, kind: str, prefix: str) -> bool:
    """An entry of `kind` named by its key (headed as `put` writes it, or format 1's bare JSON), or a temporary
    file of an unfinished `put`."""
    if f.is_symlink() or not f.is_file():
        return False
    if _TEMP.match(f.name):
        return True
    if not _KEY.match(f.name) or not f.name.startswith(prefix):
        return False
    try:
        with open(f, "rb") as fh:
            start = fh.read(len(_MAGIC) + 80)
    except OSError:
        return False
    head = start.split(b"\n", 1)[0].split(b" ")
    if start.startswith(_MAGIC) and len(head) >= 4 and head[2:4] == [kind.encode(), f.name.encode()]:
        return True
    legacy = _LEGACY.get(kind)
    return legacy is not None and start.startswith(legacy)


def info() -> dict[str, Any]:
    """{'dir', 'entries', 'bytes', 'foreign'} of the cache (foreign: files and folders that are not its own)."""
    d = cache_dir()
    if d is None or not d.is_dir():
        return {"dir": str(d) if d else None, "entries": 0, "bytes": 0, "foreign": 0}
    ours, _, foreign = _survey(d)
    entries = [f for f in ours if not f.name.startswith(".tmp-")]
    return {"dir": str(d), "entries": len(entries), "bytes": sum(f.stat().st_size for f in entries),
            "foreign": len(foreign)}


def clear() -> dict[str, Any]:
    """Remove every entry (and the folders they leave empty); returns what `info()` said before.
    ForeignFilesInCache, with nothing deleted, when the folder holds anything that is not the cache's."""
    before = info()
    d = cache_dir()
    if d is None or not d.is_dir():
        return before
    ours, folders, foreign = _survey(d)
    if foreign:
        shown = ", ".join(str(f) for f in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ForeignFilesInCache(f"cache folder {d} holds {len(foreign)} file(s) or folder(s) that are not "
                                  f"ptxforge cache entries ({shown}); nothing was deleted. Is PTXFORGE_CACHE_DIR "
                                  f"pointing at the right folder?")
    for f in ours:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
    for sub in folders:
        with contextlib.suppress(OSError):  # a concurrent put may have refilled it
            sub.rmdir()
    return before
