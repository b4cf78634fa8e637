"""`Buffer` and its two backends behind one interface (ptxforge.ep.backends): Buffer's methods never choose a
backend by name, the torch backend never loads the emulator, and a backend without low-latency mode says so
with the declared NotImplementedError."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ptxforge.ep as deep_ep
from ptxforge.ep import backends
from ptxforge.ep.backends.base import Backend

BUFFER_PY = Path(deep_ep.__file__).parent / "buffer.py"

_PROBE = """
import json, sys, tempfile, os
import torch, torch.distributed as dist
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
import ptxforge.ep as deep_ep
heavy = ("ptxforge.emu", "ptxforge.dsl", "ptxforge.runtime", "ptxforge.kernels")
loaded = lambda: sorted(m for m in sys.modules if m.startswith(heavy))
kernels = deep_ep.Buffer(None, backend="kernels")  # made, not used: the kernels load at its first call
buf = deep_ep.Buffer(None)
x = torch.arange(8 * 128, dtype=torch.float32).view(8, 128).to(torch.bfloat16)
idx = torch.tensor([[0, 1]] * 8)
ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, 4)
recv, _, w, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                        num_tokens_per_expert=nte, topk_idx=idx, topk_weights=torch.ones(8, 2))
combined, _, _ = buf.combine(recv, handle)
print(json.dumps({"loaded": loaded(), "same": bool(torch.equal(combined, x)), "backend": buf.backend}))
dist.destroy_process_group()
"""


def test_the_torch_backend_runs_without_loading_the_emulator_or_the_kernels():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"loaded": [], "same": True, "backend": "torch"}, seen


def test_buffer_chooses_no_backend_by_name_in_its_methods():
    """The backend is chosen once (`backends.backend_class`); no method of Buffer compares `backend`."""
    tree = ast.parse(BUFFER_PY.read_text())
    found = [f"buffer.py:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
             if isinstance(node, ast.Compare) and "backend" in ast.unparse(node)]
    assert not found, "\n".join(found)


def test_both_backends_implement_the_whole_interface():
    abstract = {name for name, v in vars(Backend).items() if getattr(v, "__isabstractmethod__", False)}
    assert abstract == {"layout", "dispatch", "combine"}
    for name, cls in backends.BACKENDS.items():
        assert cls.name == name and not getattr(cls, "__abstractmethods__", None), name
    assert backends.backend_class("torch") is backends.TorchBackend
    with pytest.raises(ValueError, match="backend must be 'torch' or 'kernels', got 'nccl'"):
        backends.backend_class("nccl")


def test_a_backend_without_low_latency_mode_raises_its_declared_reason(monkeypatch):
    """Both backends have low-latency mode; one that declares it missing is refused with its own reason, before
    Buffer needs a process group."""
    assert all(cls.low_latency_missing is None for cls in backends.BACKENDS.values())

    class NoLowLatency(backends.TorchBackend):
        name = "kernels"
        low_latency_missing = "this backend has no low-latency mode"

    monkeypatch.setitem(backends.BACKENDS, "kernels", NoLowLatency)
    with pytest.raises(NotImplementedError) as e:
        deep_ep.Buffer(None, 0, 0, low_latency_mode=True, backend="kernels")
    assert str(e.value) == NoLowLatency.low_latency_missing
