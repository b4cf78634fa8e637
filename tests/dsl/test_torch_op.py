"""A DSL kernel as a torch custom op: eager, under torch.compile (CPU: the emulator), with a fake impl."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.dsl import DSLError, f32, guard, ld, mad, st, u32
from ptxforge.dsl import ptr as P

torch = pytest.importorskip("torch")
from ptxforge.dsl.torch_op import torch_op  # noqa: E402


@pf.kernel(arch="sm_80")
def vadd(a: P(f32), b: P(f32), c: P(f32), n: u32):
    from ptxforge.dsl import ctaid, ntid, tid

    i = mad(ctaid.x, ntid.x, tid.x)
    with guard(i < n):
        st(c[i], ld(a[i]) + ld(b[i]))


vadd_op = torch_op("ptxforge_test::vadd", vadd, inputs=["a", "b"], outputs={"c": lambda a, b: torch.empty_like(a)},
                   scalars={"n": lambda a, b: a.numel()}, grid=lambda a, b: ((a.numel() + 127) // 128,),
                   block=(128,))


def test_eager_on_the_emulator():
    a, b = torch.arange(300, dtype=torch.float32), torch.ones(300)
    assert torch.equal(vadd_op(a, b), a + 1)


def test_fake_impl_gives_shapes_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = vadd_op(torch.empty(1000), torch.empty(1000))
    assert out.shape == (1000,) and out.dtype == torch.float32
    torch.library.opcheck(vadd_op, (torch.randn(64), torch.randn(64)), test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("BACKEND", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_inside_torch_compile(BACKEND):
    """Between ops the backend compiles (inductor builds C++ kernels for them with the host compiler: slow)."""
    @torch.compile(fullgraph=True, backend=BACKEND)
    def f(x, y):
        return vadd_op(x * 2, y).sum() + 1

    x, y = torch.randn(256), torch.randn(256)
    np.testing.assert_allclose(f(x, y).item(), (x * 2 + y).sum().item() + 1, rtol=1e-5)


def test_inside_an_inductor_graph_as_its_extern_call():
    """Inductor traces the op through its fake impl and calls it from the compiled graph (no neighbours to
    build C++ kernels for: those are the slow test above)."""
    @torch.compile(fullgraph=True, backend="inductor")
    def f(x, y):
        return vadd_op(x, y)

    x, y = torch.randn(300), torch.randn(300)
    assert torch.equal(f(x, y), x + y)


def test_every_parameter_must_be_named():
    with pytest.raises(DSLError, match="missing n"):
        torch_op("ptxforge_test::bad", vadd, inputs=["a", "b"], outputs={"c": lambda a, b: a})
