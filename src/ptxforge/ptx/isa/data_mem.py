"""ISA table: data movement and conversion (mov, ld, st, cvt, cvta, shfl, prefetch, cp.async and
the bulk/tensor copies, multimem, tensormap), atomics and reductions, texture and surface
instructions (PTX ISA 9.0 manual sections 9.7.9-9.7.11 and 9.7.13.5-6)."""

from __future__ import annotations

from ptxforge.ptx.isa.build import (
    B8,
    BLACKWELL_A,
    BLACKWELL_DC,
    IRND,
    NOTHING,
    RESULT,
    RND,
    S8,
    SCOPE,
    SPACES,
    U8,
    VEC,
    _set,
    fam,
    fx,
    gate,
    removed,
)

LDST_TYPES = B8 | U8 | S8 | _set(".b128 .f32 .f64")
EVICT_L1 = "L1::evict_normal|L1::evict_unchanged|L1::evict_first|L1::evict_last|L1::no_allocate"
EVICT_L2 = "L2::evict_normal|L2::evict_first|L2::evict_last"
CACHE_MODS = _set(".ca .cg .cs .lu .cv .wb .wt .nc .L2::cache_hint .L2::64B .L2::128B .L2::256B .unified "
                  ".L1::evict_normal .L1::evict_unchanged .L1::evict_first .L1::evict_last .L1::no_allocate "
                  ".L2::evict_normal .L2::evict_first .L2::evict_last")
LDST_MODS = (_set(".weak .volatile .relaxed .acquire .release .mmio .global .shared .shared::cta "
                  ".shared::cluster .local .const .param .param::entry .param::func")
             | SCOPE | VEC | CACHE_MODS)

LDST_GATES = (
    gate("relaxed|acquire|release|weak|cta|gpu|sys|cluster", "scope and .relaxed/.acquire/.release/.weak",
         (6, 0), 70),
    gate(EVICT_L1, "modifier .L1::evict_*/.L1::no_allocate", (7, 4), 70),
    gate("L2::64B|L2::128B", "modifier .L2::64B/.L2::128B", (7, 4), 75),
    gate("L2::256B", "modifier .L2::256B", (7, 4), 80),
    gate("L2::cache_hint", "modifier .L2::cache_hint", (7, 4), 80),
    gate("cluster|shared::cluster", ".cluster scope / .shared::cluster", (7, 8), 90),
    gate("shared::cta", "modifier .shared::cta", (7, 8), 30),
    gate("mmio", "modifier .mmio", (8, 2), 70),
    gate("param::entry|param::func", "modifier .param::entry/.param::func", (8, 3), 70),
    gate("b128", "type .b128", (8, 3), 70),
    gate("b128&sys", ".sys scope with .b128", (8, 4), 70),
    gate(EVICT_L2, "modifier .L2::evict_*", (8, 8), 100),
    gate("v8|v4&T0=b64|v4&T0=u64|v4&T0=s64|v4&T0=f64", ".v8 / .v4 of 64-bit values", (8, 8), 100),
    gate("volatile&local", ".volatile on .local", (9, 1), 0),
)

CVT_TYPES = U8 | S8 | _set(".bf16 .f16 .f32 .f64 .f16x2 .bf16x2 .tf32 .e4m3x2 .e5m2x2 .e2m1x2 .e2m3x2 "
                          ".e3m2x2 .ue8m0x2 .e2m1x4 .e4m3x4 .e5m2x4 .e2m3x4 .e3m2x4 .s2f6x2")
X2_FROM_F32 = "|".join(f"T0={t}&T1=f32" for t in
                       "f16x2 bf16x2 e4m3x2 e5m2x2 e2m1x2 e2m3x2 e3m2x2 ue8m0x2 s2f6x2".split())
X4 = "T0=e2m1x4|T0=e4m3x4|T0=e5m2x4|T0=e2m3x4|T0=e3m2x4"
FP6_FP4 = "e2m1x2|e2m3x2|e3m2x2|ue8m0x2"

