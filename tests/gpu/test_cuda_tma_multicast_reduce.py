"""TMA multicast, TMA tensor reductions and im2col loads (corpus tma_multicast_reduce_sm90) on a real GPU, with driver
tensor maps: the same numpy references as tests/emu/test_emu_tma_multicast_reduce.py, and the same bits as
the emulator.

Each reduction and im2col case runs in a Python process of its own (`python THIS_FILE CASE ARGS`): a kernel fault
such as CUDA_ERROR_ILLEGAL_INSTRUCTION ends the CUDA context of its process, so in one process the first bad case
would fail every later one. Each case's outcome is appended to $PTXFORGE_GPU_CASES (scripts/gpu_check.sh sets it
to $OUT/gpu_cases.tsv), one line per case: name, outcome (passed, wrong result, fault CUDA_ERROR_..., timeout),
seconds, the last line of a failing case's output (its error).

On an H200 (2026-11-29, driver 580) these reductions stopped with CUDA_ERROR_ILLEGAL_INSTRUCTION when their boxes
started at x = -5 + 7b: dimension-0 starts that are not a multiple of 16 bytes (byte -20, 8, 36 of an f32 row).
That is the likely cause (from evidence; not yet confirmed on a GPU): a shared::cta -> global tensor copy writes
dimension 0 in 16-byte pieces (recorded on the H200 for tile stores) and Hopper faults on a start between them
(an H100 stops a TMA store at column 1 of an int32 tensor with an illegal instruction: TileLang issue #2527;
Triton #8657); ptxas and cuTensorMapEncodeTiled accept it, and the instruction is the one CUTLASS's
SM90_TMA_REDUCE_ADD makes (the same UTMAREDG.2D.ADD bits). The emulator now refuses it too, and the cases here use
16-byte-aligned starts inside the tensor; test_tensor_reduce_boxes_starting_before_the_tensor adds aligned
negative starts, and test_tensor_reduce_box_off_16_bytes_stops_the_gpu keeps the old geometry, to confirm the
cause where a GPU is lent. The im2col cases ran after the reductions in the same process, so their failure may
only have been the dead context; no fault in them was found by reading (dimension-0 coordinate 0, instruction
and map arguments as CUTLASS's SM90_TMA_LOAD_IM2COL makes them).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emu"))
import test_emu_tma_multicast_reduce as E  # noqa: E402  (the emulator tests' kernels and references)
from emu_corpus import corpus_module  # noqa: E402

from ptxforge.emu.errors import MemoryFault  # noqa: E402
from ptxforge.runtime import tensor_map, tensor_map_im2col, to_device  # noqa: E402

DEVICE = "cuda"
rng = np.random.default_rng(5)
REPO = Path(__file__).resolve().parents[2]
CASE_TIMEOUT_S = 120
IM2COL_CASES = [((2, 7, 9), 1), ((1, 10, 12), 2)]
UNALIGNED = dict(x0=-5, y0=-1, dx=7)  # the H200's boxes (in a 40 x 10 tensor then): at byte -20, 8, 36, 64 of a row


@pytest.mark.parametrize("n", [2, 4])
def test_tensor_multicast_band(n):
    m = corpus_module(E.NAME, "sm_90a.O3")
    k = 2
    H = 8 * n * k - 5
    x = rng.integers(-1000, 1000, (H, 32)).astype(np.float32)
    tmap = tensor_map(to_device(x, device=DEVICE), np.float32, (32, H), (32 * 4,), (32, 8))
    out = np.full((n * k, 2048), -1, np.float32)
    m.kernel("tma_multicast_band").launch(grid=(n * k,), block=(128,), args=[tmap, out], cluster=(n, 1, 1),
                                          device=DEVICE)
    padded = np.zeros((8 * n * k, 32), np.float32)
    padded[:H] = x
    for b in range(n * k):
        rank, cid = b % n, b // n
        want = padded[8 * n * cid: 8 * n * (cid + 1)].reshape(-1) * (rank + 1)
        np.testing.assert_array_equal(out[b, : 256 * n], want)
        assert (out[b, 256 * n:] == -1).all()


@pytest.mark.parametrize("mask", [0b1010, 0b0111])
def test_bulk_multicast_mask(mask):
    m = corpus_module(E.NAME, "sm_90a.O3")
    n, k = 4, 2
    inp = rng.standard_normal(1024 * k).astype(np.float32)
    out = np.full((n * k, 1024), -5, np.float32)
    m.kernel("bulk_multicast_mask").launch(grid=(n * k,), block=(128,), args=[inp, out, np.uint32(mask)],
                                           cluster=(n, 1, 1), device=DEVICE)
    for b in range(n * k):
        rank, cid = b % n, b // n
        want = inp[1024 * cid: 1024 * (cid + 1)] + np.float32(rank) if mask >> rank & 1 else np.full(1024, -5)
        np.testing.assert_array_equal(out[b], want)


# ------------------------------------------------------------------ cases, each run in a process of its own

def _reduce_launch(op, dt, init, src, device, x0=E.X0, y0=E.Y0, dx=E.DX):
    m = corpus_module(E.NAME, "sm_90a.O3")
    buf = to_device(init, device=device)
    tmap = tensor_map(buf, dt, (E.W, E.H), (E.W * dt.itemsize,), E.BOX)
    nbytes = E.BOX[0] * E.BOX[1] * dt.itemsize
    args = [tmap, src.view(np.uint8).reshape(-1)] + [E._u32(v) for v in (nbytes, x0, y0, dx, E.DY)]
    m.kernel(f"tma_reduce_{op}").launch(grid=(E.K,), block=(128,), args=args, device=device)
    return buf.to_host().view(f"u{dt.itemsize}")


def case_reduce(op, type_name, geometry=None):
    """The GPU's result equals numpy's and the emulator's, bit for bit."""
    dt = E._dtype(type_name)
    init = E._values(op, dt, (E.H, E.W))
    src = E._values(op, dt, (E.K, E.BOX[1], E.BOX[0]))
    g = geometry or {}
    got = {device: _reduce_launch(op, dt, init, src, device, **g) for device in ("emu", DEVICE)}
    np.testing.assert_array_equal(got[DEVICE], E._reference(op, init, src, **g).view(f"u{dt.itemsize}"))
    np.testing.assert_array_equal(got["emu"], got[DEVICE])


