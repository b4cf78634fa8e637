"""The documentation site (mkdocs.yml) builds with warnings as errors, and its generated references are complete:
every public name of the six API packages has its anchor, every subcommand its --help, every exception class its
docstring. Also the link rewriting of scripts/mkdocs_hooks.py and the package metadata a PyPI release needs."""

from __future__ import annotations

import html
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ptxforge", "ptxforge.dsl", "ptxforge.emu", "ptxforge.ep", "ptxforge.pipeline", "ptxforge.plan")
BUILD_TIMEOUT_S = 240


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    for name in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"the docs extra is not installed ({name} missing): pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return out


def _page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def test_site_builds_strict_with_every_page(site):
    for page in ("", "emulator", "sanitizer", "node", "cluster", "dsl", "ep", "plan", "pipeline", "cli",
                 "environment", "benchmarks", "changelog", "reference/cli", "reference/errors"):
        assert (site / page / "index.html").is_file(), page


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_an_anchor_in_the_api_reference(site, package):
    module = importlib.import_module(package)
    names = module.__all__
    assert names
    ids = set(re.findall(r'\bid="([^"]+)"', _page(site, f"reference/api/{package}")))
    missing = [name for name in names if f"{package}.{name}" not in ids]
    assert not missing, f"not in the API reference of {package}: {missing}"


def test_cli_reference_has_every_subcommands_help(site):
    from ptxforge.cli.commands import COMMANDS
    from ptxforge.cli.main import build_parser

    text = html.unescape(re.sub(r"<[^>]+>", "", _page(site, "reference/cli")))
    words = "".join(text.split())  # argparse wraps help to the width it was given, breaking at hyphens too
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert list(sub.choices) == list(COMMANDS)
    todo = [(f"ptxforge {name}", parser) for name, parser in sub.choices.items()]
    while todo:
        name, parser = todo.pop()
        assert f"usage: {name}" in text, name
        nested = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        todo += [(f"{name} {n}", p) for a in nested for n, p in a.choices.items()]
        for action in parser._actions:  # each option and its help, as argparse prints it
            for option in action.option_strings:
                assert option in text, (name, option)
            if action.help and "%" not in action.help and action.help != "==SUPPRESS==":
                assert "".join(action.help.split()) in words, (name, action.help)
        if parser.description:
            assert "".join(parser.description.split()) in words, name


def test_error_reference_has_every_exception_class(site):
    hooks = _hooks()
    classes = hooks.exception_classes()
    assert len(classes) > 30
    text = html.unescape(re.sub(r"<[^>]+>", "", _page(site, "reference/errors")))
    for cls in classes:
        assert f"{cls.__module__}.{cls.__qualname__}" in text, cls
        first = (cls.__doc__ or "").strip().split("\n")[0].replace("`", "")
        assert " ".join(first.split()[:6]) in " ".join(text.split()), cls
    from ptxforge.emu.errors import MemoryFault
    from ptxforge.errors import KernelFault
    section = text[text.index("KernelFault (ptxforge.errors)"):]
    assert "MemoryFault" in section.split("EmulatorError (")[0], "MemoryFault belongs to the KernelFault family"
    assert issubclass(MemoryFault, KernelFault)


def test_links_are_rewritten_for_the_site():
    hooks = _hooks()
    url = "https://example.org/repo"
    readme = "[the emulator](docs/emulator.md#x) [notes](CHANGELOG.md) [lic](LICENSE) [g](docs/) [w](https://a.b)"
    out = hooks.rewrite_links(readme, "README.md", "index.md", url)
    assert out == ("[the emulator](emulator.md#x) [notes](changelog.md) [lic](https://example.org/repo/blob/main/"
                   "LICENSE) [g](index.md#documentation) [w](https://a.b)")
    guide = "[src](../src/ptxforge/errors.py) [peer](node.md) [res](../benchmarks/RESULTS.md)\n```\n[a](nope)\n```"
    out = hooks.rewrite_links(guide, "docs/ep.md", "ep.md", url)
    assert out.startswith(f"[src]({url}/blob/main/src/ptxforge/errors.py) [peer](node.md) [res](benchmarks.md)")
    assert out.endswith("```\n[a](nope)\n```")  # code blocks are left alone
    with pytest.raises(hooks.DocsBuildError, match=r"docs/ep.md:2: link to '../no/such.py'"):
        hooks.rewrite_links("x\n[gone](../no/such.py)", "docs/ep.md", "ep.md", url)


def test_package_metadata_is_complete_for_a_release():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    from packaging.version import Version

    assert Version(project["version"]) >= Version("0.2.0")
    assert set(project["urls"]) >= {"Homepage", "Documentation", "Source", "Issues"}
    assert all(u.startswith("https://") for u in project["urls"].values())
    assert (ROOT / project["readme"]).is_file() and project["license"] == "Apache-2.0"
    assert all((ROOT / f).is_file() for f in project["license-files"])
    assert all(re.fullmatch(r"[A-Z][\w .+/-]*( :: [\w .+/()-]+)+", c) for c in project["classifiers"])
    # no License classifier: the SPDX `license` expression replaces it (setuptools >= 77 refuses both)
    assert {c.split(" :: ")[0] for c in project["classifiers"]} >= {"Development Status", "Programming Language",
                                                                    "Operating System", "Intended Audience"}
    assert "docs" in project["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text()
    test_venv = makefile.split("$(STAMP): pyproject.toml")[1].split("\n\n")[0]
    assert re.search(r"-e '\.\[[^\]]*\bdocs\b[^\]]*\]'", test_venv), "make test's venv installs the docs extra"
    assert re.search(r"^docs: \$\(STAMP\)\n\t\$\(BIN\)/mkdocs build --strict", makefile, re.M)


def test_a_guide_missing_from_the_nav_is_added_under_guides(tmp_path):
    hooks = _hooks()
    (tmp_path / "listed.md").write_text("# Listed\n")
    (tmp_path / "new-guide.md").write_text("intro\n# The `new` guide\n")
    config = {"docs_dir": str(tmp_path),
              "nav": [{"Getting started": "index.md"}, {"Guides": [{"Listed": "listed.md"}]}]}
    hooks.on_config(config)
    assert config["nav"][1]["Guides"] == [{"Listed": "listed.md"}, {"The new guide": "new-guide.md"}]


def test_error_reference_names_a_module_whose_optional_dependency_is_missing(monkeypatch):
    hooks = _hooks()
    real = importlib.import_module

    def failing(module: str, missing: str):
        def import_module(name, *args, **kwargs):
            if name == module:
                raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
            return real(name, *args, **kwargs)
        return import_module

    monkeypatch.setattr(hooks.importlib, "import_module", failing("ptxforge.plan.params", "ptxforge.plan.nope"))
    with pytest.raises(hooks.DocsBuildError, match=r"ptxforge.plan.params does not import"):
        hooks.error_reference()  # a broken import inside ptxforge stops the build
    monkeypatch.setattr(hooks.importlib, "import_module", failing("ptxforge.ep.node_group", "torch"))
    page = hooks.error_reference()  # a missing optional dependency is named on the page
    assert "`ptxforge.ep.node_group` (needs `torch`, not installed where this site was built)" in page
    assert "### EPError" in page
