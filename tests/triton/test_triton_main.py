"""`python -m ptxforge.triton`: its help, and usage errors on one line without a traceback."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install 'ptxforge[triton]')")

from ptxforge.triton.__main__ import main  # noqa: E402


def _usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m ptxforge.triton") and "Traceback" not in err
    return err


def test_help_names_the_options_and_the_environment(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for text in ("SCRIPT.py", "--sanitize", "--arch", "PTXFORGE_TRITON_SANITIZE", "examples:"):
        assert text in out


@pytest.mark.parametrize("argv, message", [
    ([], "give the script to run"),
    (["no_such_script.py"], "no_such_script.py: does not exist"),
    (["."], ".: is a directory"),
])
def test_a_missing_script_is_a_usage_error(capsys, monkeypatch, tmp_path, argv, message):
    monkeypatch.chdir(tmp_path)
    assert message in _usage_error(capsys, argv)


def test_a_malformed_arch_is_refused_before_the_script_runs(capsys, monkeypatch, tmp_path):
    for name in ("PTXFORGE_TRITON", "PTXFORGE_TRITON_SANITIZE", "PTXFORGE_TRITON_ARCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # main() sets the variables for the script it runs
    script = tmp_path / "x.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    err = _usage_error(capsys, ["--arch", "gfx90a", str(script)])
    assert "arch 'gfx90a': expected a target such as sm_80" in err and "must not run" not in err


def test_a_malformed_environment_variable_is_a_usage_error_too(tmp_path):
    """In a process of its own: runpy imports the package (which reads the variables) before __main__ runs."""
    script = tmp_path / "x.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PTXFORGE_TRITON_SANITIZE": "yes"}
    run = subprocess.run([sys.executable, "-m", "ptxforge.triton", str(script)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 2
    assert "PTXFORGE_TRITON_SANITIZE='yes': expected 0 or 1" in run.stderr
    assert "Traceback" not in run.stderr and "must not run" not in run.stderr
