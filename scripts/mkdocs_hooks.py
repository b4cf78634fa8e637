"""MkDocs hooks: the pages built from the code and from the repository's own documents.

- index.md: README.md; benchmarks.md: benchmarks/RESULTS.md; changelog.md: CHANGELOG.md (one source each).
- reference/cli.md: every subcommand's --help, from the argparse table (ptxforge.cli.commands).
- reference/errors.md: every exception class of ptxforge, by family, from the classes' docstrings.
- reference/api/*.md: the API of the packages in API_PACKAGES, through mkdocstrings; a public name mkdocstrings
  cannot see statically (loaded lazily, shadowed by a submodule, bound by a tuple assignment) gets a section of
  its own, so that every name of each package's __all__ has an anchor `PACKAGE.NAME`.

Links in any page to a repository file outside docs/ become links to that file in the repository (repo_url);
a link to a file that does not exist is an error, as MkDocs' own check is for links inside docs/.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the checkout's ptxforge, as mkdocstrings' `paths: [src]` reads it

# generated page -> the repository document it shows
INCLUDED = {"index.md": "README.md", "benchmarks.md": "benchmarks/RESULTS.md", "changelog.md": "CHANGELOG.md"}
_AS_PAGE = {source: page for page, source in INCLUDED.items()}
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_HELP_WIDTH = "100"
API_PACKAGES = ("ptxforge", "ptxforge.dsl", "ptxforge.emu", "ptxforge.ep", "ptxforge.pipeline", "ptxforge.plan")


def api_page(package: str) -> str:
    """The site path of `package`'s API reference."""
    return f"reference/api/{package}.md"


try:
    from mkdocs.exceptions import PluginError as _BuildFailure  # MkDocs prints it as one line, no traceback
except ImportError:  # the link rewriting and the nav completion work (and are tested) without MkDocs
    _BuildFailure = Exception  # type: ignore[misc,assignment]


class DocsBuildError(_BuildFailure):
    """The site cannot be built as written: a link to a missing file, a module that does not import."""


