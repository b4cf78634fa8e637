"""Every public function in the package (`make lint` type-checks pyproject.toml's [tool.mypy] files: all of it) carries
type hints on all its parameters and its return, so mypy checks its body and its callers."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _scope() -> list[Path]:
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    out: list[Path] = []
    for f in files:
        p = ROOT / f
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def _missing(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    params = a.posonlyargs + a.args + a.kwonlyargs
    if params and params[0].arg in ("self", "cls"):
        params = params[1:]
    miss = [p.arg for p in params if p.annotation is None]
    miss += [f"*{v.arg}" for v in (a.vararg, a.kwarg) if v is not None and v.annotation is None]
    if fn.returns is None and fn.name != "__init__":
        miss.append("return")
    return miss


def _unhinted(path: Path, root: Path = ROOT) -> list[str]:
    found: list[str] = []

    def walk(body: list[ast.stmt], public: bool) -> None:
        for s in body:
            if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
                if public and (not s.name.startswith("_") or s.name in ("__init__", "__call__")):
                    miss = _missing(s)
                    if miss:
                        found.append(f"{path.relative_to(root)}:{s.lineno}: {s.name}: {', '.join(miss)}")
            elif isinstance(s, ast.ClassDef):
                walk(s.body, public and not s.name.startswith("_"))
    walk(ast.parse(path.read_text()).body, True)
    return found


def test_the_scope_is_the_whole_package():
    package = ROOT / "src/ptxforge"
    assert set(_scope()) == set(package.rglob("*.py"))


def test_public_functions_have_type_hints():
    assert [line for p in _scope() for line in _unhinted(p)] == []


def test_the_check_sees_a_missing_hint(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f(a, b: int):\n    pass\n\nclass C:\n    def g(self) -> None: ...\n    def _h(self, x): ...\n")
    assert _unhinted(p, tmp_path) == ["m.py:1: f: a, return"]