def case_reduce_unaligned():
    """tma_reduce_add on f32 with the boxes of the H200 run; expected to stop with an illegal instruction."""
    dt = np.dtype(np.float32)
    init = E._values("add", dt, (E.H, E.W))
    src = E._values("add", dt, (E.K, E.BOX[1], E.BOX[0]))
    got = _reduce_launch("add", dt, init, src, DEVICE, **UNALIGNED)
    print(f"the GPU ran it without a fault; {int((got != init.view(np.uint32)).sum())} elements changed")


def case_im2col(shape, s):
    """The driver's im2col map and the GPU's traversal give numpy's convolution patches, as the emulator does."""
    m = corpus_module(E.NAME, "sm_90a.O3")
    N, H, W = shape
    C = 16
    x = rng.integers(-99, 99, (N, H, W, C)).astype(np.float32)
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    blocks = -(-N * OH * OW // 32)
    got = {}
    for device in ("emu", DEVICE):
        tmap = tensor_map_im2col(to_device(x, device=device), np.float32, (C, W, H, N),
                                 (C * 4, W * C * 4, H * W * C * 4), (-1, -1), (-1, -1), C, 32,
                                 element_strides=(1, s, s, 1))
        out = np.full((blocks, 9, 32, C), np.nan, np.float32)
        m.kernel("tma_im2col_conv3x3").launch(grid=(blocks,), block=(128,),
                                              args=[tmap, out, np.uint32(OH), np.uint32(OW), np.uint32(s)],
                                              device=device)
        got[device] = out
    np.testing.assert_array_equal(got[DEVICE], E._conv_patches(x, OH, OW, s, blocks))
    np.testing.assert_array_equal(got["emu"], got[DEVICE])


CASES = {"reduce": case_reduce, "reduce_unaligned": case_reduce_unaligned, "im2col": case_im2col}
DONE = "CASE DONE"


def _isolated(case, *args):
    """Run CASES[case](*args) in a fresh Python process; record and return (outcome, output)."""
    name = " ".join([case, *(json.dumps(a) for a in args)])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])))
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, __file__, case, json.dumps(args)], capture_output=True, text=True,
                           timeout=CASE_TIMEOUT_S, env=env, cwd=REPO)
        out = r.stdout + r.stderr
        fault = re.search(r"CUDA_ERROR_[A-Z_]+", out)
        outcome = "passed" if r.returncode == 0 and DONE in out else f"fault {fault[0]}" if fault else \
            "wrong result" if "AssertionError" in out else f"failed (exit {r.returncode})"
    except subprocess.TimeoutExpired as e:
        out = f"{e.stdout or ''}{e.stderr or ''}"
        outcome = f"timeout ({CASE_TIMEOUT_S} s)"
    last = "" if outcome == "passed" else next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip()), "")
    record = os.environ.get("PTXFORGE_GPU_CASES") or str(Path(tempfile.gettempdir()) / "ptxforge-gpu-cases.tsv")
    with open(record, "a") as f:
        f.write(f"{Path(__file__).name} {name}\t{outcome}\t{time.monotonic() - t0:.1f}\t{last[:300]}\n")
    return outcome, out


