"""wmma (the nvcuda::wmma API): load, mma and store from real nvcc output.

data/wmma.sm_80.O3.ptx is `nvcc -ptx -O3 -arch=sm_80 data/wmma.cu` (nvcc 13.0); the corpus has no wmma user.
"""

from pathlib import Path

import numpy as np

import ptxforge as pf
from ptxforge.emu.semantics.mma import dot_tensor_core

DATA = Path(__file__).resolve().parent / "data"


def test_wmma_f16_f32():
    m = pf.parse((DATA / "wmma.sm_80.O3.ptx").read_text(), filename="wmma.sm_80.O3.ptx")
    rng = np.random.default_rng(9)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    C = rng.standard_normal((16, 16)).astype(np.float32)
    # the tensor cores' summation, as mma.sync (wmma runs on the same units)
    ref = dot_tensor_core(A.astype(np.float64), B.astype(np.float64), C.astype(np.float64)).astype(np.uint32)
    ref = ref.view(np.float32)
    m.kernel("wmma_f16").launch(grid=1, block=32, args=[A, np.ascontiguousarray(B.T), C])  # B col-major
    np.testing.assert_array_equal(C, ref)
