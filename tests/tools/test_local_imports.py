"""Imports inside functions are few, and each says on its line (or the line above) why it waits: an optional
dependency (torch, matplotlib, cuda-bindings: see ptxforge._optional), a heavy layer loaded on demand, or an
upward or cyclic import that the layering keeps on purpose. Everything else is imported at module top."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import ptxforge

PACKAGE = Path(ptxforge.__file__).parent
LIMIT = 30
EXCLUDED: tuple[str, ...] = ()  # top-level parts of the package left out (none)


def _function_local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))
    visit(tree, False)
    return found


# Where an import inside a function can start: indented, after a ':' or ';' on its line (`def f(): import x`),
# or on a line continued by a backslash. A file with none of these has no function-local import, and is not
# parsed (two files in five have one).
_MAYBE_LOCAL = re.compile(r"^[ \t]+(?:import|from)[ \t]|[:;][ \t]*(?:import|from)[ \t]|\\\n", re.M)


@functools.cache  # four tests read it: parse the package once per worker
def _local_imports() -> tuple[tuple[str, bool], ...]:
    """(where and what, whether it carries a comment) for each function-local import in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        text = path.read_text()
        if rel.parts[0] in EXCLUDED or not _MAYBE_LOCAL.search(text):
            continue
        lines = text.splitlines()
        for node in _function_local_imports(ast.parse("\n".join(lines))):
            span = lines[node.lineno - 1:node.end_lineno]
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            commented = any("#" in line for line in span) or above.startswith("#")
            out.append((f"{rel}:{node.lineno}: {span[0].strip()}", commented))
    return tuple(out)


def test_each_function_local_import_says_why():
    bare = [where for where, commented in _local_imports() if not commented]
    assert not bare, ("import these at module top, or say in a comment why they wait "
                      "(an optional dependency, a heavy layer, a cycle):\n" + "\n".join(bare))


def test_function_local_imports_are_few():
    found = [where for where, _ in _local_imports()]
    assert len(found) < LIMIT, f"{len(found)} function-local imports (limit {LIMIT}):\n" + "\n".join(found)


def test_torch_and_matplotlib_are_imported_in_functions_only_by_ptxforge_optional():
    """One place loads the optional dependencies (with an install hint); a module that needs one at import
    time (ptxforge.ep, the torch parts of ptxforge.pipeline) imports it at its top like any dependency."""
    stray = [where for where, _ in _local_imports()
             if where.split(": ", 1)[1].split()[1].split(".")[0] in ("torch", "matplotlib")
             and not where.startswith("_optional.py")]
    assert not stray, "use ptxforge._optional.torch() / .matplotlib() / .pyplot():\n" + "\n".join(stray)


def test_the_emulator_has_no_function_local_imports():
    """The emulator's modules import each other at their top only, so tests/emu/test_emu_imports.py's cycle
    check sees every edge (it leaves out local imports whose comment declares a cycle; none are left)."""
    inside = [where for where, _ in _local_imports() if where.startswith("emu/")]
    assert inside == [], "\n".join(inside)
