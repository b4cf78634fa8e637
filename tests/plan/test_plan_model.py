"""The cost model: preset numbers, monotonicity, byte counts, and the DualPipe overlap."""

from __future__ import annotations

import math

import pytest

from ptxforge.plan import PRESETS, Params, plan, preset, traffic
from ptxforge.plan.deepep_v2 import expected_topk, v2_num_sms
from ptxforge.plan.params import PARAM_NAMES
from ptxforge.plan.presets import SOURCES_V3


def quick(p: Params):
    return plan(p, overlap=False)


def test_deepseek_v3_h800_needs_16_to_24_sms_bounded_by_ib():
    res = plan(preset("deepseek-v3-h800"))
    assert 16 <= res.sms <= 24
    assert res.bottleneck == "ib"
    p = res.params
    assert p.nvlink_gbs / p.scaleout_gbs == pytest.approx(3.2)
    # the report's design point: 3.2 NVLink copies per IB copy make both links take the same time
    d = res.dispatch
    assert d.copies["nvlink"] / d.copies["ib"] == pytest.approx(3.2)
    assert d.link_us["ib"] == pytest.approx(d.link_us["nvlink"])
    # IB time from first principles: 4 nodes x 7/8 remote x 7,464 B x 4,096 tokens at 50 GB/s
    assert d.link_us["ib"] == pytest.approx(4 * 7 / 8 * 7464 * 4096 / 50e3)
    assert res.sms_exact == pytest.approx(23.3, abs=0.05)
    assert res.best_sms is not None and res.row(res.sms).hidden
    assert res.compute_slowdown == pytest.approx(132 / (132 - res.sms) - 1)


def test_deepep_v2_assumptions_give_4_to_6_sms():
    res = plan(preset("deepep-v2"))
    assert 4 <= res.sms <= 6
    assert res.bottleneck == "ib"
    assert 4 <= res.v2.sms <= 6
    # same cluster, same links: only the kernel (per-SM rates, copy structure) differs
    v1 = plan(preset("deepseek-v3-h800"))
    assert res.dispatch.link_us == pytest.approx(v1.dispatch.link_us)
    assert res.dispatch.write_bytes < v1.dispatch.write_bytes / 2


def test_v2_closed_form():
    assert expected_topk(256, 8, 256) == pytest.approx(8)
    assert expected_topk(256, 8, 1) == pytest.approx(1)
    est = v2_num_sms(256, 8, 8, 8, 50, 160, 132)
    assert est.bound == "scaleout" and est.sms == 4
    assert v2_num_sms(256, 8, 4, 8, 50, 160, 132).sms == 6
    assert v2_num_sms(256, 8, 1, 8, 0, 160, 132).bound == "nvlink"


@pytest.mark.parametrize("name,lo,hi,bound", [("deepseek-v3-h800", 16, 24, "ib"), ("deepep-v2", 4, 6, "ib"),
                                              ("h200", 16, 24, "ib"), ("b200", 16, 24, "ib")])
def test_each_preset(name, lo, hi, bound):
    res = plan(preset(name))
    assert lo <= res.sms <= hi and res.bottleneck == bound
    assert res.sms % 2 == 0
    assert res.best_sms in [r.sms for r in res.rows]
    assert min(r.step_us for r in res.rows) == res.row(res.best_sms).step_us


@pytest.mark.parametrize("name,sms,exact,v2", [("deepseek-v3-h800", 24, 23.30, 6), ("deepep-v2", 6, 5.09, 6),
                                               ("h200", 24, 23.30, 6), ("b200", 24, 23.94, 12)])
def test_preset_figures(name, sms, exact, v2):
    res = quick(preset(name))
    assert (res.sms, round(res.sms_exact, 2), res.v2_kernel_sms) == (sms, exact, v2)


def test_h200_has_nvlink_to_spare():
    res = quick(preset("h200"))
    util = res.row(res.sms).utilization
    assert util["ib"] == pytest.approx(1.0, abs=0.01)
    assert util["nvlink"] == pytest.approx(3.2 * 50 / 450 / (3.2 * 50 / 160), rel=0.01)  # 160/450


def test_every_figure_has_a_source():
    assert set(SOURCES_V3) == set(PARAM_NAMES)
    for p in PRESETS.values():
        for k in p.changes:
            assert p.source(k)


