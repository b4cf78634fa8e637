"""backend="kernels" on a GPU: 2 and 4 real processes share the one GPU (CUDA IPC between processes of one
device), run the communication kernels on their CUDA buffers with grids of num_sms = 2, 4 and 20 persistent
blocks (on a green context of at least num_sms SMs where the driver has them: Buffer.sm_budget()), and every
result (BF16 and FP8 dispatch, cached dispatch, combine with and without weights and bias, the handle's
fields) is bit-identical to the torch backend's on the same inputs."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no GPU", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ep"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ep_cuda_ranks  # noqa: E402
from kernel_cases import same, torch_rank  # noqa: E402

from ptxforge.ep.spawn import run_ranks  # noqa: E402

pytestmark = pytest.mark.gpu
PRELOAD = ("ep_checks", "kernel_cases", "ep_cuda_ranks")


@pytest.mark.parametrize("world", [2, 4])
def test_kernels_backend_on_one_gpu_is_bit_identical_to_torch(world):
    # forkserver, not fork: this process has initialized CUDA, which a forked child cannot use
    ref = run_ranks(torch_rank, world, timeout_s=60, start="forkserver", preload=PRELOAD)
    got = run_ranks(ep_cuda_ranks.kernels_cuda_rank, world, timeout_s=90, start="forkserver", preload=PRELOAD)
    for r in range(world):
        results, budgets = got[r]
        assert set(results) == set(ref[r])
        for key in ref[r]:
            same(ref[r][key], results[key], f"rank {r} of {world}, {key}")
        for num_sms, b in budgets.items():  # a green context where the driver has them, else it says why not
            print(f"rank {r} of {world}, num_sms {num_sms}: {b}")
            assert b["num_sms"] == num_sms and b["how"] in ("green context", "persistent grid"), b
            assert b["sms"] >= num_sms if b["how"] == "green context" else b["why"], b