ATOM_GATES = (
    gate("T0=f32&add", "atom.add.f32", (2, 0), 20),
    gate("T0=f64&add", "atom.add.f64", (5, 0), 60),
    gate("cta|gpu|sys", "scope qualifier", (5, 0), 60),
    gate("relaxed|acquire|release|acq_rel", ".sem qualifier", (6, 0), 70),
    gate("T0=f16x2", "type .f16x2", (6, 2), 60),
    gate("T0=f16|T0=b16", "type .f16 / cas.b16", (6, 3), 70),
    gate("L2::cache_hint", "modifier .L2::cache_hint", (7, 4), 80),
    gate("bf16|bf16x2", "type .bf16/.bf16x2", (7, 8), 90),
    gate("cluster|shared::cluster", ".cluster scope / .shared::cluster", (7, 8), 90),
    gate("shared::cta", "modifier .shared::cta", (7, 8), 30),
    gate("v2|v4|v8", "vector types", (8, 1), 90),
    gate("b128", "type .b128", (8, 3), 90),
    gate("b128&sys", ".sys scope with .b128", (8, 4), 90),
)
SHFL_MODES = _set(".up .down .bfly .idx")
BULK_RED_OPS = _set(".add .min .max .inc .dec .and .or .xor")  # cp.reduce.async.bulk{.tensor}'s .redOp
ATOM_OP = _set(".and .or .xor .cas .exch .add .inc .dec .min .max")  # atom/red's .op
ATOM_MODS = (_set(".global .shared .shared::cta .shared::cluster .relaxed .acquire .release .acq_rel .noftz "
                  ".L2::cache_hint") | ATOM_OP | SCOPE | VEC)
SCOPED = "cta|cluster|gpu|sys"  # a scope on ld/st needs a memory order ("requires memory order")
ATOM_OPS = {
    ".inc": _set(".u32"), ".dec": _set(".u32"), ".and": _set(".b32 .b64"), ".or": _set(".b32 .b64"),
    ".xor": _set(".b32 .b64"), ".exch": _set(".b32 .b64 .b128"), ".cas": _set(".b16 .b32 .b64 .b128"),
    ".add": _set(".u32 .s32 .u64 .f32 .f64 .f16 .f16x2 .bf16 .bf16x2"),
    ".min": _set(".u32 .s32 .u64 .s64 .f16 .f16x2 .bf16 .bf16x2"),
    ".max": _set(".u32 .s32 .u64 .s64 .f16 .f16x2 .bf16 .bf16x2"),
    ".noftz": _set(".f16 .f16x2 .bf16 .bf16x2"),
}
HALF_ADD = "add&T0=f16|add&T0=f16x2|add&T0=bf16|add&T0=bf16x2"
ATOM_TYPES = _set(".b16 .b32 .b64 .b128 .u32 .u64 .s32 .s64 .f32 .f64 .f16 .f16x2 .bf16 .bf16x2")

# st.bulk (PTX ISA 9.7.9.13): `size` bytes, a multiple of 8 up to 16777216, all set to `initval`, which must be 0;
# a 32-bit size operand needs PTX ISA 9.0 (a 64-bit one: 8.6)
ST_BULK_GRANULE = 8
ST_BULK_MAX_SIZE = 16777216
ST_BULK_SIZE32_PTX = (9, 0)

# cp.async.bulk{.tensor}.shared::cta.global...: a .shared::cta destination (the source is then .global)
DST_CTA = gate("shared::cta&global&mbarrier::complete_tx::bytes", "destination .shared::cta", (8, 6), 90)

