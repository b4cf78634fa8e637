"""The video instructions on the native tier (lower_video.py) against the interpreter (semantics.video), bit
for bit: every scalar op with mixed signedness, byte and half-word selectors, .sat, each secondary operation
and each destination selector; vshl/vshr in both modes; vmad with .po, .shr7/.shr15, .sat and each
negation; vset's comparisons; the SIMD forms with selectors, masks, .sat and .add. Inputs: every triple of
32-bit edge values (the signed and unsigned limits of bytes, half-words and words, shift counts around 32)
and random words. The H200's recorded video results run natively in test_native_conformance.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_native_conformance import _both_tiers, _grid

pytest.importorskip("llvmlite")

EDGES = np.array([0, 1, 2, 7, 31, 32, 33, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x8080807F, 0x7FFFFFFF,
                  0x80000000, 0xFFFFFFFF, 0xFF7F8001, 0x12345678, 0xFFFF0021], np.uint32)
TYPES = ("u32.u32.u32", "s32.s32.s32", "u32.s32.u32", "s32.u32.s32")

SCALAR = [f"{op}.{t} {{d}}, {{a}}{sa}, {{b}}{sb}" for op in ("vadd", "vsub", "vabsdiff", "vmin", "vmax")
          for t in TYPES for sa, sb in (("", ""), (".b1", ".h0"), (".h1", ".b3"))] + \
    [f"{op}.{t}.sat {{d}}, {{a}}{sa}, {{b}}" for op in ("vadd", "vsub", "vabsdiff") for t in TYPES
     for sa in ("", ".b2")] + \
    [f"{op}.{t}{s}.{sec} {{d}}, {{a}}, {{b}}.b0, {{c}}" for op in ("vadd", "vsub", "vmax") for t in TYPES[:2]
     for s in ("", ".sat") for sec in ("add", "min", "max")] + \
    [f"{op}.{t}{s} {{d}}.{ds}, {{a}}.h0, {{b}}.b1, {{c}}" for op in ("vadd", "vsub", "vmin") for t in TYPES[:3]
     for s in ("", ".sat") for ds in ("b0", "b1", "b2", "b3", "h0", "h1")]
SHIFT = [f"{op}.{t}.u32{s}.{m}{sec} {{d}}, {{a}}{sa}, {{b}}{sb}{c}" for op in ("vshl", "vshr")
         for t in ("u32.u32", "s32.s32", "s32.u32", "u32.s32") for m in ("clamp", "wrap") for s in ("", ".sat")
         for sa, sb, sec, c in (("", "", "", ""), (".h1", ".b0", ".add", ", {c}"), (".b3", "", ".max", ", {c}"))] + \
    [f"vshl.s32.s32.u32.sat.clamp {{d}}.{ds}, {{a}}, {{b}}.b0, {{c}}" for ds in ("b1", "h0", "h1")]
VMAD = [f"vmad.{t}{po}{s}{sc} {{d}}, {na}{{a}}{sa}, {nb}{{b}}{sb}, {nc}{{c}}"
        for t in TYPES for po in ("", ".po") for s in ("", ".sat") for sc in ("", ".shr7", ".shr15")
        for na, nb, nc, sa, sb in (("", "", "", "", ""), ("-", "", "", ".h0", ".h1"), ("", "", "-", ".b0", ".b3"))
        if not (po and (na or nc))]
VSET = [f"vset.{t}.{cmp}{sec} {{d}}, {{a}}{sa}, {{b}}{c}" for t in ("u32.u32", "s32.s32", "u32.s32", "s32.u32")
        for cmp in ("eq", "ne", "lt", "le", "gt", "ge")
        for sa, sec, c in (("", "", ""), (".b2", ".add", ", {c}"), (".h1", ".min", ", {c}"))] + \
    [f"vset.s32.u32.lt {{d}}.{ds}, {{a}}.b1, {{b}}, {{c}}" for ds in ("b0", "h1")]
SIMD = [f"{op}{n}.{t}{s} {{d}}{mask}, {{a}}{sa}, {{b}}{sb}, {{c}}"
        for op in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax") for n in (2, 4) for t in TYPES
        for s in ("", ".sat", ".add")
        for mask, sa, sb in (("", "", ""), (".b20" if n == 4 else ".h1", ".b4321" if n == 4 else ".h21",
                                            ".b7531" if n == 4 else ".h03"))] + \
    [f"vset{n}.{t}.{cmp}{a} {{d}}, {{a}}, {{b}}, {{c}}" for n in (2, 4) for t in ("u32.u32", "s32.s32", "s32.u32")
     for cmp in ("eq", "ne", "lt", "le", "gt", "ge") for a in ("", ".add")]

GROUPS = {"scalar": SCALAR, "shift": SHIFT, "vmad": VMAD, "vset": VSET, "simd": SIMD}
# the default suite's share of each group (every form: slow)
SMOKE = {"scalar": 12, "shift": 8, "vmad": 8, "vset": 6, "simd": 16}


def _run(forms: list[str]) -> None:
    ins = _grid(EDGES, 3, np.random.default_rng(11), 2048)
    _both_tiers([(f, 32) for f in forms], 32, ins)


def _spread(forms: list[str], k: int) -> list[str]:
    return [forms[i] for i in np.linspace(0, len(forms) - 1, k).astype(int)]


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_video_forms_match_the_interpreter(group):
    _run(_spread(GROUPS[group], SMOKE[group]))


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_video_form_matches_the_interpreter(group):
    forms = GROUPS[group]
    for i in range(0, len(forms), 64):
        _run(forms[i:i + 64])
