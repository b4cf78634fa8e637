"""ISA table: matrix instructions: wmma, mma (and mma.sp), ldmatrix/stmatrix/movmatrix, wgmma and
tcgen05 (PTX ISA 9.0 manual sections 9.7.14-9.7.16). Their fragments are brace vectors whose
length depends on shape and type; operands are counted but not type-checked."""

from __future__ import annotations

from typing import Any

from ptxforge.ptx.isa.build import BLACKWELL_A, BLACKWELL_DC, _set, fam, fx, gate

SHAPES_F64_90 = "m16n8k4&T0=f64|m16n8k8&T0=f64|m16n8k16&T0=f64"
SM120A = ("sm_120f",)
TCGEN: dict[str, Any] = dict(ptx=(8, 6), sm=100, sfx="a", also=BLACKWELL_DC, group="tcgen05")

WMMA_GATES = (
    gate("m8n32k16|m32n8k16", "shapes .m8n32k16/.m32n8k16", (6, 1), 70),
    gate("s8|u8", "integer wmma", (6, 3), 72),
    gate("s4|u4|b1", "sub-byte and single-bit wmma", (6, 3), 75),
    gate("f64|bf16|tf32|m16n16k8|m8n8k4", "double and alternate floating-point wmma", (7, 0), 80),
)

