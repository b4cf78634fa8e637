"""Timeline pictures of a simulated step in the style of DeepSeek's DualPipe figure: one row per device,
forward cells orange, backward green (backward-for-input lighter), weight-gradient blue, an overlapped
forward & backward as an orange+green cell inside one black border; the micro-batch number in every cell.
The reverse/second-leg flow (module 1) is drawn in darker shades.

SVG is written by hand (no dependency); PNG uses matplotlib, imported only when asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from ptxforge import _optional
from ptxforge.pipeline.ops import FB, B, F, W

if TYPE_CHECKING:  # annotations only: the engine draws its results with this module
    from ptxforge.pipeline.engine import SimResult, Span

# (light, dark) per kind: module 0 / module 1
COLORS = {
    F: ("#F4B13E", "#D98E12"),
    B: ("#7AD151", "#4FA82A"),
    "Bin": ("#A9E48A", "#7CC45C"),
    W: ("#7EC3F2", "#3E97D6"),
}
LEGEND = [(F, "Forward"), (B, "Backward"), ("Bin", "Backward for input"), (W, "Backward for weights"),
          (FB, "Overlapped forward & backward")]


def _pieces(sp: Span, costs) -> list[tuple[float, float, str, int, int]]:
    """(x0, x1, color key, module, micro-batch) sub-cells of one span."""
    op = sp.op
    if op.kind == FB:
        total = sp.end - sp.start
        denom = costs.F + costs.B
        cut = sp.start + total * (costs.F / denom if denom else 0.5)
        return [(sp.start, cut, F, op.module, op.mb), (cut, sp.end, B, op.bmodule, op.bmb)]
    key = "Bin" if op.kind == B and op.zb else op.kind
    return [(sp.start, sp.end, key, op.module, op.mb)]


def _layout(res: SimResult, width: float | None):
    span = res.makespan or 1.0
    scale = width / span if width else max(8.0, min(36.0, 1400.0 / span))
    return scale


def to_svg(res: SimResult, path: str | Path | None = None, *, width: float | None = None,
           title: str | None = None) -> str:
    """Render the timeline as SVG text; also write it to `path` if given."""
    scale = _layout(res, width)
    row_h, label_w, top = 24, 80, 34
    n = res.schedule.num_ranks
    plot_w = res.makespan * scale
    W_ = label_w + plot_w + 20
    H = top + n * row_h + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W_:.0f}" height="{H}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{W_:.0f}" height="{H}" fill="white"/>']
    title = title or (f"{res.schedule.name}: {n} devices, {res.schedule.num_chunks} micro-batches, "
                      f"makespan {res.makespan:g}, max bubble {res.max_bubble:g}")
    out.append(f'<text x="{label_w}" y="20" font-size="13" font-weight="bold">{escape(title)}</text>')
    for r in range(n):
        y = top + r * row_h
        out.append(f'<text x="{label_w - 8}" y="{y + row_h * 0.68:.1f}" text-anchor="end" '
                   f'font-weight="bold">Device {r}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{plot_w:.2f}" height="{row_h}" fill="none" '
                   f'stroke="#dddddd"/>')
    for sp in res.spans:
        y = top + sp.rank * row_h
        for x0, x1, key, module, mb in _pieces(sp, res.costs):
            color = COLORS[key][min(module, 1)]
            x = label_w + x0 * scale
            w = (x1 - x0) * scale
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" fill="{color}" '
                       f'stroke="#444444" stroke-width="0.5"/>')
            if w >= 9:
                out.append(f'<text x="{x + w / 2:.2f}" y="{y + row_h * 0.68:.1f}" text-anchor="middle">{mb}</text>')
        x = label_w + sp.start * scale
        out.append(f'<rect x="{x:.2f}" y="{y}" width="{(sp.end - sp.start) * scale:.2f}" height="{row_h}" '
                   f'fill="none" stroke="black" stroke-width="{1.6 if sp.op.kind == FB else 0.8}"/>')
    ly = top + n * row_h + 16
    out.append(f'<text x="{label_w - 8}" y="{ly + 12}" text-anchor="end" font-weight="bold">Time &#8594;</text>')
    lx = label_w
    for key, text in LEGEND:
        if key == FB:
            out.append(f'<rect x="{lx}" y="{ly}" width="9" height="16" fill="{COLORS[F][0]}"/>')
            out.append(f'<rect x="{lx + 9}" y="{ly}" width="9" height="16" fill="{COLORS[B][0]}"/>')
            out.append(f'<rect x="{lx}" y="{ly}" width="18" height="16" fill="none" stroke="black"/>')
        else:
            out.append(f'<rect x="{lx}" y="{ly}" width="18" height="16" fill="{COLORS[key][0]}" stroke="black"/>')
        out.append(f'<text x="{lx + 24}" y="{ly + 12}">{escape(text)}</text>')
        lx += 30 + 7 * len(text)
    out.append(f'<text x="{label_w}" y="{ly + 38}" fill="#555555">darker cells: the second flow '
               f'(reverse direction / second leg of the V)</text>')
    out.append("</svg>")
    text = "\n".join(out)
    if path is not None:
        Path(path).write_text(text)
    return text


def to_png(res: SimResult, path: str | Path, *, dpi: int = 110, title: str | None = None) -> None:
    """Render the timeline to a PNG file with matplotlib (raises ImportError naming the package if absent)."""
    try:
        plt, mpl = _optional.pyplot(), _optional.matplotlib()
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("PNG output needs matplotlib (pip install matplotlib); SVG works without it") from e
    Patch, Rectangle = mpl.patches.Patch, mpl.patches.Rectangle
    n = res.schedule.num_ranks
    span = res.makespan or 1.0
    fig_w = max(8.0, min(24.0, span * 0.22))
    fig, ax = plt.subplots(figsize=(fig_w, 0.42 * n + 1.6))
    for sp in res.spans:
        y = n - 1 - sp.rank
        for x0, x1, key, module, mb in _pieces(sp, res.costs):
            ax.add_patch(Rectangle((x0, y), x1 - x0, 1, facecolor=COLORS[key][min(module, 1)],
                                   edgecolor="#444444", linewidth=0.4))
            if (x1 - x0) * fig_w / span > 0.12:
                ax.text((x0 + x1) / 2, y + 0.5, str(mb), ha="center", va="center", fontsize=7)
        ax.add_patch(Rectangle((sp.start, y), sp.end - sp.start, 1, fill=False, edgecolor="black",
                               linewidth=1.4 if sp.op.kind == FB else 0.6))
    ax.set_xlim(0, span)
    ax.set_ylim(0, n)
    ax.set_yticks([n - 1 - r + 0.5 for r in range(n)], [f"Device {r}" for r in range(n)])
    ax.set_xlabel("Time")
    ax.set_title(title or f"{res.schedule.name}: {n} devices, {res.schedule.num_chunks} micro-batches, "
                 f"makespan {res.makespan:g}, max bubble {res.max_bubble:g}", fontsize=10)
    handles = [Patch(facecolor=COLORS[k][0] if k != FB else COLORS[F][0], edgecolor="black", label=t)
               for k, t in LEGEND]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5, fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
