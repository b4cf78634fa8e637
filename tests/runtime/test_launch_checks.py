"""Launch checks the driver makes, made before anything is allocated, on both devices (see emu.launch_checks)."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.emu.launch_checks import check_launch

TRITON_ADD = Path(__file__).parents[1] / "corpus/ptx/triton/vector_add_f32.sm_80.ptx"

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _kernel(directives: str, body: str = "", params: str = ".param .u64 p"):
    text = f"{HEADER}.visible .entry k({params})\n{directives}\n{{\n{body}\n    ret;\n}}\n"
    return pf.parse(text, filename="k.ptx").kernel("k")


def test_triton_reqntid_refuses_a_smaller_block_naming_the_directive_and_line():
    """The silent wrong answer: Triton's `.reqntid 128` launched with 64 threads used to run half the work."""
    k = pf.parse_file(str(TRITON_ADD)).kernel("add_kernel")
    line = next(i for i, t in enumerate(TRITON_ADD.read_text().splitlines(), 1) if ".reqntid" in t)
    x = np.ones(256, np.float32)
    out = np.full(256, 7, np.float32)
    with pytest.raises(LaunchError, match=rf"vector_add_f32.sm_80.ptx:{line}: add_kernel declares .reqntid 128; "
                                          r"the launch's block is \(64, 1, 1\)"):
        k.launch(grid=(4,), block=(64,), args=[x, x, out, np.uint32(256), None, None], device="emu")
    assert (out == 7).all()  # nothing ran, nothing written


def test_maxntid_counts_threads():
    k = _kernel(".maxntid 64, 2, 1")
    k.launch(grid=(1,), block=(32, 4), args=[None], device="emu")  # 128 threads: within 64*2
    with pytest.raises(LaunchError, match=r"k.ptx:5: k declares .maxntid 64, 2, 1 \(128 threads\)"):
        k.launch(grid=(1,), block=(256,), args=[None], device="emu")


def test_reqnctapercluster_and_explicitcluster_name_their_line():
    k = _kernel(".reqnctapercluster 2, 1, 1")
    with pytest.raises(LaunchError, match=r"k.ptx:5: k declares .reqnctapercluster \(2, 1, 1\); the launch asked "
                                          r"for cluster \(4, 1, 1\)"):
        k.launch(grid=(4,), block=(32,), args=[None], device="emu", cluster=(4, 1, 1))
    with pytest.raises(LaunchError, match=r"k.ptx:5: grid \(3, 1, 1\) is not a whole number of clusters"):
        k.launch(grid=(3,), block=(32,), args=[None], device="emu")
    e = _kernel(".explicitcluster")
    with pytest.raises(LaunchError, match=r"k.ptx:5: k is .explicitcluster"):
        e.launch(grid=(2,), block=(32,), args=[None], device="emu")


@pytest.mark.parametrize("grid, block, match", [
    ((2**31,), (1,), "grid x dimension 2147483648 exceeds 2147483647"),
    ((1, 65536), (1,), "grid y dimension 65536 exceeds 65535"),
    ((1, 1, 65536), (1,), "grid z dimension 65536 exceeds 65535"),
    ((1,), (1025,), "1025 threads; the limit is 1024"),
    ((1,), (1, 1, 65), "block z dimension 65 exceeds 64"),
    ((0,), (1,), "positive integers"),
    ((1,), ("a",), "positive integers"),
])
def test_grid_and_block_limits(grid, block, match):
    k = _kernel("")
    with pytest.raises(LaunchError, match=match):
        k.launch(grid=grid, block=block, args=[None], device="emu")


def test_shared_memory_limit_counts_static_shared_before_allocating(monkeypatch):
    k = _kernel("", body="    .reg .b64 %rd0;\n    .shared .align 16 .b8 buf[40000];\n    mov.u64 %rd0, buf;",
                params=".param .u64 p")
    from ptxforge.emu.launch import emu_device

    allocs = []
    real = emu_device().memory.alloc
    monkeypatch.setattr(emu_device().memory, "alloc", lambda *a, **kw: allocs.append(a) or real(*a, **kw))
    with pytest.raises(LaunchError, match=r"40000 bytes of static plus 200000 of dynamic shared memory exceed the "
                                          r"232448 bytes \(227 KiB\)"):
        k.launch(grid=(1,), block=(32,), args=[np.zeros(4, np.float32)], device="emu", shared_mem=200_000)
    assert allocs == []  # refused before the argument was copied
    with pytest.raises(LaunchError, match="shared_mem must be a non-negative integer"):
        k.launch(grid=(1,), block=(32,), args=[None], device="emu", shared_mem=-1)


def test_one_function_for_both_devices():
    """The CUDA backend calls the same check with the GPU's own limits (no GPU needed to see its verdicts)."""
    k = _kernel(".reqntid 128")
    with pytest.raises(LaunchError, match=".reqntid 128"):
        check_launch(k.module, k.function, (1,), (64,), shared_mem=0, static_shared=0, max_shared=232448)
    with pytest.raises(LaunchError, match="exceed the 101376 bytes"):
        check_launch(k.module, k.function, (1,), (128,), shared_mem=101377, static_shared=0, max_shared=101376)
    shape = check_launch(k.module, k.function, (2, 3), (128,), shared_mem=0)
    assert shape.grid == (2, 3, 1) and shape.block == (128, 1, 1) and shape.cluster is None
