"""Pictures of *measured* spans: one row per rank with two lanes (compute above, communication below) and a
thin strip under them marking where communication ran while computation ran; the per-rank overlap share at
the right end, a time axis in ms, a legend and an optional caption (e.g. predicted vs measured).

Colours follow pipeline/timeline.py (DualPipe's figure): forward orange, backward green, weight-gradient
blue; dispatch purple, combine pink, p2p grey, waiting light grey. SVG by hand; PNG via matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from ptxforge import _optional
from ptxforge.pipeline.trace_spans import (
    COMM,
    COMPUTE,
    WAIT,
    TraceSpan,
    category,
    overlap_fraction,
    overlapped_intervals,
    ranks_of,
)

# category -> (fill, legend text)
STYLE = {
    "forward": ("#F4B13E", "Forward"),
    "backward": ("#7AD151", "Backward (input)"),
    "weight": ("#7EC3F2", "Backward for weights"),
    "fb": ("#E8C547", "Overlapped forward & backward"),
    "compute": ("#C7B9E0", "Other compute"),
    "dispatch": ("#9467BD", "Dispatch"),
    "combine": ("#E377C2", "Combine"),
    "p2p": ("#8C8C8C", "Pipeline send/recv"),
    "comm": ("#17BECF", "Other communication"),
    "wait": ("#E0E0E0", "Waiting"),
}
OVERLAP_COLOR = "#1B7F3B"


def lane_of(s: TraceSpan) -> int:
    """0 = compute lane, 1 = communication lane."""
    return 1 if s.kind in (COMM, WAIT) else 0


def _filled(s: TraceSpan) -> bool:
    return s.kind in (COMPUTE, COMM, WAIT)


def _depths(spans: list[TraceSpan]) -> tuple[dict[int, int], set[int]]:
    """Nesting depth of each span within its lane (index into `spans` -> depth) and the spans that contain
    others (their label goes above their children)."""
    out: dict[int, int] = {}
    parents: set[int] = set()
    order = sorted(range(len(spans)), key=lambda i: (spans[i].rank, lane_of(spans[i]), spans[i].start, -spans[i].end))
    stack: list[tuple[int, int, float, int]] = []
    for i in order:
        s = spans[i]
        key = (s.rank, lane_of(s))
        while stack and ((stack[-1][0], stack[-1][1]) != key or stack[-1][2] <= s.start):
            stack.pop()
        out[i] = len(stack)
        if stack:
            parents.add(stack[-1][3])
        stack.append((key[0], key[1], s.end, i))
    return out, parents


def _band(depth: int, lane_h: float) -> tuple[float, float]:
    """(offset from the lane's top, height) of a span at nesting `depth`: children fill the lower part."""
    off = lane_h * (1 - 0.62 ** min(depth, 3))
    return off, lane_h - off


def nice_step(span: float, target: int = 8) -> float:
    """A 1/2/5 x 10^k tick step giving about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target
    k = 10 ** math.floor(math.log10(raw))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= raw)


def _label(s: TraceSpan, width_px: float) -> str:
    full = f"{s.name} {s.mb}" if s.mb is not None else s.name
    if width_px >= 6.5 * len(full) + 4:
        return full
    short = str(s.mb) if s.mb is not None else ""
    return short if width_px >= 6.5 * len(short) + 3 else ""


def _prepare(spans: Iterable[TraceSpan]) -> tuple[list[TraceSpan], list[int], float]:
    spans = list(spans)
    t0 = min((s.start for s in spans), default=0.0)
    spans = [s.shifted(-t0) for s in spans]
    end = max((s.end for s in spans), default=0.0)
    return spans, ranks_of(spans), end


def to_svg(spans: Iterable[TraceSpan], path: str | Path | None = None, title: str | None = None, *,
           caption: Sequence[str] = (), width: float = 1100.0) -> str:
    """Render measured spans as SVG text (one row per rank); also write it to `path` if given."""
    spans, ranks, end = _prepare(spans)
    span = end or 1.0
    scale = width / span
    lane_h, strip_h, gap, label_w, right_w, top = 24, 5, 12, 92, 96, 38
    row_h = 2 * lane_h + strip_h + 2
    plot_bottom = top + len(ranks) * (row_h + gap)
    present = [k for k in STYLE if any(category(s) == k for s in spans)]
    legend_rows = max(1, math.ceil(len(present) / 5))
    W_ = label_w + width + right_w
    H = plot_bottom + 34 + 22 * (legend_rows + 1) + 16 * len(caption) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W_:.0f}" height="{H:.0f}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{W_:.0f}" height="{H:.0f}" fill="white"/>',
           '<defs><pattern id="waithatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#EEEEEE"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#B0B0B0" stroke-width="2"/></pattern></defs>']
    title = title or (f"Measured timeline: {len(ranks)} rank{'s' * (len(ranks) != 1)}, {span * 1e3:.3g} ms, "
                      f"communication overlapped {overlap_fraction(spans):.0%}")
    out.append(f'<text x="{label_w}" y="22" font-size="13" font-weight="bold">{escape(title)}</text>')
    out.append(f'<text x="{label_w + width + 8}" y="{top - 6}" fill="#555555">overlap</text>')
    depth, parents = _depths(spans)
    for row, r in enumerate(ranks):
        y = top + row * (row_h + gap)
        out.append(f'<g class="rank" data-rank="{r}">')
        out.append(f'<text x="8" y="{y + lane_h * 0.8:.1f}" font-weight="bold">Rank {r}</text>')
        out.append(f'<text x="{label_w - 6}" y="{y + lane_h * 0.7:.1f}" text-anchor="end" fill="#555555" '
                   f'font-size="9">compute</text>')
        out.append(f'<text x="{label_w - 6}" y="{y + lane_h * 1.7:.1f}" text-anchor="end" fill="#555555" '
                   f'font-size="9">comm</text>')
        for lane in (0, 1):
            out.append(f'<rect x="{label_w}" y="{y + lane * lane_h}" width="{width:.1f}" height="{lane_h}" '
                       f'fill="#FAFAFA" stroke="#DDDDDD"/>')
        for i, s in enumerate(spans):
            if s.rank != r:
                continue
            off, h = _band(depth[i], lane_h)
            x, w = label_w + s.start * scale, max(s.duration * scale, 0.6)
            sy = y + lane_of(s) * lane_h + off
            cat = category(s)
            fill = "url(#waithatch)" if cat == "wait" else STYLE[cat][0]
            # an envelope (a whole chunk, kind "chunk" ...) is tinted so that what ran inside it shows
            look = 'stroke="#333333" stroke-width="0.5"' if _filled(s) else \
                'fill-opacity="0.35" stroke="#222222" stroke-width="1.2"'
            tip = f"{s.name} ({s.kind}) mb={s.mb} {s.start * 1e3:.3f}-{s.end * 1e3:.3f} ms"
            out.append(f'<rect class="span" data-rank="{r}" data-kind="{escape(s.kind)}" data-lane="{lane_of(s)}" '
                       f'x="{x:.2f}" y="{sy:.1f}" width="{w:.2f}" height="{h:.1f}" fill="{fill}" '
                       f'{look}><title>{escape(tip)}</title></rect>')
            text = _label(s, w)
            if text and i in parents:  # above its children, in the band they leave free
                out.append(f'<text x="{x + 3:.2f}" y="{sy + lane_h * 0.3:.1f}" font-size="8">{escape(text)}</text>')
            elif text:
                out.append(f'<text x="{x + w / 2:.2f}" y="{sy + h * 0.5 + 3.5:.1f}" '
                           f'text-anchor="middle" font-size="10">{escape(text)}</text>')
        sy = y + 2 * lane_h + 1
        for a, b in overlapped_intervals(spans, r):
            out.append(f'<rect class="overlap" data-rank="{r}" x="{label_w + a * scale:.2f}" y="{sy}" '
                       f'width="{max((b - a) * scale, 0.6):.2f}" height="{strip_h}" fill="{OVERLAP_COLOR}"/>')
        out.append(f'<text x="{label_w + width + 8}" y="{y + lane_h * 1.2:.1f}" font-weight="bold">'
                   f'{overlap_fraction(spans, r):.0%}</text>')
        out.append("</g>")
    step = nice_step(span * 1e3)
    ay = plot_bottom - gap + 4
    out.append(f'<line x1="{label_w}" y1="{ay}" x2="{label_w + width}" y2="{ay}" stroke="black"/>')
    for k in range(int(span * 1e3 / step + 1e-9) + 1):
        x = label_w + k * step * 1e-3 * scale
        out.append(f'<line x1="{x:.2f}" y1="{ay}" x2="{x:.2f}" y2="{ay + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.2f}" y="{ay + 15}" text-anchor="middle">{k * step:g}</text>')
    out.append(f'<text x="{label_w + width}" y="{ay + 28}" text-anchor="end">time (ms) &#8594;</text>')
    ly = ay + 38
    items = [(STYLE[k][0], STYLE[k][1]) for k in present] + [(OVERLAP_COLOR, "Communication under computation")]
    for n, (color, text) in enumerate(items):
        lx, yy = label_w + (n % 5) * 205, ly + (n // 5) * 22
        fill = "url(#waithatch)" if text == STYLE["wait"][1] else color
        out.append(f'<rect x="{lx}" y="{yy}" width="18" height="14" fill="{fill}" stroke="black"/>')
        out.append(f'<text x="{lx + 24}" y="{yy + 11}">{escape(text)}</text>')
    cy = ly + 22 * math.ceil(len(items) / 5) + 8
    for n, line in enumerate(caption):
        out.append(f'<text class="caption" x="{label_w}" y="{cy + 16 * n}" font-family="Menlo, Consolas, monospace" '
                   f'xml:space="preserve">{escape(line)}</text>')
    out.append("</svg>")
    text = "\n".join(out)
    if path is not None:
        Path(path).write_text(text)
    return text


def to_png(spans: Iterable[TraceSpan], path: str | Path, title: str | None = None, *,
           caption: Sequence[str] = (), dpi: int = 120) -> None:
    """Render measured spans to a PNG file with matplotlib (MissingDependency naming the extra if absent)."""
    plt, mpl = _optional.pyplot(), _optional.matplotlib()
    spans, ranks, end = _prepare(spans)
    span_ms = (end or 1.0) * 1e3
    n = len(ranks)
    fig, ax = plt.subplots(figsize=(14, 0.9 * n + 1.6 + 0.22 * len(caption)))
    depth, parents = _depths(spans)
    for row, r in enumerate(ranks):
        base = (n - 1 - row) * 3
        for i, s in enumerate(spans):
            if s.rank != r:
                continue
            _, h = _band(depth[i], 0.95)  # matplotlib y points up: the band starts at the bottom
            y = base + (1 - lane_of(s)) + 0.45
            cat = category(s)
            ax.add_patch(mpl.patches.Rectangle((s.start * 1e3, y), s.duration * 1e3, h,
                                               facecolor=STYLE[cat][0], alpha=1.0 if _filled(s) else 0.35,
                                               edgecolor="#333333", linewidth=0.4 if _filled(s) else 1.2,
                                               hatch="//" if cat == "wait" else None))
            label = f"{s.name} {s.mb}" if s.mb is not None else s.name
            if s.duration * 1e3 / span_ms * 14 * 72 > 6 * len(label):
                if i in parents:
                    ax.text(s.start * 1e3 + span_ms * 0.002, y + 0.8, label, va="center", fontsize=6)
                else:
                    ax.text((s.start + s.end) / 2 * 1e3, y + h / 2, label, ha="center", va="center", fontsize=7)
        for a, b in overlapped_intervals(spans, r):
            ax.add_patch(mpl.patches.Rectangle((a * 1e3, base + 0.15), (b - a) * 1e3, 0.25, facecolor=OVERLAP_COLOR))
        ax.text(span_ms * 1.005, base + 1.4, f"{overlap_fraction(spans, r):.0%}", va="center", fontsize=9,
                fontweight="bold")
    ax.set_xlim(0, span_ms)
    ax.set_ylim(0, 3 * n)
    ax.set_yticks([(n - 1 - row) * 3 + 1.4 for row in range(n)], [f"Rank {r}" for r in ranks])
    ax.set_xlabel("time (ms)" + ("\n\n" + "\n".join(caption) if caption else ""), family="monospace"
                  if caption else None)
    ax.set_title(title or f"Measured timeline: {n} ranks, communication overlapped {overlap_fraction(spans):.0%}",
                 fontsize=10, pad=34)
    present = [k for k in STYLE if any(category(s) == k for s in spans)]
    handles = [mpl.patches.Patch(facecolor=STYLE[k][0], edgecolor="black", label=STYLE[k][1]) for k in present]
    handles.append(mpl.patches.Patch(facecolor=OVERLAP_COLOR, label="Communication under computation"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6,
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
