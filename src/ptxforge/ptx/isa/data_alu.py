"""ISA table: integer, floating-point, half-precision, mixed-precision, comparison and logic
instructions (PTX ISA 9.0 manual sections 9.7.1-9.7.8). Versions and targets are from each
instruction's "PTX ISA Notes" and "Target ISA Notes"."""

from __future__ import annotations

from ptxforge.ptx.isa.build import (
    CARRY,
    HALF,
    INT,
    RESULT,
    RND,
    B,
    F,
    S,
    _set,
    fam,
    gate,
)

F16_GATES = (
    gate("f16|f16x2", "type .f16/.f16x2", (4, 2), 53),
    gate("bf16|bf16x2", "type .bf16/.bf16x2", (7, 8), 90),
)
F32X2 = gate("f32x2", "type .f32x2", (8, 6), 100)
MIXED = gate("T1=f16|T1=bf16", "mixed precision .f32.f16/.bf16", (8, 6), 100)
RM_RP = gate("rm&T0=f32|rp&T0=f32", "rounding .rm/.rp on .f32", (2, 0), 20)
FTZ_SAT = _set(".ftz .sat")
F32ISH = _set(".f32 .f32x2 .f16 .f16x2")  # types that take .ftz/.sat (not .f64, not .bf16)
ADD_MOD_TYPES = {".sat": _set(".s32") | F32ISH, ".ftz": F32ISH, ".cc": _set(".u32 .s32 .u64 .s64")}
MINMAX_OPS = [("T0=f32", "T, T, T, T?"), ("", "T, T, T")]  # only min/max.f32 take a third input
FTZ32 = {".ftz": _set(".f32 .f16 .f16x2")}
HALF_ONLY = HALF
WIDE = _set(".u16 .u32 .s16 .s32")
MIXED_COMBOS = [".f32 .f16", ".f32 .bf16"]
MINMAX_TYPES = {".ftz": _set(".f32 .f16 .f16x2"), ".NaN": _set(".f32") | HALF, ".xorsign": _set(".f32") | HALF,
                ".abs": _set(".f32") | HALF, ".relu": _set(".s32 .s16x2")}
HALF_MODS = _set(".rn .ftz .sat .relu .oob")
INT_TYPE = "T0=u16|T0=s16|T0=u32|T0=s32|T0=u64|T0=s64"  # integer mul/mad need .lo, .hi or .wide
INT_CMPS = _set(".eq .ne .lt .le .gt .ge .lo .ls .hi .hs")  # setp/set's CmpOp on integer and bit types
FLOAT_CMPS = _set(".eq .ne .lt .le .gt .ge .equ .neu .ltu .leu .gtu .geu .num .nan")  # ... on float types
COMPARISONS = INT_CMPS | FLOAT_CMPS
BOOL_OPS = _set(".and .or .xor")
CMP_SLOTS = {"cmp_int": INT_CMPS, "cmp_float": FLOAT_CMPS, "boolop": BOOL_OPS}
RND_SLOT = {"rnd": RND}  # the rounding group of the float arithmetic
BIT_MODES = _set(".clamp .wrap")  # bmsk/szext: a position or width past 32 clamps or wraps
TESTP_CLASSES = _set(".finite .infinite .number .notanumber .normal .subnormal")