SPECS = [
    fam("wmma.load", "*, A, *?", ptx=(6, 0), sm=70, group="mma", summary="load a wmma fragment",
        gates=WMMA_GATES, slots={"matrix": _set(".a .b .c")}, effects=fx((0,), "load", "warp", loaded=(0,))),
    fam("wmma.store", "A, *, *?", ptx=(6, 0), sm=70, group="mma", summary="store a wmma fragment",
        gates=WMMA_GATES, slots={"matrix": _set(".d")}, effects=fx((), "store", "warp")),
    fam("wmma.mma", "*, *, *, *", ptx=(6, 0), sm=70, group="mma", summary="warp-level matrix multiply-add",
        gates=(*WMMA_GATES, gate("and", "single-bit .and", (7, 1), 80)), effects=fx((0,), lanes="warp")),
    fam("mma", "*, *, *, *, ...", ptx=(6, 4), sm=70, group="mma", summary="warp-level matrix multiply-add",
        needs=[("", _set(".m8n8k4 .m16n8k4 .m16n8k8 .m16n8k16 .m16n8k32 .m16n8k64 .m16n8k128 .m16n8k256 .m8n8k16 "
                         ".m8n8k32 .m8n8k128"))],
        gates=(
            gate("m16n8k8&T1=f16", ".f16 .m16n8k8", (6, 5), 75),
            gate("m8n8k16|m8n8k32", "integer .m8n8k16/.m8n8k32", (6, 5), 75),
            gate("m8n8k128", "single-bit .m8n8k128", (7, 0), 75),
            gate("m8n8k4&T0=f64", ".f64 .m8n8k4", (7, 0), 80),
            gate("m16n8k16&T1=f16|bf16|tf32", ".f16 .m16n8k16, .bf16, .tf32", (7, 0), 80),
            gate("m16n8k16&s8|m16n8k16&u8|m16n8k32&s8|m16n8k32&u8|m16n8k32&s4|m16n8k32&u4|m16n8k64&s4"
                 "|m16n8k64&u4|m16n8k128&b1|m16n8k256", "integer/single-bit m16n8 shapes", (7, 0), 80),
            gate("and", "single-bit .and", (7, 1), 80),
            gate(SHAPES_F64_90, ".f64 .m16n8k4/k8/k16", (7, 8), 90),
            gate("e4m3|e5m2", "types .e4m3/.e5m2", (8, 4), 89),
            gate("m16n8k16&e4m3|m16n8k16&e5m2|T0=f16&e4m3|T0=f16&e5m2", ".m16n8k16 / .f16 with fp8", (8, 7), 89),
            gate("e3m2|e2m3|e2m1", "types .e3m2/.e2m3/.e2m1", (8, 7), 120, "a", SM120A),
            gate("kind*|block_scale|scale_vec*", ".kind/.block_scale/.scale_vec", (8, 7), 120, "a", SM120A),
            gate("sp|sp::ordered_metadata", "mma.sp", (7, 1), 80),
            gate("sp::ordered_metadata", "mma.sp::ordered_metadata", (8, 5), 80),
        ), effects=fx((0,), lanes="warp")),
    fam("ldmatrix", "*, A", mods=_set(".sync .aligned .m8n8 .m16n16 .m8n16 .x1 .x2 .x4 .trans .shared "
                                      ".shared::cta .b8x16 .b6x16_p32 .b4x16_p64"),
        types=_set(".b16 .b8"), ntypes=(1,), ptx=(6, 5), sm=75, group="mma", slots={"num": _set(".x1 .x2 .x4")},
        needs=[("", _set(".m8n8 .m16n16 .m8n16")), ("", (".sync",)), ("", (".aligned",)),
               ("", _set(".x1 .x2 .x4"))],
        summary="load matrices from shared memory",
        gates=(gate("shared::cta", "modifier .shared::cta", (7, 8), 75),
               gate("m16n16|m8n16|b8|b8x16", "shapes .m16n16/.m8n16, .b8", (8, 6), 100, "a", BLACKWELL_A)),
               effects=fx((0,), "load", "warp", loaded=(0,))),
    fam("stmatrix", "A, *", mods=_set(".sync .aligned .m8n8 .m16n8 .x1 .x2 .x4 .trans .shared .shared::cta"),
        types=_set(".b16 .b8"), ntypes=(1,), ptx=(7, 8), sm=90, group="mma", slots={"num": _set(".x1 .x2 .x4")},
        needs=[("", _set(".m8n8 .m16n8")), ("", (".sync",)), ("", (".aligned",)), ("", _set(".x1 .x2 .x4"))],
        summary="store matrices to shared memory",
        gates=(gate("m16n8|b8", "shape .m16n8, .b8", (8, 6), 100, "a", BLACKWELL_A),), effects=fx((), "store", "warp")),
    fam("movmatrix", ".b32, .b32", mods=_set(".sync .aligned .m8n8 .trans"), types=_set(".b16"), ntypes=(1,),
        ptx=(7, 8), sm=75, group="mma", summary="transpose a matrix in registers", effects=fx((0,), lanes="warp")),
    # ------------------------------------------------------------------ wgmma (sm_90a)
    fam("wgmma.mma_async", "*, *, *, ...", ptx=(8, 0), sm=90, sfx="a", group="wgmma",
        summary="warpgroup matrix multiply-add",
        gates=(gate("sp", "wgmma.mma_async.sp", (8, 2), 90, "a"),
               gate("T1=u8&T2=s8|T1=s8&T2=u8", "mixed .u8/.s8 operands", (8, 4), 90, "a")),
               effects=fx((0,), "async", "block")),
    fam("wgmma.fence", "", mods=_set(".sync .aligned"), ptx=(8, 0), sm=90, sfx="a", group="wgmma",
        effects=fx((), "async", "block")),
    fam("wgmma.commit_group", "", mods=_set(".sync .aligned"), ptx=(8, 0), sm=90, sfx="a", group="wgmma",
        effects=fx((), "async", "block")),
    fam("wgmma.wait_group", "I", mods=_set(".sync .aligned"), ptx=(8, 0), sm=90, sfx="a", group="wgmma",
        effects=fx((), "async", "block")),
    # ------------------------------------------------------------------ tcgen05 (sm_100a family)
    fam("tcgen05.alloc", "A, .u32", **TCGEN, summary="allocate tensor memory", effects=fx((), "store", "warp")),
    fam("tcgen05.dealloc", ".b32, .u32", **TCGEN, effects=fx(lanes="warp")),
    fam("tcgen05.relinquish_alloc_permit", "", **TCGEN, effects=fx(lanes="warp")),
    fam("tcgen05.ld", "*, *, *?, *?", **TCGEN, summary="load from tensor memory",
        gates=(gate("red", "tcgen05.ld.red", (8, 8), 103, "f", ("sm_110a", "sm_110f")),),
        effects=fx((0,), "load", "warp", loaded=(0,))),
    fam("tcgen05.st", "A, *, *?", **TCGEN, summary="store to tensor memory", effects=fx((), "store", "warp")),
    fam("tcgen05.wait", "", **TCGEN, slots={"form": _set(".wait::ld .wait::st")},
        effects=fx((), "async", "warp")),  # spelled with the name part
    fam("tcgen05.cp", "A, *", **TCGEN, summary="copy shared memory to tensor memory", effects=fx((), "async")),
    fam("tcgen05.shift", "A", ptx=(8, 6), sm=100, sfx="a", also=("sm_103a", "sm_110a"), group="tcgen05",
        effects=fx((), "async")),
    fam("tcgen05.mma", "*, *, *, ...", **TCGEN, summary="5th-generation tensor core multiply-add",
        gates=(gate("kind::i8", "modifier .kind::i8", (8, 6), 100, "a", ("sm_110a",)),
               gate("kind::mxf4nvf4", "modifier .kind::mxf4nvf4", (8, 7), 100, "a", BLACKWELL_DC),
               gate("block16|block32", "modifiers .block16/.block32", (8, 8), 100, "f", ("sm_110f",))),
               effects=fx((), "async")),
    fam("tcgen05.commit", "A, *?", **TCGEN, effects=fx((), "async")),
    fam("tcgen05.fence", "", **TCGEN, slots={"form": _set(".fence::before_thread_sync .fence::after_thread_sync")},
        effects=fx((), "async")),
]

__all__ = ["SPECS"]
