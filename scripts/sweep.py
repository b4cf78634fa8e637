#!/usr/bin/env python3
"""Sweep a folder of PTX files through ptxforge: parse, print back, check, and (with ptxas) assemble.

    PYTHONPATH=src python scripts/sweep.py DIR [--ptxas] [--cubin] [--json OUT] [-v]

Every *.ptx under DIR (recursively) goes through the stages below; a stage that fails is reported with its
first error line, and the stages after it still run where they can.

  parse       ptxforge.parse accepts the file
  round trip  the print is byte-for-byte the input, and the canonical print parses back to the same module
  check       the validator reports no error
  ptxas       (--ptxas or --cubin) ptxas assembles the file; the file's check verdict must agree with it
  same cubin  (--cubin) the canonical print assembles to the same cubin (for files with debug info, every
              ELF section but the embedded PTX copy)

Prints one line per file that fails a stage (every file with -v) and a table of pass counts per stage;
exit status 1 when any file fails a stage. PTX newer than ptxas accepts (.version 9.1+) is assembled with the
version line lowered to 9.0, as the corpus tests do.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

STAGES = ("parse", "round trip", "check", "ptxas", "check agrees with ptxas", "same cubin")
PTXAS_MAX_VERSION = "9.0"


@dataclass
class FileResult:
    path: str
    kernels: int = 0
    stages: dict[str, str | None] = field(default_factory=dict)  # stage -> None (pass) or the first error

    @property
    def ok(self) -> bool:
        return all(v is None for v in self.stages.values())


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or ["?"])[0][:200]


def _for_ptxas(text: str) -> str:
    return re.sub(r"^\.version\s+9\.[1-9]\d*", f".version {PTXAS_MAX_VERSION}", text, count=1, flags=re.M)


def sweep_file(path: Path, root: Path | None = None, ptxas: bool = False, cubin: bool = False) -> FileResult:
    """Run the stages on one file; `root` makes the reported path relative."""
    import ptxforge as pf
    from ptxforge.ptx.validator import validate

    name = path.relative_to(root).as_posix() if root else str(path)
    res = FileResult(name)
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    try:
        m = pf.parse(text, filename=name)
    except Exception as e:  # a PTXSyntaxError for bad input; anything else is a ptxforge bug, reported too
        res.stages["parse"] = f"{type(e).__name__}: {_first_line(str(e))}"
        return res
    res.stages["parse"] = None
    res.kernels = len(m.kernels)
    try:
        canon = m.to_ptx(canonical=True)
        if m.to_ptx() != text:
            res.stages["round trip"] = "the print differs from the input"
        elif pf.parse(canon, filename=name) != m:
            res.stages["round trip"] = "the canonical print parses to a different module"
        else:
            res.stages["round trip"] = None
    except Exception as e:
        res.stages["round trip"] = f"{type(e).__name__}: {_first_line(str(e))}"
        canon = None
    try:
        errors = [d for d in validate(m) if d.severity == "error"]
        res.stages["check"] = errors[0].format().splitlines()[0] if errors else None
    except Exception as e:
        errors = [e]
        res.stages["check"] = f"{type(e).__name__}: {_first_line(str(e))}"
    if not (ptxas or cubin):
        return res
    from ptxforge.toolchain import assemble

    arch = m.target.arch
    original = assemble(_for_ptxas(text), arch)
    res.stages["ptxas"] = None if original.ok else f"ptxas rejects it: {_first_line(original.stderr)}"
    if bool(errors) == (not original.ok):
        res.stages["check agrees with ptxas"] = None
    else:
        res.stages["check agrees with ptxas"] = ("check reports errors that ptxas accepts" if errors
                                                 else "check passes a file that ptxas rejects")
    if cubin and original.ok and canon is not None:
        res.stages["same cubin"] = _same_cubin(m, original.cubin, canon, arch)
    return res


def _same_cubin(m, cubin: bytes, canon: str, arch: str) -> str | None:
    from ptxforge.ptx.printer import has_debug_info
    from ptxforge.toolchain import assemble, elf_sections

    again = assemble(_for_ptxas(canon), arch)
    if not again.ok:
        return f"the canonical print does not assemble: {_first_line(again.stderr)}"
    if again.cubin == cubin:
        return None
    sa, sb = elf_sections(cubin), elf_sections(again.cubin)
    differ = sorted(n for n in set(sa) | set(sb) if sa.get(n) != sb.get(n))
    if has_debug_info(m) and differ == [".nv_debug_ptx_txt"]:
        return None
    return f"cubins differ in {differ}"


def sweep(root: Path, ptxas: bool = False, cubin: bool = False) -> list[FileResult]:
    """sweep_file for every *.ptx under root, in path order."""
    return [sweep_file(p, root, ptxas, cubin) for p in sorted(root.rglob("*.ptx"))]


def summary(results: list[FileResult]) -> list[tuple[str, int, int]]:
    """(stage, passed, files that ran it) for each stage that ran on some file."""
    rows = []
    for stage in STAGES:
        ran = [r for r in results if stage in r.stages]
        if ran:
            rows.append((stage, sum(r.stages[stage] is None for r in ran), len(ran)))
    return rows


def format_table(results: list[FileResult]) -> str:
    lines = [f"{len(results)} files, {sum(r.kernels for r in results)} kernels", "",
             "| stage | pass | of | rate |", "| --- | ---: | ---: | ---: |"]
    for stage, ok, n in summary(results):
        lines.append(f"| {stage} | {ok} | {n} | {100 * ok / n:.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="folder searched recursively for *.ptx")
    ap.add_argument("--ptxas", action="store_true", help="also assemble each file and compare with check")
    ap.add_argument("--cubin", action="store_true", help="also compare the canonical print's cubin (implies --ptxas)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the per-file results as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line for every file, not only failures")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a folder", file=sys.stderr)
        return 2
    results = sweep(args.dir, args.ptxas, args.cubin)
    if not results:
        print(f"error: no .ptx files under {args.dir}", file=sys.stderr)
        return 2
    for r in results:
        if args.verbose or not r.ok:
            bad = {s: e for s, e in r.stages.items() if e is not None}
            print(f"{r.path}: {r.kernels} kernels: " + ("ok" if not bad else
                                                       "; ".join(f"{s} FAIL: {e}" for s, e in bad.items())))
    print(format_table(results))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ | {"ok": r.ok} for r in results], indent=1) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
