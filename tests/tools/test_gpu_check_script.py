"""scripts/gpu_check.sh runs only on a GPU machine, so a typo or a renamed test file would first show there,
costing scarce GPU time: check here that it parses and that every path it names exists."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_script_parses():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_path_it_names_exists():
    text = SCRIPT.read_text()
    paths = {m.group(1) for m in re.finditer(r"\b((?:tests|benchmarks|examples|src|scripts)/[\w./-]+)(\*?)", text)
             if not m.group(2)}  # a glob names a pattern, not a path
    assert len(paths) >= 10
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"gpu_check.sh names missing paths: {missing}"
