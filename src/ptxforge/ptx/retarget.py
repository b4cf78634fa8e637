"""Move a module to another GPU target or PTX ISA version, refusing what the new target lacks."""

from __future__ import annotations

import dataclasses

from ptxforge.ptx import ir
from ptxforge.ptx.errors import Diagnostic, PTXValidationError
from ptxforge.ptx.isa import parse_target, requirements
from ptxforge.ptx.isa.targets import target_min_ptx, version_problem
from ptxforge.ptx.lexer import SourceText
from ptxforge.ptx.validator import DIRECTIVE_MIN_SM


def retarget(module: ir.Module, arch: str, ptx_version: tuple[int, int] | None = None) -> ir.Module:
    """The module with `.target arch` (and `.version ptx_version` if given).

    Raises PTXValidationError naming every instruction the new target or version lacks, and ValueError
    for a target or a PTX ISA version ptxas does not know. The rest of the text keeps its layout.
    """
    need = target_min_ptx(arch)  # ValueError for a target that is not one
    version: tuple[int, int] = (int(ptx_version[0]), int(ptx_version[1])) if ptx_version else module.version
    problem = version_problem(version)
    if problem is not None:
        raise ValueError(problem)
    problems: list[Diagnostic] = []
    src = SourceText(module.source) if module.source is not None else None

    def report(span, message):
        line_text = src.line_text(span.line) if src is not None and span.line else ""
        problems.append(Diagnostic(span.file, span.line, span.col, message, source_line=line_text))

    if version < need:
        report(module.target.span, f".target {arch} needs PTX ISA {need[0]}.{need[1]}; "
                                   f"the module would be .version {version[0]}.{version[1]}"
                                   f" (pass a newer --ptx-version)")
    sm = parse_target(arch)[0]
    for f in module.functions:
        for name, _ in f.directives:
            if sm < DIRECTIVE_MIN_SM.get(name, 0):
                report(f.span, f"{name} needs sm_{DIRECTIVE_MIN_SM[name]}; cannot retarget {f.name} to {arch}")
        for ins in f.instructions():
            for r in requirements(ins):
                if not r.target_ok(arch):
                    report(ins.span, f"{r.what} needs {r.target_text()}; cannot retarget to {arch}")
                elif not r.version_ok(version, arch):
                    v = r.ptx_needed(arch)
                    report(ins.span, f"{r.what} needs PTX ISA {v[0]}.{v[1]}; cannot use "
                                     f".version {version[0]}.{version[1]}")
    if problems:
        raise PTXValidationError(problems)
    others = tuple(t for t in module.target.targets if not t.startswith(("sm_", "compute_")))
    target = ir.Target((arch, *others), module.target.span)
    return dataclasses.replace(module, version=version, target=target)