def _repo_link(target: str, source_dir: str, repo_url: str, where: str) -> str:
    """`target`, linked from a file in `source_dir` (repository-relative), as the site should link it."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(source_dir, path)) if path else ""
    if resolved in _AS_PAGE:
        page = _AS_PAGE[resolved]
    elif resolved == "docs":
        page, anchor = "index.md", anchor or "documentation"  # README's list of the guides
    elif resolved.startswith("docs/"):
        if source_dir == "docs" or source_dir.startswith("docs/"):
            return target  # a link between guides: MkDocs checks it
        page = resolved.removeprefix("docs/")
    else:
        if not (ROOT / resolved).exists():
            raise DocsBuildError(f"{where}: link to {target!r}: {resolved} does not exist in the repository")
        kind = "tree" if (ROOT / resolved).is_dir() else "blob"
        return f"{repo_url.rstrip('/')}/{kind}/main/{resolved}" + (f"#{anchor}" if anchor else "")
    return page + (f"#{anchor}" if anchor else "")


def rewrite_links(markdown: str, source: str, page: str, repo_url: str) -> str:
    """The links of `markdown` (the repository file `source`) as they must read on the site page `page`."""
    source_dir = posixpath.dirname(source)
    page_dir = posixpath.dirname(page)

    def fix(m: re.Match[str]) -> str:
        line = markdown.count("\n", 0, m.start()) + 1
        new = _repo_link(m.group(2), source_dir, repo_url, f"{source}:{line}")
        if new != m.group(2) and "://" not in new and not new.startswith("#"):
            new = posixpath.relpath(new.partition("#")[0], page_dir or ".") + (
                "#" + new.partition("#")[2] if "#" in new else "")
        return m.group(1) + new + m.group(3)

    out, fence = [], False
    for chunk in re.split(r"(^```.*$)", markdown, flags=re.M):  # leave code blocks alone
        if chunk.startswith("```"):
            fence = not fence
            out.append(chunk)
        else:
            out.append(chunk if fence else _LINK.sub(fix, chunk))
    return "".join(out)


# --- the CLI reference -----------------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((name, sub))
    return out


def cli_reference() -> str:
    """Markdown: `ptxforge --help` and every subcommand's (and sub-subcommand's) --help, as argparse prints it."""
    from ptxforge.cli.main import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _HELP_WIDTH  # argparse wraps to the terminal: the same page on every machine
    try:
        parser = build_parser()
        parser.prog = "ptxforge"
        lines = ["# CLI reference", "",
                 "Generated from the argparse table (`ptxforge.cli.commands`) when the site is built: each "
                 "section is what `ptxforge COMMAND --help` prints. The [command line guide](../cli.md) explains "
                 "them with examples.", "", "## ptxforge", "", "```text", parser.format_help().rstrip(), "```", ""]
        stack = [(f"ptxforge {name}", sub) for name, sub in _subcommands(parser)]
        while stack:
            title, sub = stack.pop(0)
            lines += [f"## {title}", "", "```text", sub.format_help().rstrip(), "```", ""]
            stack[0:0] = [(f"{title} {name}", s) for name, s in _subcommands(sub)]
        return "\n".join(lines)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


# --- the error reference ---------------------------------------------------------------------------------------

def exception_classes(unimported: list[str] | None = None) -> list[type[BaseException]]:
    """Every public exception class defined in ptxforge (each module imported), in module order.

    A module that needs an optional dependency this environment lacks is listed in `unimported` (a line
    naming it and the missing package) rather than stopping the build; any other import failure stops it."""
    import ptxforge

    for info in pkgutil.walk_packages(ptxforge.__path__, "ptxforge."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs a command when imported
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            missing = getattr(e, "name", None) or ""
            if unimported is None or not missing or missing.split(".")[0] == "ptxforge":
                raise DocsBuildError(f"{info.name} does not import: {e}") from e
            unimported.append(f"`{info.name}` (needs `{missing}`, not installed where this site was built)")
    found: dict[str, type[BaseException]] = {}
    for name, module in sorted(sys.modules.items()):
        if not (name == "ptxforge" or name.startswith("ptxforge.")) or module is None:
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == name
                    and not value.__name__.startswith("_")):
                found[f"{name}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


def _family(cls: type[BaseException], families: list[type[BaseException]]) -> str:
    for family in families:
        if issubclass(cls, family):
            return family.__name__
    from ptxforge.errors import Error
    return "Error" if issubclass(cls, Error) else "outside"


def error_reference() -> str:
    """Markdown: the error families of ptxforge.errors, then each exception class under its family."""
    import ptxforge.errors as errors
    from ptxforge.emu.errors import EmulatorError
    from ptxforge.ptx.errors import PTXError

    families: list[type[BaseException]] = [PTXError, errors.LaunchError, errors.KernelFault,
                                           errors.DeviceUnavailable, EmulatorError]
    titles = {f.__name__: f"{f.__name__} (`{f.__module__}`)" for f in families}
    titles["Error"] = "Other errors under `ptxforge.Error`"
    titles["outside"] = "Outside `ptxforge.Error`"
    groups: dict[str, list[type[BaseException]]] = {key: [] for key in titles}
    unimported: list[str] = []
    for cls in exception_classes(unimported):
        groups[_family(cls, families)].append(cls)
    lines = ["# Error reference", "",
             "Generated from the exception classes' docstrings when the site is built. Every error ptxforge "
             "raises on purpose is a `ptxforge.Error`; its family says who must act. "
             "`except ptxforge.Error` catches them all; each class also keeps the built-in base its callers "
             "expect (listed as *bases*).", "", "## The families", "", "```text",
             inspect.cleandoc(errors.__doc__ or "").rstrip(), "```", ""]
    if unimported:
        lines += ["!!! warning \"Modules left out of this page\"", "",
                  *(f"    - {line}" for line in unimported), ""]
    for key, title in titles.items():
        if not groups[key]:
            continue
        lines += [f"## {title}", ""]
        for cls in groups[key]:
            bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
            doc = inspect.cleandoc(cls.__doc__ or "").strip() or "(no docstring)"
            lines += [f"### {cls.__name__}", "", f"`{cls.__module__}.{cls.__qualname__}` · bases: {bases}", "",
                      doc, ""]
    return "\n".join(lines)


# --- the API reference -----------------------------------------------------------------------------------------

def _static_names(package: Any) -> set[str]:
    """The names of `package` that mkdocstrings renders under it: griffe sees them, and not as a module."""
    import griffe

    found = set()
    for name, member in package.members.items():
        try:
            target = member.final_target if member.is_alias else member
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue  # bound where griffe cannot see it
        if target.kind is not griffe.Kind.MODULE:
            found.add(name)
    return found


def api_reference(package: str, static: Any) -> str:
    """Markdown for `package`'s API page: mkdocstrings' rendering, then a section for each public name it misses."""
    module = importlib.import_module(package)
    names = list(getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")])
    seen = _static_names(static)
    lines = [f"::: {package}", ""]
    for name in names:
        if name in seen:
            continue
        value = getattr(module, name)
        lines += [f"## `{name}` {{#{package}.{name}}}", ""]
        if inspect.ismodule(value):
            target = value.__name__
            link = (f"[its API reference]({posixpath.relpath(api_page(target), 'reference/api')})"
                    if target in API_PACKAGES else f"`{target}`")
            lines += [f"The subpackage `{target}`: {link}.", ""]
        elif inspect.isclass(value) or inspect.isroutine(value):
            lines += [f"`{package}.{name}` is `{value.__module__}.{value.__qualname__}`:", "",
                      f"::: {value.__module__}.{value.__qualname__}", "    options:", "      heading_level: 3", ""]
        else:
            kind = type(value)
            doc = inspect.cleandoc(kind.__doc__ or "") if kind.__module__.startswith("ptxforge") else ""
            lines += [f"`{package}.{name}`: `{value!r}`, an instance of `{kind.__module__}.{kind.__qualname__}`.",
                      "", doc, ""]
    return "\n".join(lines)


# --- MkDocs hooks ----------------------------------------------------------------------------------------------

def _nav_paths(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_nav_paths(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_nav_paths(v) for v in nav))
    return set()


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return path.stem


def on_config(config: Any) -> Any:
    """A guide (docs/*.md) that mkdocs.yml's nav does not list yet goes at the end of Guides, under its title."""
    listed = _nav_paths(config["nav"])
    guides = next(item["Guides"] for item in config["nav"] if isinstance(item, dict) and "Guides" in item)
    for path in sorted(Path(config["docs_dir"]).glob("*.md")):
        if path.name not in listed:
            guides.append({_title(path): path.name})
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    repo_url = config["repo_url"]
    for page, source in INCLUDED.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=rewrite_links(text, source, page, repo_url)))
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "reference/errors.md", content=error_reference()))
    import griffe

    static = griffe.load("ptxforge", search_paths=[str(ROOT / "src")])
    for package in API_PACKAGES:
        member = static if package == "ptxforge" else static[package.removeprefix("ptxforge.")]
        files.append(File.generated(config, api_page(package), content=api_reference(package, member)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links from a guide to a repository file outside docs/ point at that file in the repository."""
    source = page.file.src_uri
    if source in INCLUDED or page.file.generated_by:
        return markdown  # already rewritten against its own location
    return rewrite_links(markdown, f"docs/{source}", source, config["repo_url"])
