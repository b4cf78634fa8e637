"""The package's import graph, read with ast from src/ptxforge (imports at module top, inside functions, under
TYPE_CHECKING, and `importlib.import_module("ptxforge...")` with a literal name): no import cycle among the
modules that run, and no import upward across the layers of DESIGN.md (ptx at the bottom, cli at the top)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import ptxforge

PACKAGE = Path(ptxforge.__file__).parent

# Bottom to top. The foundation imports nothing else of ptxforge; "" is the package itself (ptxforge/__init__:
# the user's front, which binds the runtime to the IR); a package may import one in its own row or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_optional", "environment", "processes", "outputs", "cache", "module_cache", "toolchain"),
    ("ptx",),
    ("emu",),
    ("runtime",),
    ("dsl",),
    ("triton", "front"),
    ("kernels",),
    ("models", "ep", "plan", "pipeline"),
    ("",),
    ("cli", "__main__", "pytest_plugin"),
)
RANK = {part: i for i, row in enumerate(LAYERS) for part in row}


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` names, or the package holding the attribute it names."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported module, line, whether it runs) for each ptxforge import of one module."""
    tree = ast.parse(path.read_text())
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[str, int, bool]] = []

    def add(name: str, line: int, runs: bool) -> None:
        if name == "ptxforge" or name.startswith("ptxforge."):
            target = _resolve(name, modules)
            if target is not None:
                found.append((target, line, runs))

    def visit(node: ast.AST, runs: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_runs = runs
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                child_runs = False
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child.lineno, runs)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package[:len(package) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    add(full if full in modules else base, child.lineno, runs)
            elif isinstance(child, ast.Call) and child.args and isinstance(child.args[0], ast.Constant) \
                    and isinstance(child.args[0].value, str) and ast.unparse(child.func).endswith("import_module"):
                add(child.args[0].value, child.lineno, runs)
            visit(child, child_runs)
    visit(tree, True)
    return found


def import_graph(root: Path = PACKAGE) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """(module -> the modules importing it runs, counting the packages a submodule import initialises; every
    import edge as (importer, imported, line), TYPE_CHECKING ones included)."""
    modules = _modules(root)
    runs: dict[str, set[str]] = {m: set() for m in modules}
    edges = []
    for module, path in modules.items():
        for target, line, executes in _imports(module, path, modules):
            edges.append((module, target, line))
            if not executes:
                continue
            parent = target
            while parent and parent != root.name:  # importing a.b.c initialises a.b first
                if parent != module and not module.startswith(parent + "."):
                    runs[module].add(parent)
                parent = parent.rpartition(".")[0]
    return runs, edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward(edges: list[tuple[str, str, int]]) -> list[str]:
    """Each import of a module from a higher layer (or from a part no layer names), as `file:line`."""
    bad = []
    for importer, imported, line in edges:
        low, high = _part(importer), _part(imported)
        if low == high:
            continue
        if low not in RANK or high not in RANK:
            bad.append(f"{importer}:{line} imports {imported}: {low or high!r} is in no layer of LAYERS")
        elif RANK[high] > RANK[low]:
            bad.append(f"{importer}:{line} imports {imported}, a layer above it")
    return bad


@cache
def _package_graph() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    return import_graph()


def test_the_package_has_no_import_cycle():
    graph, _ = _package_graph()
    found = cycles(graph)
    assert not found, "import cycles (local imports included):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_layer_imports_one_above_it():
    _, edges = _package_graph()
    assert len(edges) > 500  # the walk saw the package
    bad = upward(edges)
    assert not bad, "\n".join(bad)


def test_the_ir_knows_nothing_about_execution():
    _, edges = _package_graph()
    from_ptx = {imported for importer, imported, _ in edges if _part(importer) == "ptx"}
    assert from_ptx and all(_part(m) in ("ptx", "errors") for m in from_ptx), sorted(from_ptx)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "ptxforge" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "ptxforge"


@pytest.mark.parametrize("where", ["top", "function", "import_module"])
def test_the_checks_see_a_cycle_and_an_upward_import_however_written(tmp_path, where):
    """The walk itself: a cycle through a function-local import (or importlib), and the upward edge it makes."""
    late = {"top": "from ptxforge.runtime import kernel\n",
            "function": "def f():\n    from ptxforge.runtime import kernel\n    return kernel\n",
            "import_module": "import importlib\n\ndef f():\n"
                             "    return importlib.import_module('ptxforge.runtime.kernel')\n"}
    root = _write(tmp_path, {"__init__.py": "", "ptx/__init__.py": "", "ptx/ir.py": late[where],
                             "runtime/__init__.py": "", "runtime/kernel.py": "from ptxforge.ptx import ir\n"})
    graph, edges = import_graph(root)
    assert cycles(graph) == [["ptxforge.ptx.ir", "ptxforge.runtime.kernel"]]
    assert upward(edges) == ["ptxforge.ptx.ir:" + ("1" if where == "top" else "2" if where == "function" else "4")
                             + " imports ptxforge.runtime.kernel, a layer above it"]


def test_a_type_checking_import_is_no_cycle_but_still_no_upward_import(tmp_path):
    root = _write(tmp_path, {"__init__.py": "", "ptx/__init__.py": "",
                             "ptx/ir.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "    from ptxforge.runtime.kernel import Kernel\n",
                             "runtime/__init__.py": "", "runtime/kernel.py": "from ptxforge.ptx import ir\n"})
    graph, edges = import_graph(root)
    assert cycles(graph) == []
    assert upward(edges) == ["ptxforge.ptx.ir:3 imports ptxforge.runtime.kernel, a layer above it"]


def test_ep_has_no_import_cycle_even_through_type_checking_imports():
    """Inside ptxforge.ep every import edge counts, TYPE_CHECKING ones too: Buffer sits above its backends,
    the backends above the kernels' host code, and nothing below names what is above it (a type included)."""
    _, edges = _package_graph()
    graph: dict[str, set[str]] = {}
    for importer, imported, _ in edges:
        if importer.startswith("ptxforge.ep.") and imported.startswith("ptxforge.ep.") and importer != imported:
            graph.setdefault(importer, set()).add(imported)
            graph.setdefault(imported, set())
    assert "ptxforge.ep.backends.base" in graph["ptxforge.ep.buffer"] or any(
        m.startswith("ptxforge.ep.backends") for m in graph["ptxforge.ep.buffer"])
    found = cycles(graph)
    assert not found, "import cycles inside ptxforge.ep:\n" + "\n".join(" <-> ".join(c) for c in found)