def test_faster_ib_needs_more_sms():
    base = preset("deepseek-v3-h800", experts_per_node=2.0)
    sms = [quick(base.with_(scaleout_gbs=g)).sms_exact for g in (25, 50, 100, 200)]
    assert sms == sorted(sms) and sms[0] < sms[-1]


def test_more_tokens_never_fewer_sms():
    for name in PRESETS:
        sms = [quick(preset(name, tokens=t)).sms for t in (256, 1024, 4096, 16384)]
        assert sms == sorted(sms), (name, sms)


def test_fp8_halves_dispatch_bytes():
    fp8 = preset("deepseek-v3-h800", meta_bytes=0, scale_format="ue8m0")
    bf16 = fp8.with_(dispatch_dtype="bf16")
    assert bf16.dispatch_bytes_per_copy == 2 * 7168
    # FP8 values are half; the scales add 1/128 of a byte per value (ue8m0) or 4/128 (fp32)
    assert fp8.dispatch_bytes_per_copy == 7168 + 56
    assert fp8.with_(scale_format="fp32").dispatch_bytes_per_copy == 7168 + 224
    d8, d16 = traffic.dispatch(fp8), traffic.dispatch(bf16)
    assert d8.link_bytes["ib"] / d16.link_bytes["ib"] == pytest.approx((7168 + 56) / (2 * 7168))
    assert traffic.combine(fp8).link_bytes == traffic.combine(bf16).link_bytes  # combine stays BF16


def test_slower_sm_copies_need_more_sms():
    base = preset("deepseek-v3-h800")
    assert quick(base.with_(ldst_read_gbs=10.3, ldst_write_gbs=10.3)).sms_exact == pytest.approx(
        2 * quick(base).sms_exact)


def test_paired_layout_costs_more_than_pooled():
    base = preset("deepseek-v3-h800")
    assert quick(base.with_(sm_layout="pooled")).sms_exact < quick(base).sms_exact


def test_single_node_has_no_scaleout():
    res = quick(preset("deepseek-v3-h800", nodes=1, experts=32, experts_per_node=5.3))
    assert res.bottleneck == "nvlink"
    assert set(res.dispatch.link_bytes) == {"nvlink"}


def test_communication_hidden_only_with_enough_compute():
    # tiny GEMMs: communication can no longer hide behind them
    res = plan(preset("deepseek-v3-h800", expert_us=100.0, attention_us=100.0))
    assert not any(r.hidden for r in res.rows)
    assert res.best_sms >= res.sms  # then the fastest step saturates the link
    res = plan(preset("deepseek-v3-h800", expert_us=50_000.0, attention_us=50_000.0))
    assert res.row(res.sms).hidden
    assert res.best_sms < res.sms  # with comm hidden, giving SMs back to GEMMs wins


def test_measured_gemm_time_replaces_roofline():
    res = quick(preset("deepseek-v3-h800", expert_us=1000.0, attention_us=500.0))
    assert res.row(res.sms).compute_us == pytest.approx(1500 * 132 / (132 - res.sms))


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="copy_engine"):
        Params(copy_engine="dma")
    with pytest.raises(ValueError, match="micro_batches"):
        Params(micro_batches=8)
    with pytest.raises(ValueError, match="experts"):
        Params(experts=100)
    with pytest.raises(KeyError, match="deepseek-v3-h800"):
        preset("a100")


def test_sms_rounded_to_granularity():
    res = quick(preset("deepseek-v3-h800"))
    assert res.sms == 2 * math.ceil(res.sms_exact / 2)


def test_faster_ib_moves_the_bottleneck_to_nvlink_at_the_design_point():
    res = quick(preset("deepseek-v3-h800", scaleout_gbs=100.0))
    assert res.bottleneck == "nvlink"
    assert res.sms == quick(preset("deepseek-v3-h800")).sms  # NVLink now binds: no more SMs help


def test_unsaturable_link_is_flagged():
    res = quick(preset("deepseek-v3-h800", ldst_read_gbs=1.0, ldst_write_gbs=1.0))
    assert not res.saturable and res.sms == 130
    assert quick(preset("deepseek-v3-h800")).saturable


def test_the_plot_needs_a_plan_with_overlap(tmp_path):
    from ptxforge.plan.plot import to_png

    with pytest.raises(ValueError, match="make the plan with overlap=True"):
        to_png(plan(preset("deepseek-v3-h800"), overlap=False), tmp_path / "p.png")
    assert list(tmp_path.iterdir()) == []
