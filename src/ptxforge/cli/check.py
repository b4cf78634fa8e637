"""`ptxforge check`: validate PTX files, optionally assembling them with ptxas too."""

from __future__ import annotations

import argparse
import sys

from ptxforge.cli.common import load_module, parse_version
from ptxforge.cli.errors import UserError
from ptxforge.ptx.errors import Diagnostic
from ptxforge.ptx.ir import Module
from ptxforge.ptx.isa.targets import known_target, version_problem
from ptxforge.ptx.lexer import SourceText
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import ToolNotFound, assemble


def run(args: argparse.Namespace) -> int:
    version = parse_version(args.ptx_version) if args.ptx_version else None
    if version is not None and version_problem(version):
        raise UserError(f"--ptx-version: {version_problem(version)}")
    if args.arch:
        try:
            known_target(args.arch)
        except ValueError as e:
            raise UserError(f"--arch: {e}") from None
    failed = 0
    for path in args.files:
        m = load_module(path, args.arch)
        if m is None:
            failed += 1
            continue
        problems = validate(m, target=args.arch, version=version)
        if args.ptxas and not problems:
            problems = ptxas_problems(m, args.arch or m.target.arch, args.ptxas_path)
        for d in problems:
            print(d.format(), file=sys.stderr)
        errors = sum(d.severity == "error" for d in problems)
        if errors:
            failed += 1
            print(f"{path}: {errors} error{'s' * (errors != 1)}", file=sys.stderr)
        elif not args.quiet:
            n = sum(1 for f in m.functions for _ in f.instructions())
            print(f"{path}: ok ({len(m.kernels)} kernels, {n} instructions, .target "
                  f"{args.arch or m.target.arch}, .version {m.version[0]}.{m.version[1]})")
    return 1 if failed else 0


def ptxas_problems(m: Module, arch: str, ptxas_path: str | None) -> list[Diagnostic]:
    """Assemble with ptxas and turn what it says into diagnostics on the original file's lines."""
    try:
        res = assemble(m.to_ptx(), arch, ptxas=ptxas_path)
    except ToolNotFound as e:
        raise UserError(str(e)) from None
    src = SourceText(m.source or m.to_ptx())
    out = []
    for msg in res.messages:
        if msg.severity == "info":
            continue
        text = src.line_text(msg.line) if msg.line else ""
        col = len(text) - len(text.lstrip()) + 1 if text else 0
        out.append(Diagnostic(m.filename, msg.line, col, f"ptxas: {msg.message}", msg.severity, text))
    if not res.ok and not any(d.severity == "error" for d in out):
        out.append(Diagnostic(m.filename, 0, 0, f"ptxas failed: {res.stderr.strip()[:500]}"))
    return out
