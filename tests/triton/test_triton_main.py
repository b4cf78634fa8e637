"""`python -m ptxforge.triton`: its help, and usage errors without a traceback."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install 'ptxforge[triton]')")


def _main(*argv: str, **env_changes: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in ("PTXFORGE_TRITON", "PTXFORGE_TRITON_SANITIZE", "PTXFORGE_TRITON_ARCH"):
        env.pop(name, None)
    env.update(env_changes)
    return subprocess.run([sys.executable, "-m", "ptxforge.triton", *argv], capture_output=True, text=True,
                          env=env, timeout=120)


def test_help_names_the_options_and_the_environment():
    run = _main("--help")
    assert run.returncode == 0, run.stderr
    for text in ("SCRIPT.py", "--sanitize", "--arch", "PTXFORGE_TRITON_SANITIZE", "examples:"):
        assert text in run.stdout


@pytest.mark.parametrize("argv, env, message", [
    ((), {}, "give the script to run"),
    (("no_such_script.py",), {}, "no_such_script.py: does not exist"),
    ((".",), {}, ".: is a directory"),
    (("x.py",), {"PTXFORGE_TRITON_SANITIZE": "yes"}, "PTXFORGE_TRITON_SANITIZE='yes': expected 0 or 1"),
])
def test_usage_errors_are_one_line_without_a_traceback(tmp_path, monkeypatch, argv, env, message):
    (tmp_path / "x.py").write_text("raise SystemExit('the script must not run')\n")
    monkeypatch.chdir(tmp_path)
    result = _main(*argv, **env)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "must not run" not in result.stderr


def test_a_malformed_arch_is_refused_before_the_script_runs(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    result = _main("--arch", "gfx90a", str(script))
    assert result.returncode == 2
    assert "arch 'gfx90a': expected a target such as sm_80" in result.stderr
    assert "Traceback" not in result.stderr