SPECS = [
    # ------------------------------------------------------------------ integer + float + half arithmetic
    fam("add", [("T1=f16|T1=bf16", "T0, T1, T0"), ("", "T, T, T")], arith=True,
        types=INT | _set(".u16x2 .s16x2") | F | _set(".f32x2") | HALF, ntypes=(1, 2),
        mods=RND | FTZ_SAT | _set(".cc"), mod_types=ADD_MOD_TYPES, combos=MIXED_COMBOS, slots=RND_SLOT,
        group="arith", summary="addition",
        gates=(gate("u16x2|s16x2", "type .u16x2/.s16x2", (8, 0), 90), *F16_GATES, F32X2, MIXED, RM_RP,
               gate("cc", "add.cc", (1, 2)),
               gate("cc&T0=u64|cc&T0=s64", "64-bit add.cc", (4, 3), 20)), effects=RESULT, effects_when={"cc": CARRY}),
    fam("sub", [("T1=f16|T1=bf16", "T0, T1, T0"), ("", "T, T, T")], arith=True,
        types=INT | F | _set(".f32x2") | HALF, ntypes=(1, 2), mods=RND | FTZ_SAT | _set(".cc"),
        mod_types=ADD_MOD_TYPES, combos=MIXED_COMBOS, slots=RND_SLOT,
        group="arith", summary="subtraction",
        gates=(*F16_GATES, F32X2, MIXED, RM_RP, gate("cc", "sub.cc", (1, 2)),
               gate("cc&T0=u64|cc&T0=s64", "64-bit sub.cc", (4, 3), 20)), effects=RESULT, effects_when={"cc": CARRY}),
    fam("mul", [("wide", "W, T, T"), ("", "T, T, T")], arith=True,
        types=INT | F | _set(".f32x2") | HALF, ntypes=(1,), mods=_set(".hi .lo .wide") | RND | FTZ_SAT,
        needs=[(INT_TYPE, _set(".hi .lo .wide"))],
        mod_types={".sat": F32ISH, ".ftz": F32ISH, ".wide": WIDE}, slots=RND_SLOT,
        group="arith", summary="multiplication",
        gates=(*F16_GATES, F32X2, RM_RP), effects=RESULT),
    fam("mad", [("wide", "W, T, T, W"), ("", "T, T, T, T")], arith=True,
        types=INT | F, ntypes=(1,), mods=_set(".hi .lo .wide .sat .cc") | RND | FTZ_SAT,
        needs=[("T0=f32|T0=f64", RND), (INT_TYPE, _set(".hi .lo .wide"))],
        mod_types={".sat": _set(".s32 .f32"), ".ftz": _set(".f32"), ".wide": WIDE}, slots=RND_SLOT,
        group="arith", summary="multiply-add",
        gates=(gate("cc", "mad.cc", (3, 0), 20), gate("cc&T0=u64|cc&T0=s64", "64-bit mad.cc", (4, 3), 20),
               gate("T0=f32&rn|T0=f32&rz|T0=f32&rm|T0=f32&rp", "mad.f32 with rounding", (2, 0), 20)),
               effects=RESULT, effects_when={"cc": CARRY}),
    fam("fma", [("T1=f16|T1=bf16", "T0, T1, T1, T0"), ("", "T, T, T, T")], arith=True,
        types=F | _set(".f32x2") | HALF, ntypes=(1, 2), mods=RND | HALF_MODS,
        needs=[("T0=f32|T0=f64|T0=f32x2", RND)], combos=MIXED_COMBOS,
        mod_types={".sat": F32ISH, ".ftz": F32ISH, ".relu": HALF, ".oob": HALF}, slots=RND_SLOT,
        group="float", summary="fused multiply-add",
        gates=(gate("T0=f32", "fma.f32", (2, 0), 20), gate("T0=f64", "fma.f64", (1, 4), 13),
               gate("f16|f16x2", "type .f16/.f16x2", (4, 2), 53),
               gate("relu|bf16|bf16x2", "fma.relu / .bf16", (7, 0), 80),
               gate("oob", "modifier .oob", (8, 1), 90), F32X2, MIXED), effects=RESULT),
    fam("mul24", "T, T, T", types=_set(".u32 .s32"), ntypes=(1,), mods=_set(".hi .lo"), group="arith",
        summary="24-bit multiply", effects=RESULT),
    fam("mad24", "T, T, T, T", types=_set(".u32 .s32"), ntypes=(1,), mods=_set(".hi .lo .sat"), group="arith",
        summary="24-bit multiply-add", effects=RESULT),
    fam("sad", "T, T, T, T", types=INT, ntypes=(1,), mods=_set(""), group="arith",
        summary="sum of absolute differences", effects=RESULT),
    fam("div", "T, T, T", arith=True, types=INT | F, ntypes=(1,), mods=_set(".approx .full .ftz") | RND,
        needs=[("T0=f32|T0=f64", _set(".approx .full") | RND)],
        mod_types={".approx": _set(".f32"), ".full": _set(".f32"), ".ftz": _set(".f32")}, slots=RND_SLOT,
        group="arith", summary="division",
        gates=(gate("T0=f32&rn|T0=f32&rz|T0=f32&rm|T0=f32&rp", "div.rnd.f32", (1, 4), 20),
               gate("T0=f64&rz|T0=f64&rm|T0=f64&rp", "div.{rz,rm,rp}.f64", (1, 4), 20)), effects=RESULT),
    fam("rem", "T, T, T", types=INT, ntypes=(1,), mods=_set(""), group="arith", summary="remainder", effects=RESULT),
    fam("abs", "T, T", arith=True, types=S | F | HALF, ntypes=(1,), mods=_set(".ftz"), mod_types=FTZ32, group="arith",
        summary="absolute value",
        gates=(gate("f16|f16x2", "type .f16/.f16x2", (6, 5), 53), gate("bf16|bf16x2", "type .bf16", (7, 0), 80)),
        effects=RESULT),
    fam("neg", "T, T", arith=True, types=S | F | HALF, ntypes=(1,), mods=_set(".ftz"), mod_types=FTZ32, group="arith",
        summary="negate",
        gates=(gate("f16|f16x2", "type .f16/.f16x2", (6, 0), 53), gate("bf16|bf16x2", "type .bf16", (7, 0), 80)),
        effects=RESULT),
    fam("min", MINMAX_OPS, arith=True, types=INT | _set(".u16x2 .s16x2") | F | HALF, ntypes=(1,),
        mods=_set(".relu .ftz .NaN .xorsign .abs"), mod_types=MINMAX_TYPES, group="arith", summary="minimum",
        gates=(gate("u16x2|s16x2|relu&T0=s32", "min.u16x2/.s16x2/.relu", (8, 0), 90),
               gate("f16|f16x2|bf16|bf16x2", "type .f16/.bf16", (7, 0), 80),
               gate("NaN", "modifier .NaN", (7, 0), 80), gate("xorsign", "modifier .xorsign.abs", (7, 2), 86),
               gate("#4", "three inputs", (8, 8), 100)), effects=RESULT),
    fam("max", MINMAX_OPS, arith=True, types=INT | _set(".u16x2 .s16x2") | F | HALF, ntypes=(1,),
        mods=_set(".relu .ftz .NaN .xorsign .abs"), mod_types=MINMAX_TYPES, group="arith", summary="maximum",
        gates=(gate("u16x2|s16x2|relu&T0=s32", "max.u16x2/.s16x2/.relu", (8, 0), 90),
               gate("f16|f16x2|bf16|bf16x2", "type .f16/.bf16", (7, 0), 80),
               gate("NaN", "modifier .NaN", (7, 0), 80), gate("xorsign", "modifier .xorsign.abs", (7, 2), 86),
               gate("#4", "three inputs", (8, 8), 100)), effects=RESULT),
    fam("popc", ".u32, T", types=_set(".b32 .b64"), ntypes=(1,), mods=_set(""), ptx=(2, 0), sm=20,
        group="int", summary="population count", effects=RESULT),
    fam("clz", ".u32, T", types=_set(".b32 .b64"), ntypes=(1,), mods=_set(""), ptx=(2, 0), sm=20,
        group="int", summary="count leading zeros", effects=RESULT),
    fam("bfind", ".u32, T", types=_set(".u32 .u64 .s32 .s64"), ntypes=(1,), mods=_set(".shiftamt"),
        ptx=(2, 0), sm=20, group="int", summary="find most significant non-sign bit", effects=RESULT),
    fam("fns", ".b32, .b32, .u32, .s32", types=_set(".b32"), ntypes=(1,), mods=_set(""), ptx=(6, 0), sm=30,
        group="int", summary="find n-th set bit", effects=RESULT),
    fam("brev", "T, T", types=_set(".b32 .b64"), ntypes=(1,), mods=_set(""), ptx=(2, 0), sm=20,
        group="int", summary="bit reverse", effects=RESULT),
    fam("bfe", "T, T, .u32, .u32", types=_set(".u32 .u64 .s32 .s64"), ntypes=(1,), mods=_set(""),
        ptx=(2, 0), sm=20, group="int", summary="bit field extract", effects=RESULT),
    fam("bfi", "T, T, T, .u32, .u32", types=_set(".b32 .b64"), ntypes=(1,), mods=_set(""), ptx=(2, 0), sm=20,
        group="int", summary="bit field insert", effects=RESULT),
    fam("szext", "T, T, .u32", types=_set(".u32 .s32"), ntypes=(1,), mods=BIT_MODES, slots={"mode": BIT_MODES},
        needs=[("", BIT_MODES)], ptx=(7, 6), sm=70, group="int", summary="sign/zero extend a bit field",
        effects=RESULT),
    fam("bmsk", "T, .u32, .u32", types=_set(".b32"), ntypes=(1,), mods=BIT_MODES, slots={"mode": BIT_MODES},
        needs=[("", BIT_MODES)], ptx=(7, 6), sm=70, group="int", summary="bit mask", effects=RESULT),
    fam("dp4a", "T0, T0, T1, T0", types=_set(".u32 .s32"), ntypes=(2,), mods=_set(""), ptx=(5, 0),
        sm=61, group="int", summary="four-way byte dot product-accumulate", effects=RESULT),
    fam("dp2a", "T0, T0, T1, T0", types=_set(".u32 .s32"), ntypes=(2,), mods=_set(".lo .hi"),
        ptx=(5, 0), sm=61, group="int", summary="two-way dot product-accumulate", effects=RESULT),
    fam("addc", "T, T, T", types=_set(".u32 .s32 .u64 .s64"), ntypes=(1,), mods=_set(".cc"), ptx=(1, 2),
        group="int", summary="add with carry-in",
        gates=(gate("T0=u64|T0=s64", "64-bit addc", (4, 3), 20),), effects=CARRY),
    fam("subc", "T, T, T", types=_set(".u32 .s32 .u64 .s64"), ntypes=(1,), mods=_set(".cc"), ptx=(1, 2),
        group="int", summary="subtract with borrow-in",
        gates=(gate("T0=u64|T0=s64", "64-bit subc", (4, 3), 20),), effects=CARRY),
    fam("madc", "T, T, T, T", types=_set(".u32 .s32 .u64 .s64"), ntypes=(1,), mods=_set(".hi .lo .cc"),
        ptx=(3, 0), sm=20, group="int", summary="multiply-add with carry-in",
        gates=(gate("T0=u64|T0=s64", "64-bit madc", (4, 3), 20),), effects=CARRY),
    # ------------------------------------------------------------------ floating point only
    fam("testp", "P, T", types=F, ntypes=(1,), mods=TESTP_CLASSES, slots={"class": TESTP_CLASSES}, ptx=(2, 0),
        sm=20,
        group="float", summary="test a floating-point property", effects=RESULT),
    fam("copysign", "T, T, T", types=F, ntypes=(1,), mods=_set(""), ptx=(2, 0), sm=20, group="float",
        summary="copy sign", effects=RESULT),
    fam("rcp", "T, T", types=F, ntypes=(1,), mods=_set(".approx .ftz") | RND,
        needs=[("", _set(".approx") | RND), ("T0=f64&approx", (".ftz",))], mod_types={".ftz": F},
        slots=RND_SLOT, group="float", summary="reciprocal",
        gates=(gate("T0=f32&rn|T0=f32&rz|T0=f32&rm|T0=f32&rp", "rcp.rnd.f32", (2, 0), 20),
               gate("T0=f64&approx", "rcp.approx.ftz.f64", (2, 1), 20)), effects=RESULT),
    fam("sqrt", "T, T", types=F, ntypes=(1,), mods=_set(".approx .ftz") | RND,
        needs=[("", _set(".approx") | RND)], mod_types={".approx": _set(".f32"), ".ftz": _set(".f32")},
        slots=RND_SLOT, group="float", summary="square root",
        gates=(gate("T0=f32&rn|T0=f32&rz|T0=f32&rm|T0=f32&rp", "sqrt.rnd.f32", (2, 0), 20),), effects=RESULT),
    fam("rsqrt", "T, T", types=F, ntypes=(1,), mods=_set(".approx .ftz"), needs=[("", _set(".approx"))],
        group="float", summary="reciprocal square root",
        gates=(gate("T0=f64&ftz", "rsqrt.approx.ftz.f64", (4, 0), 20),), effects=RESULT),
    fam("sin", "T, T", types=_set(".f32"), ntypes=(1,), mods=_set(".approx .ftz"),
        needs=[("", _set(".approx"))], group="float", summary="sine", effects=RESULT),
    fam("cos", "T, T", types=_set(".f32"), ntypes=(1,), mods=_set(".approx .ftz"),
        needs=[("", _set(".approx"))], group="float", summary="cosine", effects=RESULT),
    fam("lg2", "T, T", types=_set(".f32"), ntypes=(1,), mods=_set(".approx .ftz"),
        needs=[("", _set(".approx"))], group="float", summary="base-2 logarithm", effects=RESULT),
    fam("ex2", "T, T", types=_set(".f32") | HALF, ntypes=(1,), mods=_set(".approx .ftz"),
        needs=[("", _set(".approx"))], mod_types={".ftz": _set(".f32 .bf16 .bf16x2")}, group="float",
        summary="base-2 exponential",
        gates=(gate("f16|f16x2", "ex2 on .f16/.f16x2", (7, 0), 75),
               gate("bf16|bf16x2", "ex2.approx.ftz.bf16", (7, 8), 90)), effects=RESULT),
    fam("tanh", "T, T", types=_set(".f32") | HALF, ntypes=(1,), mods=_set(".approx"),
        needs=[("", _set(".approx"))], ptx=(7, 0), sm=75, group="float", summary="hyperbolic tangent",
        gates=(gate("bf16|bf16x2", "tanh.approx.bf16", (7, 8), 90),), effects=RESULT),
    # ------------------------------------------------------------------ comparison and selection
    fam("set", "T0, T1, T1, P?", types=INT | B | F | HALF | _set(".u16 .s16 .f32"), ntypes=(2,),
        slots=CMP_SLOTS, group="compare", summary="compare and set a value",
        gates=(gate("T1=f16|T1=f16x2", "set on .f16/.f16x2", (4, 2), 53),
               gate("T1=f16&!T0=f16|T1=f16x2&!T0=f16x2", "set with an integer result from .f16", (6, 5), 53),
               gate("T1=bf16|T1=bf16x2|T0=bf16", "set on .bf16", (7, 8), 90)), effects=RESULT),
    fam("setp", "PP, T, T, P?", types=INT | B | F | HALF, ntypes=(1,), group="compare",
        needs=[("", COMPARISONS), ("#4", BOOL_OPS)], mod_types={".ftz": _set(".f32 .f16 .f16x2")},
        mods=COMPARISONS | BOOL_OPS | _set(".ftz"), slots=CMP_SLOTS,
        summary="compare and set predicates",
        gates=(gate("f16|f16x2", "setp on .f16/.f16x2", (4, 2), 53),
               gate("bf16|bf16x2", "setp on .bf16/.bf16x2", (7, 8), 90)), effects=RESULT),
    fam("selp", "T, T, T, P", types=INT | B | F, ntypes=(1,), mods=_set(""), group="compare",
        summary="select with a predicate", effects=RESULT),
    fam("slct", "T0, T0, T0, T1", types=INT | B | F | _set(".s32"), ntypes=(2,), mods=_set(".ftz"),
        group="compare", summary="select on the sign of the third operand", effects=RESULT),
    # ------------------------------------------------------------------ logic and shift
    fam("and", "T, T, T", types=B | _set(".pred"), ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("or", "T, T, T", types=B | _set(".pred"), ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("xor", "T, T, T", types=B | _set(".pred"), ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("not", "T, T", types=B | _set(".pred"), ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("cnot", "T, T", types=B, ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("lop3", [("or|and", "TP, T, T, T, I, P"), ("", "T, T, T, T, I")], types=_set(".b32"),
        ntypes=(1,), mods=_set(".or .and"), slots={"boolop": _set(".or .and")}, ptx=(4, 3), sm=50, group="logic",
        summary="arbitrary three-input logic",
        gates=(gate("or|and", "lop3 with .BoolOp", (8, 2), 70),), effects=RESULT),
    fam("shf", "T, T, T, .u32", types=_set(".b32"), ntypes=(1,), mods=_set(".l .r .clamp .wrap"), ptx=(3, 1),
        sm=32, group="logic", summary="funnel shift", effects=RESULT),
    fam("shl", "T, T, .u32", types=B, ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("shr", "T, T, .u32", types=B | INT, ntypes=(1,), mods=_set(""), group="logic", effects=RESULT),
    fam("prmt", "T, T, T, T", types=_set(".b32"), ntypes=(1,), mods=_set(".f4e .b4e .rc8 .ecl .ecr .rc16"),
        ptx=(2, 0), sm=20, group="logic", summary="permute bytes", effects=RESULT),
]

# video instructions: operands take optional byte/half selectors and are not checked in detail; the modifiers are
# left open, their groups named: the secondary operation, vset's comparison, the shift mode, vmad's scaling
VIDEO_SECOP = _set(".add .min .max")
VIDEO_CMP = _set(".eq .ne .lt .le .gt .ge")
VIDEO_SLOTS = {"vshl": {"mode": _set(".clamp .wrap")}, "vshr": {"mode": _set(".clamp .wrap")},
               "vset": {"cmp": VIDEO_CMP}, "vmad": {"scale": _set(".shr7 .shr15")}}
SPECS += [fam(name, "*, ...", ptx=(2, 0), sm=20, group="video",
              slots=({"secop": VIDEO_SECOP} if name != "vmad" else {}) | VIDEO_SLOTS.get(name, {}), effects=RESULT)
          for name in "vadd vsub vabsdiff vmin vmax vshl vshr vmad vset".split()]
SPECS += [fam(name, "*, ...", ptx=(3, 0), sm=30, group="video",
              slots={"cmp": VIDEO_CMP} if name.startswith("vset") else {}, effects=RESULT)
          for name in ("vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 "
                       "vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4 vset4").split()]

__all__ = ["SPECS"]
