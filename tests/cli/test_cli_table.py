"""The subcommand table (ptxforge.cli.commands): `--help` loads no subcommand's implementation, and every
entry of the table names a function that exists."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ptxforge.cli.commands import COMMANDS
from ptxforge.cli.main import build_parser, main

# In one fresh interpreter: build the parser, then the help of the whole CLI and of a few subcommands; print the
# modules loaded by then.
_HELP_PROBE = """
import contextlib, io, json, sys
from ptxforge.cli.main import build_parser, main
build_parser()
after_parser = sorted(sys.modules)
for argv in (["--help"], ["run", "--help"], ["demo", "--help"], ["plan", "--help"], ["pipeline", "simulate", "-h"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
print(json.dumps({"parser": after_parser, "help": sorted(sys.modules)}))
"""

# heavy or optional: none of these may load for `--help`
_NOT_FOR_HELP = ("torch", "matplotlib", "ptxforge.emu", "ptxforge.kernels", "ptxforge.ep", "ptxforge.toolchain")
_LIGHT_CLI = {"ptxforge.cli", "ptxforge.cli.main", "ptxforge.cli.commands", "ptxforge.cli.errors"}


def _entries(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """{('pipeline', 'simulate'): 'ptxforge.cli.pipeline_cmd:simulate', ...} for every (sub)subcommand."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                entry = sub.get_default("entry")
                if entry is not None:
                    out[(*path, name)] = entry
                out |= _entries(sub, (*path, name))
    return out


def test_help_loads_no_subcommand_implementation():
    proc = subprocess.run([sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.splitlines()[-1])
    for when, modules in loaded.items():
        heavy = [m for m in modules if m.split(".")[0] in _NOT_FOR_HELP or m.startswith(_NOT_FOR_HELP)]
        assert heavy == [], f"after {when}: {heavy}"
        cli = {m for m in modules if m.startswith("ptxforge.cli")}
        assert cli <= _LIGHT_CLI, f"after {when}: {sorted(cli - _LIGHT_CLI)}"


def test_every_entry_names_a_function_of_its_module():
    entries = _entries(build_parser())
    assert {path[0] for path in entries} == set(COMMANDS)
    assert entries[("pipeline", "simulate")] == "ptxforge.cli.pipeline_cmd:simulate"
    for path, entry in entries.items():
        module, _, function = entry.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), path


@pytest.mark.parametrize("argv", [[], ["pipeline"]])
def test_no_subcommand_prints_the_help_and_exits_1(argv, capsys):
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert out.startswith("usage: ptxforge") and ("COMMAND" in out if not argv else "SUBCOMMAND" in out)


def test_the_demo_skips_its_torch_sections_without_torch(monkeypatch):
    """demo_ep and demo_comm import torch at their top; without torch the demo does not load them at all."""
    from ptxforge.cli import demo

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ModuleNotFoundError(name="torch")
    for name in ("demo_ep", "demo_comm", "demo_train"):  # as if never imported
        monkeypatch.delitem(sys.modules, f"ptxforge.cli.{name}", raising=False)
        monkeypatch.delattr(sys.modules["ptxforge.cli"], name, raising=False)
    assert demo._torch_sections() is None
    assert "ptxforge.cli.demo_ep" not in sys.modules and "ptxforge.cli.demo_comm" not in sys.modules
    assert "ptxforge.cli.demo_train" not in sys.modules


def test_the_demo_loads_its_torch_sections_with_torch():
    pytest.importorskip("torch", reason="the expert-parallel demo needs the torch extra")
    from ptxforge.cli import demo, demo_comm, demo_ep, demo_train

    sections = demo._torch_sections()
    assert sections == (demo_ep.expert_parallel, demo_comm.comm_section, demo_train.train_section)