def _expect_pass(case, *args):
    outcome, out = _isolated(case, *args)
    assert outcome == "passed", f"{case} {args}: {outcome}\n{out[-3000:]}"


@pytest.mark.parametrize("op, type_name", E.REDUCE_CASES)
def test_tensor_reduce(op, type_name):
    _expect_pass("reduce", op, type_name)


def test_tensor_reduce_boxes_starting_before_the_tensor():
    """Negative (16-byte-aligned) start coordinates: the elements before the tensor are skipped."""
    _expect_pass("reduce", "add", "float32", E.BEFORE)


@pytest.mark.parametrize("shape, s", IM2COL_CASES)
def test_im2col_conv_patches(shape, s):
    _expect_pass("im2col", list(shape), s)


def test_tensor_reduce_box_off_16_bytes_stops_the_gpu():
    """The boxes of the H200 run (dimension-0 starts off 16-byte boundaries) stop the GPU with an illegal
    instruction, in a process of its own, and the emulator refuses them with the same cause."""
    outcome, out = _isolated("reduce_unaligned")
    assert outcome == "fault CUDA_ERROR_ILLEGAL_INSTRUCTION", f"{outcome}\n{out[-3000:]}"
    dt = np.dtype(np.float32)
    with pytest.raises(MemoryFault, match=r"not a multiple of 16 bytes.*CUDA_ERROR_ILLEGAL_INSTRUCTION"):
        _reduce_launch("add", dt, np.zeros((E.H, E.W), dt), np.zeros((E.K, E.BOX[1], E.BOX[0]), dt), "emu",
                       **UNALIGNED)


def test_bulk_copy_and_reduce_into_other_ctas():
    m = corpus_module(E.NAME, "sm_90a.O3")
    n, k = 4, 2
    inp = rng.integers(0, 1 << 32, (n * k, 256), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((n * k, 512), np.uint32)
    m.kernel("dsmem_bulk_ring").launch(grid=(n * k,), block=(128,), args=[inp, out], cluster=(n, 1, 1),
                                       device=DEVICE)
    for b in range(n * k):
        rank, first = b % n, b - b % n
        np.testing.assert_array_equal(out[b, :256], inp[first + (rank - 1) % n])
        total = inp[first: first + n].sum(0, dtype=np.uint32) if rank == 0 else np.zeros(256, np.uint32)
        np.testing.assert_array_equal(out[b, 256:], total)


if __name__ == "__main__":  # one case: python THIS_FILE CASE '[ARGS...]'
    CASES[sys.argv[1]](*json.loads(sys.argv[2]))
    print(DONE)
