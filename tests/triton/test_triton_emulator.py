"""Unmodified @triton.jit kernels launched as `kernel[grid](...)` on CPU tensors run on the emulator."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Triton front door takes torch tensors (the torch extra)")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'ptxforge[triton]')")

from triton_kernels import (  # noqa: E402
    add_kernel,
    add_kernel_bad_mask,
    dropout_kernel,
    layer_norm_fwd_kernel,
    locked_partial_sum_kernel,
    matmul_kernel,
    racy_shift_kernel,
    softmax_kernel,
    uniform_kernel,
)

import ptxforge as pf  # noqa: E402
import ptxforge.triton  # noqa: E402

KERNELS = Path(__file__).parent / "triton_kernels.py"


def line_of(marker: str) -> int:
    return next(i for i, text in enumerate(KERNELS.read_text().splitlines(), 1) if marker in text)


def test_vector_add_equals_torch():
    torch.manual_seed(0)
    x, y = torch.rand(1000), torch.rand(1000)
    out = torch.empty(1000)
    with ptxforge.triton.emulate():
        add_kernel[(triton.cdiv(1000, 256),)](x, y, out, 1000, BLOCK=256)
    assert torch.equal(out, x + y)


def test_fused_softmax_equals_torch():
    torch.manual_seed(1)
    x = torch.randn(7, 100)
    out = torch.empty_like(x)
    with ptxforge.triton.emulate():
        softmax_kernel[(4,)](out, x, x.stride(0), out.stride(0), 7, 100, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), atol=1e-6, rtol=1e-5)


def test_matmul_equals_torch():
    torch.manual_seed(2)
    a, b = torch.randn(64, 48, dtype=torch.float16), torch.randn(48, 80, dtype=torch.float16)
    c = torch.empty(64, 80, dtype=torch.float16)
    with ptxforge.triton.emulate(arch="sm_90a"):
        matmul_kernel[(triton.cdiv(64, 32) * triton.cdiv(80, 32),)](
            a, b, c, 64, 80, 48, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2)
    # fp32 accumulation in another order than torch's, then one fp16 rounding: within an fp16 ulp or two
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=2e-2, rtol=2e-3)


def test_fp8_matmul_with_a_transposed_operand_equals_torch():
    # the matmul tutorial's fp8 check: e5m2 operands, B a transposed (column-major) view, fp32 accumulation;
    # e5m2 products are exact in fp32, and on this seeded data the fp32 sums agree with torch's after the fp16 rounding
    torch.manual_seed(5)
    a = torch.randn(64, 64, dtype=torch.float16).to(torch.float8_e5m2)
    b = torch.randn(96, 64, dtype=torch.float16).T.to(torch.float8_e5m2)  # strides (1, 64)
    c = torch.empty(64, 96, dtype=torch.float16)
    with ptxforge.triton.emulate(arch="sm_90a"):
        matmul_kernel[(triton.cdiv(64, 32) * triton.cdiv(96, 32),)](
            a, b, c, 64, 96, 64, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)
    assert b.stride() == (1, 64)
    assert torch.equal(c, (a.float() @ b.float()).half())


def test_low_memory_dropout_keeps_scaled_values_by_seed():
    torch.manual_seed(3)
    x = torch.randn(1000)
    first, again, other = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    with ptxforge.triton.emulate():
        dropout_kernel[(4,)](x, first, 1000, 0.5, 123, BLOCK=256)
        dropout_kernel[(4,)](x, again, 1000, 0.5, 123, BLOCK=256)
        dropout_kernel[(4,)](x, other, 1000, 0.5, 7, BLOCK=256)
    kept = first != 0
    assert 0.4 < kept.float().mean().item() < 0.6
    torch.testing.assert_close(first[kept], x[kept] * 2)
    assert torch.equal(first, again) and not torch.equal(first, other)  # the mask is the seed's, not stored


def philox_uniform(seed: int, offsets: np.ndarray) -> np.ndarray:
    """tl.rand(seed, offsets) written out: Philox-4x32 with 10 rounds on (offset, 0, 0, 0), key (seed lo, seed hi),
    the first word mapped to [0, 1) as Triton maps an int32 (|x| of the signed word, times 2**-31)."""
    u32 = np.uint64(0xFFFFFFFF)
    c0, c1, c2, c3 = (offsets.astype(np.uint64) & u32, *(np.zeros(offsets.shape, np.uint64) for _ in range(3)))
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    ra, rb = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        a0, a2 = c0, c2
        c0 = ((rb * a2) >> np.uint64(32)) ^ c1 ^ k0
        c2 = ((ra * a0) >> np.uint64(32)) ^ c3 ^ k1
        c1, c3 = (rb * a2) & u32, (ra * a0) & u32
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & u32, (k1 + np.uint64(0xBB67AE85)) & u32
    x = c0.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * np.float32(4.6566127342e-10)).astype(np.float32)


def test_tl_rand_is_bit_exact_philox():
    # the low-memory-dropout tutorial's mask is this stream: a wrong multiply-high or key schedule would still
    # pass a "about half kept" check, so compare every bit with Philox written out in numpy
    n = 3000
    out = torch.empty(n)
    with ptxforge.triton.emulate():
        uniform_kernel[(triton.cdiv(n, 1024),)](out, n, 123, BLOCK=1024)
        again = torch.empty(n)
        uniform_kernel[(triton.cdiv(n, 1024),)](again, n, 2**40 + 7, BLOCK=1024)  # a seed with a high word
    assert np.array_equal(out.numpy(), philox_uniform(123, np.arange(n)))
    assert np.array_equal(again.numpy(), philox_uniform(2**40 + 7, np.arange(n)))


def test_spin_locked_partial_sums_across_resident_blocks():
    # the layer-norm tutorial's backward: 300 rows take 12 locks while many blocks are resident at once;
    # one lost or doubled update would change an integer sum
    rows, n, group = 300, 200, 12
    x = torch.randint(-1000, 1000, (rows, n), dtype=torch.int32)
    partial = torch.full((group, n), 12345, dtype=torch.int32)  # garbage: the first row of a group stores
    locks = torch.zeros(2 * group, dtype=torch.int32)
    with ptxforge.triton.emulate():
        locked_partial_sum_kernel[(rows,)](x, partial, locks, n, GROUP=group, BLOCK=256, num_warps=4)
    assert torch.equal(partial, torch.stack([x[g::group].sum(0, dtype=torch.int32) for g in range(group)]))
    assert torch.equal(locks[:group], torch.zeros(group, dtype=torch.int32))  # every lock given back
    assert torch.equal(locks[group:], torch.ones(group, dtype=torch.int32))


def test_layer_norm_forward_equals_torch():
    torch.manual_seed(4)
    m, n = 5, 300
    x, w, b = torch.randn(m, n), torch.randn(n), torch.randn(n)
    y, mean, rstd = torch.empty_like(x), torch.empty(m), torch.empty(m)
    with ptxforge.triton.emulate():
        layer_norm_fwd_kernel[(m,)](x, y, w, b, mean, rstd, x.stride(0), n, 1e-5, BLOCK=128)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean, x.mean(dim=1))


def test_planted_out_of_bounds_mask_is_reported_with_the_py_line():
    x, y, out = torch.rand(1000), torch.rand(1000), torch.zeros(1000)
    with ptxforge.triton.emulate(sanitize=True), pytest.raises(pf.SanitizerError) as e:
        add_kernel_bad_mask[(4,)](x, y, out, 1000, BLOCK=256)
    kinds = {(r.kind, r.access) for r in e.value.reports}
    assert kinds == {("out-of-bounds", "read"), ("out-of-bounds", "write")}
    text = str(e.value)
    store = line_of("mask = offsets <= n") + 3  # the bad kernel's store
    assert f"triton_kernels.py:{store}" in text
    assert "0 bytes after the end of out_ptr (fp32 tensor) (4000 bytes)" in text
    assert f"kernel launched from {__file__}:" in text
    torch.testing.assert_close(out, x + y)  # the in-bounds work came back


def test_planted_race_is_reported_with_both_py_lines():
    x = torch.arange(512.0)
    with ptxforge.triton.emulate(sanitize=True), pytest.raises(pf.SanitizerError) as e:
        racy_shift_kernel[(4,)](x, 512, BLOCK=128)
    race = next(r for r in e.value.reports if r.kind == "race")
    assert race.source.endswith(f"triton_kernels.py:{line_of('tl.store(x_ptr + offsets, nxt')}")
    assert race.other["source"].endswith(f"triton_kernels.py:{line_of('nxt = tl.load(x_ptr + offsets + BLOCK')}")


def test_aliased_views_share_device_memory():
    base = torch.arange(16.0)
    with ptxforge.triton.emulate():
        add_kernel[(1,)](base[:8], base[8:], base[:8], 8, BLOCK=8)  # out aliases x: one storage, one copy
    assert torch.equal(base[:8], torch.arange(8.0) + torch.arange(8.0, 16.0))


def test_emulate_is_scoped_and_refuses_a_bad_arch():
    assert not ptxforge.triton.enabled()
    with ptxforge.triton.emulate():
        assert ptxforge.triton.enabled()
    assert not ptxforge.triton.enabled()
    with pytest.raises(ValueError, match="arch 'hopper'"), ptxforge.triton.emulate(arch="hopper"):
        pass


def _run_script(tmp_path, head: str, argv: list[str], **env_changes):
    script = tmp_path / "script.py"
    script.write_text(head + "import sys, torch\n"
                      f"sys.path.insert(0, {str(KERNELS.parent)!r})\n"
                      "from triton_kernels import add_kernel\n"
                      "x = torch.ones(64); out = torch.empty(64)\n"
                      "add_kernel[(1,)](x, x, out, 64, BLOCK=64)\n"
                      "print(int(out.sum()))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PTXFORGE_TRITON", None)
    env.update(env_changes)
    run = subprocess.run([sys.executable, *argv, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "128"


@pytest.mark.slow  # a fresh interpreter importing torch and triton: ~10 s
def test_python_m_ptxforge_triton_runs_a_script_that_never_imports_ptxforge(tmp_path):
    _run_script(tmp_path, "", ["-m", "ptxforge.triton"])


@pytest.mark.slow  # a fresh interpreter importing torch and triton: ~10 s
def test_environment_variable_switches_the_emulator_on(tmp_path):
    _run_script(tmp_path, "import ptxforge.triton\n", [], PTXFORGE_TRITON="1")


def test_compiled_kernel_reports_ptxas_registers_for_occupancy_sizing():
    # the fused-softmax tutorial sizes its grid by NUM_REGS // (n_regs * 32 * num_warps): n_regs must be real
    x = torch.randn(4, 100)
    out = torch.empty_like(x)
    with ptxforge.triton.emulate():
        compiled = softmax_kernel.warmup(out, x, x.stride(0), out.stride(0), 4, 100, BLOCK=128, grid=(1,))
        compiled._init_handles()
        props = triton.runtime.driver.active.utils.get_device_properties(0)
    assert 0 < compiled.n_regs <= 255
    assert props["max_shared_mem"] == 227 * 1024 and props["multiprocessor_count"] == 132