SPECS = [
    # ------------------------------------------------------------------ moves and loads/stores
    fam("mov", [("v2|v4", "Tv, Tvp"), ("", "Tp, Tp")],
        types=_set(".pred .b16 .b32 .b64 .b128 .u16 .u32 .u64 .s16 .s32 .s64 .f32 .f64"),
        ntypes=(1,), mods=_set(".v2 .v4"), group="data",
        summary="move, or pack/unpack with braces; .v2/.v4 move vector registers element by element",
        gates=(gate("b128", "type .b128", (8, 3), 70),), effects=RESULT),
    fam("ld", "Tv, A, .b64?", types=LDST_TYPES, ntypes=(1,), mods=LDST_MODS, relaxed=True, group="data",
        slots={"vec": VEC, "sem": _set(".weak .volatile .relaxed .acquire .mmio"), "space": SPACES},
        needs=[(EVICT_L2, (".v4", ".v8")), ("#3", (".L2::cache_hint",)), (SCOPED, _set(".relaxed .acquire .mmio")),
               ("nc", (".global",))],  # the non-coherent path reads global memory only
        summary="load", gates=(gate("nc", "ld.global.nc", (3, 1), 32), *LDST_GATES,
                               gate("unified", "modifier .unified", (8, 0), 90)),
        effects=fx((0,), "load", loaded=(0,))),
    fam("ldu", "Tv, A", types=LDST_TYPES, ntypes=(1,), mods=_set(".global") | VEC, relaxed=True, ptx=(2, 0),
        group="data", summary="load read-only uniform data",
        gates=(gate("b128", "type .b128", (8, 3), 70),), effects=fx((0,), "load", loaded=(0,))),
    fam("st", "A, Tv, .b64?", types=LDST_TYPES, ntypes=(1,), mods=LDST_MODS - {".const"}, relaxed=True,
        group="data", slots={"vec": VEC, "sem": _set(".weak .volatile .relaxed .release .mmio")},
        # (constant memory is read-only: ptxas refuses st.const)
        needs=[(EVICT_L2, (".v4", ".v8")), ("#3", (".L2::cache_hint",)), (SCOPED, _set(".relaxed .release .mmio"))],
        summary="store", gates=LDST_GATES, effects=fx((), "store")),
    fam("st.async", "A, Tv, A?", types=LDST_TYPES, ntypes=(1,), ptx=(8, 1), sm=90, group="data",
        summary="asynchronous store to distributed shared memory",
        gates=(gate("mmio|release|global|gpu|sys", ".mmio/.release/.global/.gpu/.sys", (8, 7), 100),),
        effects=fx((), "store")),
    # st.bulk{.weak}{.shared::cta} [a], size, initval: the operand rules (size, initval, the address form) are
    # in check.py's `st_bulk_problems`, reading the ST_BULK_* facts below
    fam("st.bulk", "A, *, I", mods=_set(".weak .shared::cta"), ntypes=(0,), ptx=(8, 6), sm=100, group="data",
        rule="st.bulk", summary="initialize `size` bytes of shared memory to zero", effects=fx((), "store")),
    fam("prefetch", "A", mods=_set(".global .local .L1 .L2 .L2::evict_last .L2::evict_normal .tensormap "
                                   ".const .param"),
        ptx=(2, 0), sm=20, group="data", summary="prefetch to a cache level",
        gates=(gate("L2::evict_last|L2::evict_normal", "eviction priority", (7, 4), 80),
               gate("tensormap", "prefetch.tensormap", (8, 0), 90)), effects=NOTHING),
    fam("prefetchu", "A", mods=_set(".L1"), ptx=(2, 0), sm=20, group="data", effects=NOTHING),
    fam("applypriority", "A, I", ptx=(7, 4), sm=80, group="data",
        summary="apply a cache eviction priority", effects=NOTHING),
    fam("discard", "A, I", ptx=(7, 4), sm=80, group="data", summary="discard a cache line", effects=fx((), "store")),
    fam("createpolicy", "T, ...", types=_set(".b64"), ntypes=(1,), ptx=(7, 4), sm=80, group="data",
        summary="create a cache eviction policy", effects=RESULT),
    fam("isspacep", "P, *", ptx=(2, 0), sm=20, group="data", summary="query the state space of an address",
        gates=(gate("const", "isspacep.const", (3, 1), 20), gate("param*", "isspacep.param", (7, 7), 70),
               gate("shared::cluster", ".shared::cluster", (7, 8), 90)), effects=RESULT),
    fam("cvta", "T, T", types=_set(".u32 .u64"), ntypes=(1,), ptx=(2, 0), sm=20, group="data",
        needs=[("", _set(".global .shared .shared::cta .shared::cluster .local .const .param .param::entry"))],
        mods=_set(".to .global .shared .shared::cta .shared::cluster .local .const .param .param::entry"),
        summary="convert between generic and state-space addresses",
        gates=(gate("const", "cvta.const", (3, 1), 20), gate("param*", "cvta.param", (7, 7), 70),
               gate("shared::cluster", ".shared::cluster", (7, 8), 90),
               gate("param::entry", ".param::entry", (8, 3), 70)), effects=RESULT),
    # ------------------------------------------------------------------ conversions
    fam("cvt", [(X2_FROM_F32, "T0, T1, T1, .b32?"), (X4, "*, ..."), ("T0=bf16x2&T1=s2f6x2|T0=s2f6x2", "*, ...")
                , ("", "T0, T1")],
        types=CVT_TYPES, ntypes=(2,), relaxed=True, rule="cvt",
        mods=IRND | RND | _set(".rna .rs .ftz .sat .satfinite .relu .scaled::n2::ue8m0"), group="data",
        slots={"rnd": RND | _set(".rna .rs"), "irnd": IRND},  # to a float / to an integer
        summary="convert between types",
        gates=(
            gate("relu|T0=f16x2|T0=bf16|T0=bf16x2|T0=tf32", ".relu / .f16x2, .bf16, .bf16x2, .tf32 results",
                 (7, 0), 80),
            gate("T0=f32&T1=bf16", "cvt.f32.bf16", (7, 1), 80),
            gate("T0=bf16&!T1=f32|T1=bf16&!T0=f32", "cvt to/from .bf16 other than .f32", (7, 8), 90),
            gate("T0=tf32&rn|T0=tf32&rz", "cvt.rn/.rz.tf32.f32", (7, 8), 90),
            gate("T0=f32&T1=bf16&ftz", ".ftz on cvt.f32.bf16", (7, 8), 90),
            gate("e4m3x2|e5m2x2", "types .e4m3x2/.e5m2x2", (7, 8), 89, ptx_on=((89, (8, 1)),)),
            gate("satfinite&T1=f32&T0=f16|satfinite&T1=f32&T0=bf16|satfinite&T1=f32&T0=f16x2"
                 "|satfinite&T1=f32&T0=bf16x2|satfinite&T1=f32&T0=tf32&rna", ".satfinite on 16-bit results",
                 (8, 1), 0),
            gate("satfinite&T0=tf32&rn|satfinite&T0=tf32&rz", "cvt.rn/.rz.satfinite.tf32.f32", (8, 6), 100),
            gate(FP6_FP4, "types .e2m1x2/.e2m3x2/.e3m2x2/.ue8m0x2", (8, 6), 100, "a", BLACKWELL_A),
            gate("rs", "rounding .rs", (8, 7), 100, "a", ("sm_103a",)),
            gate(X4, "x4 types", (8, 7), 100, "a", ("sm_103a",)),
            gate("T0=e4m3x2&T1=bf16x2|T0=e5m2x2&T1=bf16x2|T0=e2m1x2&T1=f16x2|T0=e2m1x2&T1=bf16x2"
                 "|T0=e2m3x2&T1=f16x2|T0=e2m3x2&T1=bf16x2|T0=e3m2x2&T1=f16x2|T0=e3m2x2&T1=bf16x2",
                 "cvt from .f16x2/.bf16x2 to 8/6/4-bit pairs", (9, 1), 100, "f", ("sm_110f", "sm_120f")),
            gate("s2f6x2", "type .s2f6x2", (9, 1), 100, "a", ("sm_103a", "sm_110a", "sm_120a", "sm_121a")),
        ), effects=RESULT),
    fam("cvt.pack", [("#3", ".b32, T1, T1"), ("", ".b32, T1, T1, .b32")], types=_set(
        ".u16 .s16 .u8 .s8 .u4 .s4 .u2 .s2 .s32 .b32"), ntypes=(2, 3), mods=_set(".sat"), ptx=(6, 5), sm=72,
        group="data", summary="convert and pack",
        gates=(gate("u4|s4|u2|s2", "sub-byte types", (6, 5), 75),), effects=RESULT),
    # ------------------------------------------------------------------ warp data exchange
    fam("shfl.sync", "TP, T, .b32, .b32, .b32", types=_set(".b32"), ntypes=(1,),
        mods=SHFL_MODES, needs=[("", SHFL_MODES)], slots={"mode": SHFL_MODES},
        ptx=(6, 0), sm=30, group="data", summary="warp shuffle", effects=fx((0,), lanes="warp")),
    fam("shfl", "TP, T, .b32, .b32", types=_set(".b32"), ntypes=(1,), mods=SHFL_MODES, slots={"mode": SHFL_MODES},
        ptx=(3, 0), sm=30, group="data", summary="warp shuffle (deprecated; use shfl.sync)",
        gone=(removed("", (6, 4), 70, "shfl without .sync is not supported on sm_70 or higher from PTX "
                                       "ISA 6.4; use shfl.sync"),), effects=fx((0,), lanes="warp")),
    # ------------------------------------------------------------------ cluster addresses
    fam("mapa", "T, T, .u32", types=_set(".u32 .u64"), ntypes=(1,), mods=_set(".shared::cluster"),
        ptx=(7, 8), sm=90, group="data", summary="map a shared address into another CTA of the cluster",
        effects=fx((0,), lanes="cluster")),
    fam("getctarank", ".u32, T", types=_set(".u32 .u64"), ntypes=(1,), mods=_set(".shared::cluster"),
        ptx=(7, 8), sm=90, group="data", summary="CTA rank of a shared::cluster address",
        effects=fx((0,), lanes="cluster")),
    # ------------------------------------------------------------------ asynchronous copies
    fam("cp.async", "A, A, I, *?, *?", mods=_set(".ca .cg .shared .shared::cta .global .L2::cache_hint "
                                                   ".L2::64B .L2::128B .L2::256B"),
        ptx=(7, 0), sm=80, group="async", summary="asynchronous global-to-shared copy",
        gates=(gate("L2::cache_hint|L2::64B|L2::128B|L2::256B", "cache hint / prefetch size", (7, 4), 80),
               gate("shared::cta", "modifier .shared::cta", (7, 8), 80)), effects=fx((), "async", part="copy")),
    fam("cp.async.commit_group", "", mods=_set(""), ptx=(7, 0), sm=80, group="async",
        effects=fx((), "async", part="commit")),
    fam("cp.async.wait_group", "I", mods=_set(""), ptx=(7, 0), sm=80, group="async",
        effects=fx((), "async", part="wait_group")),
    fam("cp.async.wait_all", "", mods=_set(""), ptx=(7, 0), sm=80, group="async",
        effects=fx((), "async", part="wait_all")),
    fam("cp.async.mbarrier.arrive", "A", types=_set(".b64"), mods=_set(".noinc .shared .shared::cta"),
        ptx=(7, 0), sm=80, group="async", summary="arrive on an mbarrier when prior cp.async complete",
        gates=(gate("shared::cta", "modifier .shared::cta", (7, 8), 80),), effects=fx((), "async", part="arrive")),
    fam("cp.async.bulk", "A, A, *, ...", ptx=(8, 0), sm=90, group="async", summary="bulk asynchronous copy",
        gates=(gate("cp_mask", "modifier .cp_mask", (8, 6), 100), DST_CTA), effects=fx((), "async", part="bulk")),
    fam("cp.reduce.async.bulk", "A, A, *, ...", ptx=(8, 0), sm=90, group="async",
        needs=[("", BULK_RED_OPS)], slots={"redop": BULK_RED_OPS},
        summary="bulk asynchronous copy with reduction", effects=fx((), "atomic", part="bulk")),
    fam("cp.async.bulk.prefetch", "A, *, ...", ptx=(8, 0), sm=90, group="async", effects=fx((), "async", part="bulk")),
    fam("cp.async.bulk.tensor", "*, *, ...", ptx=(8, 0), sm=90, group="async",
        summary="tensor (TMA) asynchronous copy",
        gates=(DST_CTA, gate("tile::gather4|im2col::w", "modifier .tile::gather4/.im2col::w", (8, 6), 100),
               gate("tile::gather4&shared::cluster|im2col::w&shared::cluster",
                    ".tile::gather4/.im2col::w into .shared::cluster", (8, 6), 100, "a", BLACKWELL_DC),
               gate("tile::scatter4", "modifier .tile::scatter4", (8, 6), 100, "a", BLACKWELL_DC),
               gate("im2col::w::128", "modifier .im2col::w::128", (8, 6), 100, "a", BLACKWELL_DC),
               gate("cta_group*", "modifier .cta_group", (8, 6), 100, "a", BLACKWELL_DC)),
        effects=fx((), "async", part="bulk")),
    fam("cp.reduce.async.bulk.tensor", "*, *, ...", ptx=(8, 0), sm=90, group="async", slots={"redop": BULK_RED_OPS},
        effects=fx((), "atomic", part="bulk")),
    fam("cp.async.bulk.prefetch.tensor", "*, ...", ptx=(8, 0), sm=90, group="async",
        gates=(gate("tile::gather4|im2col::w|im2col::w::128", "gather4/im2col::w", (8, 6), 100, "a",
                    BLACKWELL_DC),), effects=fx((), "async", part="bulk")),
    fam("cp.async.bulk.commit_group", "", mods=_set(""), ptx=(8, 0), sm=90, group="async",
        effects=fx((), "async", part="commit")),
    fam("cp.async.bulk.wait_group", "I", mods=_set(".read"), ptx=(8, 0), sm=90, group="async",
        effects=fx((), "async", part="wait_group")),
    fam("multimem.ld_reduce", "Tv, A", ptx=(8, 1), sm=90, group="async", summary="multimem load-reduce",
        gates=(gate("acc::f32", "modifier .acc::f32", (8, 2), 90),
               gate("e5m2|e5m2x2|e5m2x4|e4m3|e4m3x2|e4m3x4", "8-bit float types", (8, 6), 100, "a",
                    ("sm_110a", "sm_120a", "sm_121a", "sm_100f", "sm_110f")),
               gate("acc::f16", "modifier .acc::f16", (8, 6), 100, "a",
                    ("sm_110a", "sm_120a", "sm_121a", "sm_100f", "sm_110f"))), effects=fx((0,), "load")),
    fam("multimem.st", "A, Tv", ptx=(8, 1), sm=90, group="async",
        gates=(gate("e5m2|e5m2x2|e5m2x4|e4m3|e4m3x2|e4m3x4", "8-bit float types", (8, 6), 100, "a",
                    ("sm_110a", "sm_120a", "sm_121a", "sm_100f", "sm_110f")),), effects=fx((), "store")),
    fam("multimem.red", "A, Tv", ptx=(8, 1), sm=90, group="async", effects=fx((), "atomic")),
    fam("multimem.cp.async.bulk", "*, ...", ptx=(9, 1), sm=90, group="async", effects=fx((), "async")),
    fam("multimem.cp.reduce.async.bulk", "*, ...", ptx=(9, 1), sm=90, group="async", effects=fx((), "atomic")),
    fam("tensormap.cp_fenceproxy", "A, A, I", ptx=(8, 3), sm=90, group="async",
        summary="copy a tensor map and fence the tensormap proxy", effects=fx((), "store")),
    fam("tensormap.replace", [("global_address|rank", "A, *"),
                              ("box_dim|global_dim|global_stride|element_stride", "A, I, *"), ("", "A, I")],
        ptx=(8, 3), sm=90, sfx="a", also=("sm_100a",) + BLACKWELL_A,
        mods=_set(".tile .global_address .rank .box_dim .global_dim .global_stride .element_stride .elemtype "
                  ".interleave_layout .swizzle_mode .swizzle_atomicity .fill_mode .global .shared::cta .b1024"),
        group="async", summary="modify a tensor-map object in memory", rule="tensormap.replace",
        gates=(gate("swizzle_atomicity", "field .swizzle_atomicity", (8, 6), 100, "a", BLACKWELL_A),),
        effects=fx((), "store")),
    # ------------------------------------------------------------------ atomics and reductions
    fam("atom", [("cas", "Tv, A, T, T"), ("!cas", "Tv, A, Tv, .b64?")], types=ATOM_TYPES, ntypes=(1,),
        mod_types=ATOM_OPS, needs=[(HALF_ADD, (".noftz",)), ("", tuple(ATOM_OPS)),
                                   ("!cas&#4|cas&#5", (".L2::cache_hint",))],
        mods=ATOM_MODS, slots={"op": ATOM_OP}, ptx=(1, 1), group="atomic", summary="atomic read-modify-write",
        gates=ATOM_GATES, effects=fx((0,), "atomic", loaded=(0,))),
    fam("red", "A, Tv, .b64?", types=ATOM_TYPES, ntypes=(1,), mods=ATOM_MODS, slots={"op": ATOM_OP}, ptx=(1, 2),
        group="atomic",
        mod_types=ATOM_OPS, needs=[(HALF_ADD, (".noftz",)), ("", tuple(ATOM_OPS)), ("#3", (".L2::cache_hint",))],
        summary="reduction in memory", gates=ATOM_GATES, effects=fx((), "atomic")),
    fam("red.async", "A, T, A?", types=_set(".u32 .s32 .u64 .s64 .b32"), ntypes=(1,), ptx=(8, 1), sm=90,
        needs=[("", _set(".relaxed .release")), ("relaxed", (".cluster",))],
        group="atomic", summary="asynchronous reduction on distributed shared memory",
        gates=(gate("mmio|release|global|gpu|sys", ".mmio/.release/.global/.gpu/.sys", (8, 7), 100),),
        effects=fx((), "atomic")),
    # ------------------------------------------------------------------ texture and surface (operands unchecked)
    fam("tex", "*, ...", group="texture", summary="texture fetch",
        gates=(gate("f16|f16x2", "returning .f16/.f16x2", (4, 2), 53),), effects=fx((0,), "load")),
    fam("tld4", "*, ...", ptx=(2, 2), sm=20, group="texture", summary="texture gather", effects=fx((0,), "load")),
    fam("txq", "*, ...", ptx=(1, 5), group="texture", summary="texture query",
        gates=(gate("level", "txq.level", (4, 3), 30),), effects=RESULT),
    fam("istypep", "P, *", ptx=(4, 0), sm=30, group="texture", effects=RESULT),
    fam("suld", "*, ...", ptx=(1, 5), group="surface", summary="surface load", effects=fx((0,), "load", loaded=(0,))),
    fam("sust", "*, ...", ptx=(1, 5), group="surface", summary="surface store",
        gates=(gate("p", "sust.p", (2, 0), 20),), effects=fx((), "store")),
    fam("sured", "*, ...", ptx=(2, 0), sm=20, group="surface", summary="surface reduction", effects=fx((), "atomic")),
    fam("suq", "*, ...", ptx=(1, 5), group="surface", summary="surface query", effects=RESULT),
]

__all__ = ["SPECS"]
