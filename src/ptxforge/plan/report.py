"""What the planner prints: the summary table, the derivation in words, and the JSON object."""

from __future__ import annotations

from dataclasses import asdict

from ptxforge.plan.model import Plan
from ptxforge.plan.traffic import NVLINK, Phase

_NAMES = {NVLINK: "NVLink", "ib": "IB", "roce": "RoCE", "efa": "EFA"}


def link_name(k: str) -> str:
    return _NAMES.get(k, k)


def _mb(x: float) -> str:
    return f"{x / 1e6:,.1f} MB"


def derivation(res: Plan) -> list[str]:
    """The derivation of each number, in words."""
    p = res.params
    out = []
    for ph in (res.dispatch, res.combine):
        out += _phase_words(res, ph)
    s = res.sms
    row = res.row(s)
    comp = res.compute
    out.append(f"GEMMs: experts {comp.expert_flops / 1e12:.2f} TFLOP ({p.expert_dtype.upper()}) + attention "
               f"{comp.attention_flops / 1e12:.2f} TFLOP ({p.attention_dtype.upper()}) per layer and micro-batch "
               f"take {comp.expert_us_full + comp.attention_us_full:,.0f} us on all {p.sms_per_gpu} SMs; on the "
               f"{p.sms_per_gpu - s} left by {s} communication SMs {row.compute_us:,.0f} us "
               f"({100 * res.compute_slowdown:.0f}% slower).")
    comm = row.dispatch_us + row.combine_us
    r = p.backward_ratio
    verdict = "hidden" if row.hidden else "NOT hidden"
    out.append(f"Overlap: in DualPipe's forward&backward chunk the GEMMs take (1 + {r:g}) x {row.compute_us:,.0f} = "
               f"{(1 + r) * row.compute_us:,.0f} us and dispatch+combine of both halves 2 x {comm:,.0f} = "
               f"{2 * comm:,.0f} us: communication is {verdict} at {s} SMs.")
    best = res.row(res.best_sms) if res.best_sms is not None else None
    if best is not None and best.step_us is not None and row.step_us is not None:  # a plan with overlap
        out.append(f"Step: DualPipe, PP={p.pp}, {p.micro_batches} micro-batches, {p.layers_per_stage} layers per "
                   f"stage: {row.step_us / 1e3:,.1f} ms at {s} SMs; shortest {best.step_us / 1e3:,.1f} ms at "
                   f"best_sms={res.best_sms}.")
    nvl_copies = p.node_copies * min(p.experts_per_node, p.gpus_per_node)
    if res.routing is None and nvl_copies > p.top_k + 1e-9:
        out.append(f"Note: {p.node_copies:g} nodes x {p.experts_per_node:g} experts per node = {nvl_copies:g} NVLink "
                   f"copies per token, more than top_k = {p.top_k}: the report's 3.2 is a capacity figure (that "
                   f"many experts per node cost no more NVLink time than the IB hop), not what top-{p.top_k} "
                   f"routing sends (at most {p.top_k / p.node_copies:g} per node; --scores random measures it).")
    v2 = res.v2
    out.append(f"DeepEP V2's closed form (balanced gate, {p.tma_read_gbs:g}/{p.tma_write_gbs:g} GB/s read/write "
               f"per SM, x1.25, even, >= 4) gives {v2.sms} SMs ({v2.sms_exact:.1f} before its factor).")
    return out


def _phase_words(res: Plan, ph: Phase) -> list[str]:
    p = res.params
    lines = []
    per_token = f"{ph.bytes_per_copy:,} B"
    for k in ph.link_bytes:
        lines.append(f"{ph.name}: {link_name(k)} carries {ph.copies[k]:.2f} copies x {per_token} x {p.tokens:,} "
                     f"tokens{_imb(p)} = {_mb(ph.link_bytes[k])} per micro-batch; at {ph.link_gbs[k]:g} GB/s that "
                     f"is {ph.link_us[k]:,.0f} us.")
    if len(ph.link_bytes) > 1:
        so = p.scaleout_name
        lines.append(f"{ph.name}: NVLink/{link_name(so)} bandwidth ratio {p.nvlink_gbs / p.scaleout_gbs:.1f}, "
                     f"time ratio {link_name(so)}/NVLink {ph.link_us[so] / ph.link_us[NVLINK]:.2f}; "
                     f"{link_name(ph.bound_link)} bounds it.")
    roles = "; ".join(f"{r.name} reads {_mb(r.read_bytes)}, writes {_mb(r.write_bytes)}" for r in ph.roles)
    lines.append(f"{ph.name}: the SMs copy {_mb(ph.read_bytes)} in and {_mb(ph.write_bytes)} out ({roles}).")
    layout = ("each half of the SMs runs its own roles, so the busier half sets the pace"
              if p.sm_layout == "paired" else "every SM shares all roles")
    lines.append(f"{ph.name}: one SM reads {p.sm_read_gbs:g} GB/s and writes {p.sm_write_gbs:g} GB/s "
                 f"({p.copy_engine}); {layout}: {ph.sm_us(p):,.0f} SM-us of copying in "
                 f"{ph.link_time_us:,.0f} us, so {ph.sms_exact(p):.1f} SMs keep {link_name(ph.bound_link)} saturated.")
    return lines


