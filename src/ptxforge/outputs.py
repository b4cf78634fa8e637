"""Writing an output file without ever destroying an input or a special file (docs/cli-safety.md).

Every file ptxforge writes on a user's behalf (the CLI's -o, --report, --png, --svg, --sm-map, saved arrays)
goes through `check_output` (before any work) and `output_path` (to write):
- a target that is one of the command's inputs (the same file: same device and inode, links included) or
  another of its outputs is refused;
- a character device (/dev/null, a terminal) or a FIFO is written directly, in place;
- a regular file (or a new name) is written to a temporary file in the same folder and renamed over the target
  once complete (a symbolic link's target is the file replaced, the link stays; a link owned by another user,
  as one planted in /tmp would be, is refused); an interrupted write
  leaves the old file and no partial one;
- a directory, block device or socket is refused, as is a folder that is missing or not writable.
This module imports nothing of ptxforge but `ptxforge.errors`, so every layer's writers may use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from ptxforge.errors import Error

STDOUT = "-"


class OutputRefused(Error, ValueError):
    """An output that cannot or must not be written there; the message names the option, the file and why."""


def _inputs_clash(target: Path, inputs: Mapping[str, str]) -> str | None:
    """The role of the input or other output `target` is the same file as, or None."""
    real = os.path.realpath(target)
    for path, role in inputs.items():
        if path in ("", STDOUT):
            continue
        try:
            same = os.path.samefile(target, path)
        except OSError:  # one of them does not exist (yet): compare the names they resolve to
            same = real == os.path.realpath(path)
        if same:
            return f"{role} {path}"
    return None


def check_output(path: str | os.PathLike[str], what: str = "output",
                 inputs: Mapping[str, str] | None = None) -> Path:
    """Fail now, before any work, if `path` must not or cannot be written (see the module doc).

    `inputs` maps the command's inputs (and its other outputs) to what they are ("the PTX file", "--routing"):
    a target that is one of them is refused. Returns the path the output will be written to."""
    p = Path(path)
    if p.is_symlink() and hasattr(os, "geteuid") and p.lstat().st_uid not in (os.geteuid(), 0):
        raise OutputRefused(f"{what} {path}: is a symbolic link owned by another user; not followed")
    try:
        st: os.stat_result | None = p.stat()  # follows links: the file that would be written
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputRefused(f"{what} {path}: cannot use it: {e.strerror or e}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputRefused(f"{what} {path}: is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode) and not _direct(st):
        kind = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else \
            "a special file"
        raise OutputRefused(f"{what} {path}: is {kind}; outputs go to regular files, character devices "
                            f"(such as /dev/null), FIFOs or - for standard output")
    if st is None or stat.S_ISREG(st.st_mode):
        clash = _inputs_clash(p, inputs or {})
        if clash is not None:
            raise OutputRefused(f"{what} {path}: is the same file as {clash}: writing it would destroy it; "
                                f"choose another name")
    if st is not None and _direct(st):
        if not os.access(p, os.W_OK):
            raise OutputRefused(f"{what} {path}: is not writable")
        return p
    target = Path(os.path.realpath(p))
    folder = target.parent
    if not folder.is_dir():
        raise OutputRefused(f"{what} {path}: the folder {p.parent} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputRefused(f"{what} {path}: the folder {p.parent} is not writable")
    return p


def _direct(st: os.stat_result) -> bool:
    """Written in place, never replaced: a character device or a FIFO."""
    return stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)


@contextlib.contextmanager
def output_path(path: str | os.PathLike[str], what: str = "output",
                inputs: Mapping[str, str] | None = None) -> Iterator[Path]:
    """The path to write the output of `path` to: `path` itself for a character device or FIFO, else a
    temporary file beside the real target (same suffix) that replaces it once the `with` block completes.

    The checks of `check_output` run again first (the file system may have changed since). An OSError while
    writing becomes OutputRefused naming the output; a failed or interrupted write leaves any existing file
    untouched and no partial file."""
    p = check_output(path, what, inputs)
    if p.exists() and _direct(p.stat()):
        try:
            yield p
        except OSError as e:
            raise OutputRefused(f"cannot write {what} {path}: {e.strerror or e}") from None
        return
    target = Path(os.path.realpath(p))  # through a symbolic link: replace the file, keep the link
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=target.parent)
    except OSError as e:
        raise OutputRefused(f"cannot write {what} {path}: {e.strerror or e}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        raise OutputRefused(f"cannot write {what} {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text(text: str, path: str | os.PathLike[str], what: str = "output",
               inputs: Mapping[str, str] | None = None) -> None:
    """Write `text` (UTF-8, undecodable bytes kept as they came) to `path` as `output_path` does."""
    with output_path(path, what, inputs) as out:
        out.write_text(text, encoding="utf-8", errors="surrogateescape")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
