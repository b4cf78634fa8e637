"""The SM map of an emulated node: which SMs of a GPU ran which kernel, over time, as a PNG.

Drawn from `Node.sm_map` (one entry per wave of blocks a launch ran: GPU, stream, kernel, the SMs it
used, node clock at its start and end). matplotlib is imported only here (the `plot` extra).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ptxforge import _optional
from ptxforge.emu.node import Node
from ptxforge.outputs import output_path

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def draw_sm_map(node: Node, path: str | Path, *, gpu: int = 0, title: str | None = None, dpi: int = 110,
                roles: dict[tuple[str, int], str] | None = None) -> Path:
    """Write GPU `gpu`'s SM map to `path`; returns the path (ImportError naming matplotlib if absent).
    `roles` {(kernel, sm): label} draws those SMs of that kernel under `label`, with its own color (e.g. a
    communication kernel's senders and receivers)."""
    try:
        # matplotlib is optional (the `plot` extra) and slow to load: the demo draws without it, or says why not
        mpl = _optional.matplotlib()
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the SM map needs matplotlib (pip install 'ptxforge[plot]')") from e
    figure, patches = mpl.figure, mpl.patches
    waves = [w for w in node.sm_map if w[0] == gpu]
    if not waves:
        raise ValueError(f"GPU {gpu} of the node ran no stream launch yet: nothing to draw")
    if roles:  # one entry per (wave, role)
        split = []
        for g, s, k, sms, t0, t1 in waves:
            by_role: dict = {}
            for sm in sms:
                by_role.setdefault(roles.get((k, int(sm))), []).append(sm)
            split += [(g, s, role or k, tuple(v), t0, t1) for role, v in by_role.items()]
        waves = split
    nsms = node.devices[gpu].num_sms
    kernels = list(dict.fromkeys(f"{k} (stream {s})" for _, s, k, *_ in waves))
    color = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kernels)}
    t_end = max(w[5] for w in waves) or 1
    fig = figure.Figure(figsize=(10, 5.5))  # drawn by Agg on savefig, without pyplot's global state
    ax = fig.subplots()
    seen: dict = {}
    for _, s, k, sms, t0, t1 in waves:
        key = f"{k} (stream {s})"
        wave = seen[key] = seen.get(key, -1) + 1  # alternate shades: one per wave of blocks
        for lo, hi in _runs(sms):
            ax.broken_barh([(t0, max(t1 - t0, t_end * 0.002))], (lo, hi - lo + 1), facecolors=color[key],
                           alpha=1.0 if wave % 2 == 0 else 0.6, edgecolor="black", linewidth=0.3)
    ax.set_xlim(0, t_end)
    ax.set_ylim(nsms, 0)
    ax.set_ylabel("SM")
    ax.set_xlabel("node clock (emulator steps, all GPUs and streams together)")
    ax.set_title(title or f"GPU {gpu}: which SMs ran which kernel", fontsize=10)
    ax.legend(handles=[patches.Patch(facecolor=color[k], label=k) for k in kernels], loc="upper center",
              bbox_to_anchor=(0.5, -0.12), ncol=min(3, len(kernels)), fontsize=8, frameon=False)
    fig.tight_layout()
    with output_path(path, "SM map") as out:
        fig.savefig(out, dpi=dpi, format="png")
    return Path(path)


def _runs(sms: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive SM indices merged into (first, last) runs."""
    out: list = []
    for sm in sorted(sms):
        if out and sm == out[-1][1] + 1:
            out[-1] = (out[-1][0], sm)
        else:
            out.append((sm, sm))
    return out
