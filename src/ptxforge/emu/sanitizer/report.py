"""Sanitizer findings: one `SanitizerReport` per distinct error site, collected by `ReportLog`.

Reports are deduplicated by site (kind, access and instruction; races also by the other instruction)
and capped: past `max_reports` distinct sites only a count is kept. `SanitizerError` carries them all
and prints like NVIDIA's compute-sanitizer, plus the PTX instruction text.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from ptxforge.emu.errors import EmulatorError
from ptxforge.ptx.demangle import demangle_words

PREFIX = "========="

# kind -> headline template; {access} is read/write/atomic, {space} the state space
HEADLINES = {
    "out-of-bounds": "Invalid __{space}__ {access} of size {size} bytes",
    "misaligned": "Misaligned __{space}__ {access} of size {size} bytes",
    "read-only": "Invalid __{space}__ {access} of size {size} bytes to read-only memory",
    "uninitialized": "Uninitialized __{space}__ memory read of size {size} bytes",
    "race": "Race ({race}) on __{space}__ memory, {size} bytes",
    "barrier-divergence": "Barrier error: divergent threads at a block barrier",
    "invalid-member-mask": "Invalid member mask in a warp-synchronous instruction",
    "async-before-wait": "Use of cp.async destination before its wait of size {size} bytes",
    "unfenced-signal": "Race (put-read) on __global__ memory, {size} bytes: data put not fenced before its signal",
    "send-before-quiet": "Send buffer reused before nvshmem_quiet: __global__ write of size {size} bytes",
}


@dataclass
class SanitizerReport:
    """One error site: what went wrong, where, by which thread and block."""

    kind: str
    message: str
    thread: tuple | None = None
    block: tuple | None = None
    ptx_line: int | None = None
    ptx_file: str = ""
    instruction: str = ""
    source: str | None = None  # "file.cu:LINE" from the nearest preceding .loc
    address: int | None = None
    size: int | None = None
    space: str = ""
    access: str = ""  # read | write | atomic
    allocation: str | None = None  # the nearest allocation (or shared variable)
    offset: int | None = None  # address - allocation start (may be past its size or negative)
    allocation_size: int | None = None
    other: dict = field(default_factory=dict)  # races: the earlier access (thread, block, line, access)
    count: int = 1  # how many times this site fired (lanes x executions)
    gpu: int | None = None  # the GPU of a `ptxforge.emu.Node` the thread ran on
    stack: list = field(default_factory=list)  # source frames, innermost first ("file:line in name"), for
    # code inlined by the compiler (the .loc inlined_at chain); races keep the other side's in other["stack"]

    @property
    def site(self) -> tuple:
        return (self.kind, self.access, self.space, self.ptx_file, self.ptx_line, self.instruction,
                self.other.get("ptx_line"), self.other.get("access"))

    def headline(self) -> str:
        tmpl = HEADLINES.get(self.kind, self.kind)
        if self.kind == "uninitialized" and self.other.get("use"):
            return f"Uninitialized value used: loaded from __{self.space}__ memory"
        if self.kind == "race" and self.other.get("scope"):
            tmpl += " (synchronization scope too narrow)"
        return tmpl.format(access=self.access or "access", space=self.space or "generic",
                           size=self.size, race=self.other.get("race", ""))

    def __str__(self) -> str:
        lines = [f"{PREFIX} {self.headline()}"]
        where = f"{self.ptx_file}:{self.ptx_line}" if self.ptx_line else (self.ptx_file or "<ptx>")
        lines.append(f"{PREFIX}     at {where}: {self.instruction}")
        if len(self.stack) > 1:
            lines += _call_stack("source", self.stack)
        elif self.source:
            lines.append(f"{PREFIX}     source {self.source}")
        if self.thread is not None:
            on = "" if self.gpu is None else f" on GPU {self.gpu}"
            lines.append(f"{PREFIX}     by thread ({_xyz(self.thread)}) in block ({_xyz(self.block)}){on}")
        if self.address is not None:
            lines.append(f"{PREFIX}     Address {self.address:#x} {self._placement()}")
        if self.message:
            lines.append(f"{PREFIX}     {self.message}")
        if self.other.get("thread") is not None:
            o = self.other
            on = "" if o.get("gpu") is None else f" on GPU {o['gpu']}"
            lines.append(f"{PREFIX}     conflicts with a {o.get('access', 'access')} by thread "
                         f"({_xyz(o['thread'])}) in block ({_xyz(o['block'])}){on} at "
                         f"{o.get('ptx_file', self.ptx_file)}:{o.get('ptx_line')}: {o.get('instruction', '')}"
                         + (f" (source {o['source']})" if o.get("gpu") is not None and o.get("source") else ""))
            if o.get("gpu") is None and len(o.get("stack") or ()) > 1:
                lines += _call_stack("  its source", o["stack"])
            elif o.get("gpu") is None and o.get("source"):
                lines.append(f"{PREFIX}       its source {o['source']}")
        if self.count > 1:
            lines.append(f"{PREFIX}     (this site: {self.count} times, folded into this report)")
        return "\n".join(lines)

    def _placement(self) -> str:
        return demangle_words(self._allocation_text())

    def _allocation_text(self) -> str:
        a = self.address
        if a is not None and self.space in ("global", "generic", "const") and (a < 4096 or a >= 1 << 63):
            return ("is a null pointer" + (f" plus {a} bytes" if a else "") if a < 4096 else
                    f"is a negative address ({a - (1 << 64)} as a signed number)") + ", in no allocation"
        if self.allocation is None:
            return "is not inside any allocation"
        size = self.allocation_size
        if self.offset is not None and size is not None:
            if self.offset >= size:
                return (f"is {self.offset - size} bytes after the end of {self.allocation} "
                        f"({size} bytes)")
            if self.offset < 0:
                return f"is {-self.offset} bytes before the start of {self.allocation} ({size} bytes)"
            return f"is at offset {self.offset} of {self.allocation} ({size} bytes)"
        return f"is in {self.allocation}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["headline"] = self.headline()
        for k in ("thread", "block"):
            if d[k] is not None:
                d[k] = list(d[k])
        if d["other"]:
            d["other"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d["other"].items()}
        return d


def _call_stack(head: str, frames: list) -> list[str]:
    """A call stack, innermost frame first, each caller indented under it (compute-sanitizer's order)."""
    pad = " " * (len(head) - len(head.lstrip()))
    out = [f"{PREFIX}     {head} {frames[0]}"]
    out += [f"{PREFIX}     {pad}    inlined at {f}" for f in frames[1:]]
    return out


def _xyz(t) -> str:
    return ",".join(str(int(x)) for x in t) if t is not None else "?"


class ReportLog:
    """Distinct reports in order of first occurrence, deduplicated by site and capped."""

    def __init__(self, max_reports: int = 100):
        self.max_reports = max_reports
        self.reports: list[SanitizerReport] = []
        self._by_site: dict = {}
        self.suppressed = 0  # occurrences at sites beyond the cap

    def add(self, report: SanitizerReport, site: tuple | None = None) -> None:
        site = report.site if site is None else site
        hit = self._by_site.get(site)
        if hit is not None:
            hit.count += report.count
            return
        if len(self.reports) >= self.max_reports:
            self.suppressed += report.count
            return
        self._by_site[site] = report
        self.reports.append(report)

    def bump(self, site: tuple, n: int) -> bool:
        """Count `n` more occurrences at a known site; False if the site is new."""
        hit = self._by_site.get(site)
        if hit is None:
            return False
        hit.count += n
        return True

    def __len__(self) -> int:
        return len(self.reports)


class SanitizerError(EmulatorError):
    """Raised at the end of a sanitized launch that found errors; `.reports` lists them."""

    def __init__(self, reports: list[SanitizerReport], *, kernel: str = "", suppressed: int = 0, stopped: str = ""):
        self.reports = list(reports)
        self.kernel = kernel
        self.suppressed = suppressed
        self.stopped = stopped  # why the launch ended early, if it did (the reports came before)
        self.launch_site = launch_site()  # "file.py:LINE (in function)" of the user's code that launched
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [str(r) for r in self.reports]
        n = len(self.reports)
        tail = f"{PREFIX} ERROR SUMMARY: {n} error site{'s' if n != 1 else ''}"
        total = sum(r.count for r in self.reports) + self.suppressed
        tail += f" ({total} occurrence{'s' if total != 1 else ''}"
        if self.suppressed:
            tail += f", {self.suppressed} at sites past the report cap"
        tail += f") in kernel {self.kernel}" if self.kernel else ")"
        if self.stopped:
            tail += f"\n{PREFIX} the launch then stopped: {self.stopped}"
        site = [f"{PREFIX} kernel launched from {self.launch_site}"] if self.launch_site else []
        return "\n".join(parts + site + [tail])

    def __str__(self) -> str:
        return self._text()

    def to_json(self) -> dict:
        out = report_json(self.reports, kernel=self.kernel, suppressed=self.suppressed)
        if self.stopped:
            out["stopped"] = self.stopped
        if self.launch_site:
            out["launch_site"] = self.launch_site
        return out


# frames of these packages are the machinery between the user's launch and the report, not the launch site
_MACHINERY = ("ptxforge", "triton", "torch", "_pytest", "pluggy", "importlib", "runpy")


def launch_site() -> str | None:
    """`file.py:LINE (in function)` of the innermost frame outside ptxforge (and Triton, torch, pytest) on the
    current stack: where the user's code launched the kernel. None from ptxforge's own CLI."""
    frame = sys._getframe(1)
    while frame is not None:
        top = (frame.f_globals.get("__name__", "") or "").split(".")[0]
        ours = frame.f_code.co_filename.endswith(("ptxforge/__main__.py", "bin/ptxforge"))
        if top not in _MACHINERY and not (top == "__main__" and ours):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} (in {frame.f_code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def report_json(reports: list[SanitizerReport], *, kernel: str = "", suppressed: int = 0) -> dict:
    """The machine-readable form written by `ptxforge run --sanitize --report FILE`."""
    return {"tool": "ptxforge-sanitizer", "version": 1, "kernel": kernel,
            "error_sites": len(reports), "suppressed": suppressed,
            "occurrences": sum(r.count for r in reports) + suppressed,
            "reports": [r.to_dict() for r in reports]}


def write_json(path: Any, reports: list[SanitizerReport], *, kernel: str = "", suppressed: int = 0) -> None:
    with open(path, "w") as f:
        json.dump(report_json(reports, kernel=kernel, suppressed=suppressed), f, indent=2)
        f.write("\n")
