"""What importing ptxforge costs: `import ptxforge` loads the PTX layer only (the DSL and emulator names come
on first use), and none of ptx, emu, dsl, runtime loads an optional dependency (torch, matplotlib)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
seen = {}
import ptxforge
seen["ptxforge"] = sorted(sys.modules)
import ptxforge.ptx, ptxforge.emu, ptxforge.dsl, ptxforge.runtime
seen["layers"] = sorted(sys.modules)
names = [ptxforge.kernel, ptxforge.func, ptxforge.ptr, ptxforge.dsl, ptxforge.DSLError, ptxforge.DSLTypeError,
         ptxforge.DSLArchError, ptxforge.SanitizerError, ptxforge.EmulatorError]
seen["lazy"] = [getattr(n, "__name__", "") for n in names]
print(json.dumps(seen))
"""


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _loaded(modules: list[str], *roots: str) -> list[str]:
    return [m for m in modules if m.split(".")[0] in roots or m in roots]


def test_import_weight():
    seen = _probe()
    light = seen["ptxforge"]
    assert not _loaded(light, "numpy", "ml_dtypes", "torch", "matplotlib", "cuda"), "import ptxforge"
    heavy = [m for m in light if m.startswith(("ptxforge.dsl", "ptxforge.emu", "ptxforge.runtime", "ptxforge.kernels"))]
    assert not heavy, f"import ptxforge loads {heavy}; keep them behind ptxforge.__getattr__"
    assert not _loaded(seen["layers"], "torch", "matplotlib"), "ptxforge.ptx, .emu, .dsl or .runtime"
    assert seen["lazy"] == ["kernel", "func", "ptr", "ptxforge.dsl", "DSLError", "DSLTypeError", "DSLArchError",
                            "SanitizerError", "EmulatorError"]
