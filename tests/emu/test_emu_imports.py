"""The emulator package imports as a tree, not a loop: module-level imports between its modules form no cycle,
and the few imports left inside functions each say on their line why they wait (a costly or cyclic import)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import ptxforge.emu

PACKAGE = Path(ptxforge.emu.__file__).parent
ROOT = "ptxforge.emu"
LIMIT = 30


@functools.cache  # parsed when a test first needs it, not at collection (2 s of every worker's start)
def _modules() -> dict[str, tuple[Path, ast.Module, list[str]]]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        text = path.read_text()
        mods[name] = (path, ast.parse(text), text.splitlines())
    return mods


def _function_local_imports(tree: ast.Module) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child, inside)
    visit(tree, False)
    return found


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    pkg = base[:len(base) - node.level + (1 if module in _packages() else 0)]
    return ".".join(pkg + ([node.module] if node.module else []))


def _packages() -> set[str]:
    return {name for name, (path, _, _) in _modules().items() if path.name == "__init__.py"}


@pytest.fixture(scope="module")  # module-scoped: `make test` runs this file's tests on one worker, parsing once
def mods():
    return _modules()


def _module_level_edges(name: str, tree: ast.Module) -> set[str]:
    """Modules of the package `name` imports when it is imported (its top-level statements)."""
    return _edges(name, tree.body)


def _all_edges(name: str, tree: ast.Module, lines: list[str]) -> set[str]:
    """Module-level imports and function-local ones, but for those whose comment declares a cycle."""
    local = [n for n in _function_local_imports(tree) if "cycle" not in lines[n.lineno - 1].partition("#")[2]]
    return _edges(name, [*tree.body, *local])


def _edges(name: str, nodes: list[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            if t in _modules() and t != name and not name.startswith(t + "."):  # a parent package is initialising
                out.add(t)
    return out


def test_function_local_imports_are_few_and_each_says_why(mods):
    where = []
    for _, (path, tree, lines) in mods.items():
        for node in _function_local_imports(tree):
            line = lines[node.lineno - 1]
            where.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {line.strip()}")
            assert "#" in line, f"{where[-1]}: a function-local import needs a comment saying why it waits"
    assert len(where) < LIMIT, "\n".join(where)


def test_imports_form_no_cycle(mods):
    """Counting function-local imports too: a loop held together by imports inside functions is still a loop."""
    graph = {name: _all_edges(name, tree, lines) for name, (_, tree, lines) in mods.items()}
    _assert_acyclic(graph)


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                walk(m)
        stack.pop()
        state[n] = 2
    for n in sorted(graph):
        if n not in state:
            walk(n)


def test_builders_and_the_machine_take_the_op_kinds_from_emu_op(mods):
    """No ops module, nor the machine, imports the compiler that collects the builders."""
    for name, (_, tree, lines) in mods.items():
        if name.rsplit(".", 1)[-1].startswith("ops_") or name == f"{ROOT}.machine":
            assert f"{ROOT}.compiler" not in _all_edges(name, tree, lines), name