def _imb(p) -> str:
    return f" x {p.imbalance:.2f} imbalance" if p.imbalance != 1 else ""


def table(res: Plan) -> str:
    """Summary and the per-budget table."""
    p = res.params
    head = [f"sms {res.sms} (exact {res.sms_exact:.1f}), best_sms {res.best_sms}, bottleneck "
            f"{link_name(res.bottleneck)}, compute slowdown at sms {100 * res.compute_slowdown:.0f}%",
            f"comparison: DeepEP V2's kernel on this cluster (direct writes, {p.tma_read_gbs:g}/{p.tma_write_gbs:g} "
            f"GB/s TMA per SM): {res.v2_kernel_sms} SMs; DeepEP V2's closed form: {res.v2.sms} SMs"]
    if not res.saturable:
        head.insert(1, f"warning: saturating {link_name(res.bottleneck)} would take {res.sms_exact:.1f} SMs, more than "
                       f"the GPU can spare; sms is capped at {res.sms}")
    links = list(res.dispatch.link_bytes)
    cols = ["SMs", "compute us", "dispatch us", "combine us", *(f"{link_name(k)} util" for k in links),
            "hidden", "step ms"]
    body = []
    for r in res.rows:
        mark = "*" if r.sms == res.sms else ""
        mark += "<" if r.sms == res.best_sms else ""
        body.append([f"{r.sms}{mark}", f"{r.compute_us:,.0f}", f"{r.dispatch_us:,.0f}", f"{r.combine_us:,.0f}",
                     *(f"{100 * r.utilization[k]:.0f}%" for k in links), "yes" if r.hidden else "no",
                     "" if r.step_us is None else f"{r.step_us / 1e3:,.1f}"])
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    lines = head + ["", "  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    lines.append(f"(* sms: smallest budget that saturates {link_name(res.bottleneck)}; < best_sms: shortest step; "
                 f"times per layer and micro-batch, step for {p.pp} stages)")
    return "\n".join(lines)


def to_dict(res: Plan, preset: str | None = None) -> dict:
    """The JSON object of `ptxforge plan --json`."""
    p = res.params
    row = res.row(res.sms)

    def phase(ph: Phase) -> dict:
        return {"bytes_per_copy": ph.bytes_per_copy, "copies": ph.copies, "link_bytes": ph.link_bytes,
                "link_us": ph.link_us, "bound_link": ph.bound_link, "sm_read_bytes": ph.read_bytes,
                "sm_write_bytes": ph.write_bytes, "sms_exact": ph.sms_exact(p), "latency_us": ph.latency_us}

    return {
        "preset": preset, "sms": res.sms, "sms_exact": res.sms_exact, "best_sms": res.best_sms,
        "bottleneck": res.bottleneck, "dispatch_us": row.dispatch_us, "combine_us": row.combine_us,
        "compute_us": row.compute_us, "compute_slowdown": res.compute_slowdown, "hidden": row.hidden,
        "saturable": res.saturable,
        "step_us": row.step_us,
        "best_step_us": res.row(res.best_sms).step_us if res.best_sms is not None else None,
        "nvlink_scaleout_bandwidth_ratio": p.nvlink_gbs / p.scaleout_gbs if p.nodes > 1 else None,
        "dispatch": phase(res.dispatch), "combine": phase(res.combine),
        "deepep_v2_closed_form_sms": res.v2.sms, "deepep_v2_kernel_sms": res.v2_kernel_sms,
        "budgets": [{"sms": r.sms, "compute_us": r.compute_us, "dispatch_us": r.dispatch_us,
                     "combine_us": r.combine_us, "utilization": r.utilization, "hidden": r.hidden,
                     "step_us": r.step_us} for r in res.rows],
        "routing": res.routing.as_dict() if res.routing is not None else None,
        "params": asdict(p),
        "derivation": derivation(res),
    }
