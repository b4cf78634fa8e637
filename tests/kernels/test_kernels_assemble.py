"""Every kernel in ptxforge.kernels is PTX that ptxas accepts for its target (so it can launch on a GPU)."""

import shutil

import pytest

from ptxforge.kernels import fp8, layout, routing


def _have_ptxas() -> bool:
    try:
        from ptxforge.toolchain import find_tool

        find_tool("ptxas")
        return True
    except Exception:
        return shutil.which("ptxas") is not None


KERNELS = [fp8.per_token_quant, fp8.per_token_quant_pow2, fp8.dequant, fp8.dequant_ue8m0, fp8.block_quant,
           fp8.block_quant_pow2, routing.route, routing.route.specialize(E=64, N_GROUP=4, TOPK_GROUP=2, TOPK=6),
           layout.dispatch_layout, layout.expert_positions, layout.gather_rows, layout.unpermute,
           layout.unpermute_unweighted]


@pytest.mark.skipif(not _have_ptxas(), reason="ptxas not found (install the tools extra)")
@pytest.mark.parametrize("k", KERNELS, ids=lambda k: k.name)
def test_ptxas_accepts(k):
    from ptxforge.toolchain import assemble

    res = assemble(k.ptx(), k.arch)
    assert res.ok, f"ptxas -arch={k.arch} rejected {k.name}:\n{res.stderr}"
