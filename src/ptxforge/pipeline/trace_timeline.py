"""Pictures of *measured* spans: one row per rank with two lanes (compute above, communication below) and a
thin strip under them marking where communication ran while computation ran; the per-rank overlap share at
the right end, step boundaries, a time axis in ms, a legend and an optional caption (e.g. predicted vs
measured).

Colours follow pipeline/timeline.py (DualPipe's figure): forward orange, backward green, weight-gradient
blue, an overlapped forward & backward chunk half orange, half green inside a thick border; dispatch
purple, combine pink, p2p grey, waiting hatched. A span nested in another sits in the lower part of its
parent, whose label stays readable above it; a chunk envelope with spans inside is drawn tinted.
SVG by hand; PNG via matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    "backward": ("#7AD151", "Backward"),
    "weight": ("#7EC3F2", "Backward for weights"),
    "fb": ("#F4B13E", "Overlapped forward & backward"),
    "compute": ("#C7B9E0", "Other compute"),
    "dispatch": ("#9467BD", "Dispatch"),
    "combine": ("#E377C2", "Combine"),
    "p2p": ("#8C8C8C", "Pipeline send/recv"),
    "comm": ("#17BECF", "Other communication"),
    "wait": ("#E0E0E0", "Waiting"),
}
OVERLAP_COLOR = "#1B7F3B"
STEP = "step"


def is_step(s: TraceSpan) -> bool:
    """A span marking a whole training step: drawn as a boundary, not as a cell."""
    return s.name == STEP or s.kind == STEP


def lane_of(s: TraceSpan) -> int:
    """0 = compute lane, 1 = communication lane."""
    return 1 if s.kind in (COMM, WAIT) else 0


@dataclass(frozen=True)
class Cell:
    """One span as drawn: lane, nesting depth, colour pieces (x0, x1, colour) in seconds, look."""

    span: TraceSpan
    lane: int
    depth: int
    pieces: tuple[tuple[float, float, str], ...]
    tinted: bool  # an envelope with spans inside it
    parent: bool
    border: float

    @property
    def label(self) -> str:
        s = self.span
        return f"{s.name} {s.mb}" if s.mb is not None else s.name


def cells(spans: list[TraceSpan]) -> list[Cell]:
    """The drawable cells of `spans` (step spans left out), in drawing order (parents before children)."""
    order = sorted((s for s in spans if not is_step(s)), key=lambda s: (s.rank, lane_of(s), s.start, -s.end))
    depth: dict[int, int] = {}
    parents: set[int] = set()
    stack: list[int] = []
    for i, s in enumerate(order):
        while stack and ((order[stack[-1]].rank, lane_of(order[stack[-1]])) != (s.rank, lane_of(s))
                         or order[stack[-1]].end <= s.start):
            stack.pop()
        depth[i] = len(stack)
        if stack:
            parents.add(stack[-1])
        stack.append(i)
    out = []
    for i, s in enumerate(order):
        cat = category(s)
        color = STYLE[cat][0]
        pieces: tuple[tuple[float, float, str], ...]
        if cat == "fb" and i not in parents:  # DualPipe's figure: the pair as two halves in one border
            mid = (s.start + s.end) / 2
            pieces = ((s.start, mid, STYLE["forward"][0]), (mid, s.end, STYLE["backward"][0]))
        else:
            pieces = ((s.start, s.end, color),)
        envelope = s.kind not in (COMPUTE, COMM, WAIT)
        out.append(Cell(s, lane_of(s), depth[i], pieces, envelope and i in parents, i in parents,
                        1.6 if cat == "fb" else 1.0 if envelope else 0.5))
    return out


def band(depth: int) -> tuple[float, float]:
    """(offset from the lane's top, height) as fractions of a lane, for a cell at nesting `depth`."""
    off = 1 - 0.62 ** min(depth, 3)
    return off, 1 - off


def nice_step(span: float, target: int = 8) -> float:
    """A 1/2/5 x 10^k tick step giving about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target
    k = 10 ** math.floor(math.log10(raw))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= raw)


def _attr(text: str) -> str:
    """`text` escaped for an XML attribute in double quotes."""
    return escape(text, {'"': "&quot;"})


def _fit(text: str, width_px: float, char_px: float = 6.5) -> bool:
    return bool(text) and width_px >= char_px * len(text) + 4


def _short_label(c: Cell, width_px: float) -> str:
    if _fit(c.label, width_px):
        return c.label
    short = str(c.span.mb) if c.span.mb is not None else ""
    return short if _fit(short, width_px) else ""


def _prepare(spans: Iterable[TraceSpan]) -> tuple[list[TraceSpan], list[int], float]:
    spans = list(spans)
    t0 = min((s.start for s in spans), default=0.0)
    spans = [s.shifted(-t0) for s in spans]
    end = max((s.end for s in spans), default=0.0)
    return spans, ranks_of(spans), end


def _legend(spans: list[TraceSpan]) -> list[str]:
    return [k for k in STYLE if any(category(s) == k for s in spans if not is_step(s))]


def _title(spans: list[TraceSpan], ranks: list[int], end: float) -> str:
    return (f"Measured timeline: {len(ranks)} rank{'s' * (len(ranks) != 1)}, {end * 1e3:.4g} ms, "
            f"communication under computation {overlap_fraction(spans):.0%}")


def to_svg(spans: Iterable[TraceSpan], path: str | Path | None = None, title: str | None = None, *,
           caption: Sequence[str] = (), width: float = 1100.0) -> str:
    """Render measured spans as SVG text (one row per rank); also write it to `path` if given."""
    spans, ranks, end = _prepare(spans)
    scale = width / (end or 1.0)
    lane_h, strip_h, gap, label_w, right_w, top = 24, 5, 14, 92, 70, 44
    row_h = 2 * lane_h + strip_h + 2
    plot_bottom = top + len(ranks) * (row_h + gap)
    legend = _legend(spans)
    n_items = len(legend) + 1
    W_ = label_w + width + right_w
    H = plot_bottom + 44 + 22 * math.ceil(n_items / 5) + 16 * len(caption) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W_:.0f}" height="{H:.0f}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{W_:.0f}" height="{H:.0f}" fill="white"/>',
           '<defs><pattern id="waithatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#EEEEEE"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#B0B0B0" stroke-width="2"/></pattern></defs>',
           f'<text x="{label_w}" y="22" font-size="13" font-weight="bold">'
           f'{escape(title or _title(spans, ranks, end))}</text>',
           f'<text x="{label_w + width + 8}" y="{top - 6}" fill="#555555">overlap</text>']
    row_y = {r: top + n * (row_h + gap) for n, r in enumerate(ranks)}
    by_rank: dict[int, list[str]] = {r: [] for r in ranks}
    for r in ranks:
        y = row_y[r]
        by_rank[r] += [f'<text x="8" y="{y + lane_h * 0.8:.1f}" font-weight="bold">Rank {r}</text>',
                       f'<text x="{label_w - 6}" y="{y + lane_h * 0.65:.1f}" text-anchor="end" fill="#555555" '
                       f'font-size="9">compute</text>',
                       f'<text x="{label_w - 6}" y="{y + lane_h * 1.65:.1f}" text-anchor="end" fill="#555555" '
                       f'font-size="9">comm</text>']
        by_rank[r] += [f'<rect x="{label_w}" y="{y + lane * lane_h}" width="{width:.1f}" height="{lane_h}" '
                       f'fill="#FAFAFA" stroke="#DDDDDD"/>' for lane in (0, 1)]
    for c in cells(spans):
        s, y = c.span, row_y[c.span.rank]
        off, h = (v * lane_h for v in band(c.depth))
        x, w = label_w + s.start * scale, max(s.duration * scale, 0.6)
        sy = y + c.lane * lane_h + off
        cat = category(s)
        tip = f"{s.name} ({s.kind}) mb={s.mb} {s.start * 1e3:.3f}-{s.end * 1e3:.3f} ms"
        for a, b, color in c.pieces:
            fill = "url(#waithatch)" if cat == "wait" else color
            tint = ' fill-opacity="0.35"' if c.tinted else ""
            by_rank[s.rank].append(f'<rect x="{label_w + a * scale:.2f}" y="{sy:.1f}" '
                                   f'width="{max((b - a) * scale, 0.6):.2f}" height="{h:.1f}" fill="{fill}"{tint}/>')
        by_rank[s.rank].append(
            f'<rect class="span" data-rank="{s.rank}" data-kind="{_attr(s.kind)}" data-lane="{c.lane}" '
            f'data-name="{_attr(s.name)}" x="{x:.2f}" y="{sy:.1f}" width="{w:.2f}" height="{h:.1f}" fill="none" '
            f'stroke="#222222" stroke-width="{c.border}"><title>{escape(tip)}</title></rect>')
        if c.parent and _fit(c.label, w, 5.0):  # above its children, in the band they leave free
            by_rank[s.rank].append(f'<text x="{x + 3:.2f}" y="{sy + lane_h * 0.3:.1f}" font-size="8">'
                                   f'{escape(c.label)}</text>')
        elif not c.parent and (text := _short_label(c, w)):
            by_rank[s.rank].append(f'<text x="{x + w / 2:.2f}" y="{sy + h * 0.5 + 3.5:.1f}" text-anchor="middle" '
                                   f'font-size="10">{escape(text)}</text>')
    for s in spans:
        if is_step(s):
            x, y = label_w + s.start * scale, row_y[s.rank]
            by_rank[s.rank].append(f'<line class="step" x1="{x:.2f}" y1="{y - 4}" x2="{x:.2f}" y2="{y + 2 * lane_h}" '
                                   f'stroke="#555555" stroke-dasharray="3,2"/>')
            label = f"step {s.attrs['step']}" if "step" in s.attrs else "step"
            by_rank[s.rank].append(f'<text x="{x + 2:.2f}" y="{y - 3}" font-size="8" fill="#555555">'
                                   f'{escape(label)}</text>')
    for r in ranks:
        y = row_y[r]
        for a, b in overlapped_intervals(spans, r):
            by_rank[r].append(f'<rect class="overlap" data-rank="{r}" x="{label_w + a * scale:.2f}" '
                              f'y="{y + 2 * lane_h + 1}" width="{max((b - a) * scale, 0.6):.2f}" height="{strip_h}" '
                              f'fill="{OVERLAP_COLOR}"/>')
        by_rank[r].append(f'<text x="{label_w + width + 8}" y="{y + lane_h * 1.2:.1f}" font-weight="bold">'
                          f'{overlap_fraction(spans, r):.0%}</text>')
        out += [f'<g class="rank" data-rank="{r}">', *by_rank[r], "</g>"]
    out += _svg_axis(end, scale, label_w, width, plot_bottom - gap + 6)
    out += _svg_legend(legend, label_w, plot_bottom + 40)
    cy = plot_bottom + 40 + 22 * math.ceil(n_items / 5) + 8
    out += [f'<text class="caption" x="{label_w}" y="{cy + 16 * n}" font-family="Menlo, Consolas, monospace" '
            f'xml:space="preserve">{escape(line)}</text>' for n, line in enumerate(caption)]
    out.append("</svg>")
    text = "\n".join(out)
    if path is not None:
        Path(path).write_text(text)
    return text


def _svg_axis(end: float, scale: float, x0: float, width: float, y: float) -> list[str]:
    step = nice_step(end * 1e3)
    out = [f'<line x1="{x0}" y1="{y}" x2="{x0 + width}" y2="{y}" stroke="black"/>']
    for k in range(int(end * 1e3 / step + 1e-9) + 1):
        x = x0 + k * step * 1e-3 * scale
        out.append(f'<line x1="{x:.2f}" y1="{y}" x2="{x:.2f}" y2="{y + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.2f}" y="{y + 15}" text-anchor="middle">{k * step:g}</text>')
    out.append(f'<text x="{x0 + width}" y="{y + 28}" text-anchor="end">time (ms) &#8594;</text>')
    return out


def _svg_legend(legend: list[str], x0: float, y0: float) -> list[str]:
    out = []
    for n, key in enumerate([*legend, "overlap"]):
        x, y = x0 + (n % 5) * 205, y0 + (n // 5) * 22
        if key == "fb":
            out += [f'<rect x="{x}" y="{y}" width="9" height="14" fill="{STYLE["forward"][0]}"/>',
                    f'<rect x="{x + 9}" y="{y}" width="9" height="14" fill="{STYLE["backward"][0]}"/>',
                    f'<rect x="{x}" y="{y}" width="18" height="14" fill="none" stroke="black" stroke-width="1.6"/>']
        else:
            fill = "url(#waithatch)" if key == "wait" else OVERLAP_COLOR if key == "overlap" else STYLE[key][0]
            out.append(f'<rect x="{x}" y="{y}" width="18" height="14" fill="{fill}" stroke="black"/>')
        text = "Communication under computation" if key == "overlap" else STYLE[key][1]
        out.append(f'<text x="{x + 24}" y="{y + 11}">{escape(text)}</text>')
    return out


def to_png(spans: Iterable[TraceSpan], path: str | Path, title: str | None = None, *,
           caption: Sequence[str] = (), dpi: int = 120) -> None:
    """Render measured spans to a PNG file with matplotlib (MissingDependency naming the extra if absent)."""
    plt, mpl = _optional.pyplot(), _optional.matplotlib()
    Rectangle = mpl.patches.Rectangle
    spans, ranks, end = _prepare(spans)
    end_ms = (end or 1.0) * 1e3
    n = len(ranks)
    fig, ax = plt.subplots(figsize=(14, 0.95 * n + 2.0 + 0.2 * len(caption)))
    base = {r: (n - 1 - k) * 3 for k, r in enumerate(ranks)}  # a row: strip 0.15-0.4, comm 0.45, compute 1.45
    for c in cells(spans):
        s = c.span
        off, h = band(c.depth)
        y = base[s.rank] + (1 - c.lane) + 0.45 + 0.95 * (1 - off - h)  # matplotlib's y points up
        h *= 0.95
        for a, b, color in c.pieces:
            ax.add_patch(Rectangle((a * 1e3, y), (b - a) * 1e3, h, facecolor=color, alpha=0.35 if c.tinted else 1,
                                   hatch="//" if category(s) == "wait" else None, linewidth=0))
        ax.add_patch(Rectangle((s.start * 1e3, y), s.duration * 1e3, h, fill=False, edgecolor="#222222",
                               linewidth=c.border))
        width_px = s.duration * 1e3 / end_ms * 14 * 72
        if c.parent and _fit(c.label, width_px, 4.5):
            ax.text(s.start * 1e3 + end_ms * 0.002, y + 0.8, c.label, va="center", fontsize=6)
        elif not c.parent and (text := _short_label(c, width_px)):
            ax.text((s.start + s.end) / 2 * 1e3, y + h / 2, text, ha="center", va="center", fontsize=7)
    for s in spans:
        if is_step(s):
            ax.plot([s.start * 1e3] * 2, [base[s.rank] + 0.45, base[s.rank] + 2.5], color="#555555",
                    linestyle="--", linewidth=0.8)
            ax.text(s.start * 1e3, base[s.rank] + 2.55, f"step {s.attrs.get('step', '')}", fontsize=6,
                    color="#555555")
    for r in ranks:
        for a, b in overlapped_intervals(spans, r):
            ax.add_patch(Rectangle((a * 1e3, base[r] + 0.15), (b - a) * 1e3, 0.25, facecolor=OVERLAP_COLOR))
        ax.text(end_ms * 1.005, base[r] + 1.4, f"{overlap_fraction(spans, r):.0%}", va="center", fontsize=9,
                fontweight="bold")
    ax.set_xlim(0, end_ms)
    ax.set_ylim(0, 3 * n)
    ax.set_yticks([base[r] + 1.4 for r in ranks], [f"Rank {r}" for r in ranks])
    ax.set_xlabel("time (ms)")
    ax.set_title(title or _title(spans, ranks, end), fontsize=10, pad=34)
    legend = _legend(spans)
    handles = [mpl.patches.Patch(facecolor=STYLE[k][0], edgecolor="black", label=STYLE[k][1]) for k in legend]
    handles.append(mpl.patches.Patch(facecolor=OVERLAP_COLOR, label="Communication under computation"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6, fontsize=8, frameon=False)
    for k, line in enumerate(caption):
        fig.text(0.5, 0.012 + 0.035 * (len(caption) - 1 - k), line, ha="center", family="monospace", fontsize=8)
    fig.tight_layout(rect=(0, 0.045 * len(caption), 1, 1))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
