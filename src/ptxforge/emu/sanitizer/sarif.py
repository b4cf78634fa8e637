"""Sanitizer findings as SARIF 2.1.0 (`ptxforge run --sarif FILE`), the format CI systems annotate code from.

Each report is a result whose rule is its kind (race, out-of-bounds ...), located at its source line (the
.cu or Triton .py line from the PTX's .loc; the PTX line when there is none), with the PTX instruction as a
second location and, for a race, the other access as a related location.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ptxforge.emu.sanitizer.report import SanitizerReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
RULES = {"out-of-bounds": "Out-of-bounds memory access", "misaligned": "Misaligned memory access",
         "read-only": "Write to read-only memory", "uninitialized": "Use of uninitialized memory",
         "race": "Data race", "barrier-divergence": "Divergent threads at a block barrier",
         "invalid-member-mask": "Invalid member mask in a warp-synchronous instruction",
         "async-before-wait": "Use of an asynchronous copy's destination before its wait"}
_SOURCE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)")


def _uri(file: str) -> str:
    """A path under the working directory relative to it (CI annotates files relative to the checkout)."""
    p = Path(file)
    try:
        return p.relative_to(Path.cwd()).as_posix() if p.is_absolute() else p.as_posix()
    except ValueError:
        return p.as_posix()


def _location(source: str | None, ptx_file: str, ptx_line: int | None, text: str = "") -> dict[str, Any] | None:
    m = _SOURCE.match(source or "")
    if m is not None:
        file, line = m.group("file"), int(m.group("line"))
    elif ptx_line:
        file, line = ptx_file, ptx_line
    else:
        return None
    loc: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": _uri(file)}, "region": {"startLine": line}}}
    if text:
        loc["message"] = {"text": text}
    return loc


def _result(r: SanitizerReport, kernel: str) -> dict[str, Any]:
    detail = str(r).replace("========= ", "").replace("=========     ", "  ")
    out: dict[str, Any] = {"ruleId": r.kind, "level": "error", "message": {"text": f"{detail}\n  in kernel {kernel}"},
                           "occurrenceCount": r.count}
    locations = [loc for loc in (_location(r.source, r.ptx_file, r.ptx_line),
                                 _location(None, r.ptx_file, r.ptx_line, r.instruction)) if loc is not None]
    if locations:
        out["locations"] = locations[:1] if r.source is None else locations
    other = r.other
    if other.get("thread") is not None:
        related = _location(other.get("source"), other.get("ptx_file", r.ptx_file), other.get("ptx_line"),
                            f"the conflicting {other.get('access', 'access')}: {other.get('instruction', '')}")
        if related is not None:
            out["relatedLocations"] = [{"id": 0, **related}]
    return out


def sarif_json(reports: list[SanitizerReport], *, kernel: str = "") -> dict[str, Any]:
    """The SARIF log of one launch's reports."""
    kinds = sorted({r.kind for r in reports})
    rules = [{"id": k, "shortDescription": {"text": RULES.get(k, k)}} for k in kinds]
    return {"$schema": SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "ptxforge-sanitizer", "rules": rules}},
                      "results": [_result(r, kernel) for r in reports]}]}


def write_sarif(path: Any, reports: list[SanitizerReport], *, kernel: str = "") -> None:
    with open(path, "w") as f:
        json.dump(sarif_json(reports, kernel=kernel), f, indent=2)
        f.write("\n")
