"""Per-function resource usage (registers, spills, stack, shared and constant memory) from `ptxas -v`.

No GPU is needed: ptxas assembles the PTX for the given architecture and reports what each function uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ptxforge.ptx.errors import Diagnostic, PTXError
from ptxforge.toolchain import assemble


class PtxasError(PTXError):
    """ptxas rejected the PTX; `.diagnostics` holds its messages at the PTX lines it named."""


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one function. `registers` and `barriers` are None where ptxas printed
    no `Used ...` line (device functions, whose registers count toward the kernels that call them)."""

    name: str
    entry: bool
    registers: int | None = None
    barriers: int | None = None
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared: int = 0  # static shared memory, bytes
    local: int = 0  # local memory (lmem), bytes, where printed
    cumulative_stack: int = 0
    cmem: dict[int, int] = field(default_factory=dict)  # constant bank -> bytes

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


_COMPILING = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"^Used (\d+) registers\b(?P<rest>.*)$")
_BYTES = re.compile(r"^(\d+) bytes (\w+(?: \w+)*?)(?:\[(\d+)\])?$")


def parse_ptxas_verbose(text: str) -> dict[str, KernelResources]:
    """Function name -> KernelResources from the text `ptxas -v` printed (stderr), in report order."""
    found: dict[str, dict] = {}
    entry = None  # the kernel that the next `Used ...` line belongs to
    pending = None  # the function whose `Function properties` line came last
    for raw in text.splitlines():
        line = raw.strip()
        msg = line.split(":", 1)[1].strip() if line.startswith("ptxas") and ":" in line else line
        if m := _COMPILING.search(msg):
            entry = m.group("name")
            found.setdefault(entry, {"name": entry})["entry"] = True
        elif m := _PROPERTIES.search(msg):
            pending = m.group("name")
            found.setdefault(pending, {"name": pending})
        elif (m := _FRAME.search(msg)) and pending is not None:
            rec = found[pending]
            rec["stack_frame"], rec["spill_stores"], rec["spill_loads"] = map(int, m.groups())
            pending = None
        elif (m := _USED.match(msg)) and entry is not None:
            rec = found.setdefault(entry, {"name": entry, "entry": True})
            rec["registers"] = int(m.group(1))
            rec.update(_used_items(m.group("rest")))
    return {name: KernelResources(**{"entry": False, **rec}) for name, rec in found.items()}


def _used_items(rest: str) -> dict:
    """The comma-separated items after `Used N registers`: barriers, smem, lmem, cmem[K], stack size."""
    out: dict = {"cmem": {}}
    for item in (p.strip() for p in rest.split(",")):
        if not item:
            continue
        if m := re.fullmatch(r"used (\d+) barriers?", item):
            out["barriers"] = int(m.group(1))
            continue
        m = _BYTES.match(item)
        if not m:
            continue  # textures, samplers, surfaces: not resources this report covers
        n, what, bank = int(m.group(1)), m.group(2), m.group(3)
        if what == "cmem" and bank is not None:
            out["cmem"][int(bank)] = n
        elif what == "smem":
            out["shared"] = n
        elif what == "lmem":
            out["local"] = n
        elif what == "cumulative stack size":
            out["cumulative_stack"] = n
    return out


def _ptx_text(ptx) -> tuple[str, str]:
    """(text, filename) of PTX text or a parsed Module."""
    if isinstance(ptx, str):
        return ptx, "<ptx>"
    return ptx.to_ptx(), getattr(ptx, "filename", "<ptx>")


def target_arch(text: str) -> str:
    """The sm_XX named by the `.target` directive of PTX text."""
    m = re.search(r"^\s*\.target\s+(sm_\w+)", text, re.M)
    if not m:
        raise ValueError("the PTX names no .target sm_XX; pass arch= (e.g. 'sm_90a')")
    return m.group(1)


def ptxas_failure(result: Any, text: str, filename: str) -> PtxasError:
    """A PtxasError from a failed AssembleResult, each message at its PTX line with the source shown."""
    lines = text.splitlines()
    diags = [Diagnostic(filename, msg.line, 1 if msg.line else 0, f"ptxas: {msg.message}", msg.severity,
                        lines[msg.line - 1] if 0 < msg.line <= len(lines) else "")
             for msg in result.messages if msg.severity == "error"]
    if not diags:
        diags = [Diagnostic(filename, 0, 0, f"ptxas failed: {result.stderr.strip() or 'no message'}")]
    return PtxasError(diags)


def resource_usage(ptx: Any, arch: str | None = None, *, filename: str | None = None,
                   extra_flags: tuple[str, ...] = ()) -> dict[str, KernelResources]:
    """Run `ptxas -v --warn-on-spills` on PTX text (or a Module) for `arch` (default: its .target).

    Returns function name -> KernelResources for every kernel and device function ptxas reported.
    Raises PtxasError (a PTXError with diagnostics at PTX lines) when ptxas rejects the code.
    """
    text, name = _ptx_text(ptx)
    arch = arch or target_arch(text)
    result = assemble(text, arch, ["-v", "--warn-on-spills", *extra_flags])
    if not result.ok:
        raise ptxas_failure(result, text, filename or name)
    return parse_ptxas_verbose(result.stderr)
