"""ISA table: control flow, barriers, fences, mbarrier, warp votes/matches/reductions, cluster
launch control, stack manipulation and miscellaneous instructions (PTX ISA 9.0 manual sections
9.7.12, 9.7.13, 9.7.17, 9.7.19)."""

from __future__ import annotations

from ptxforge.ptx.isa.build import BLACKWELL_A, NOTHING, RESULT, _set, fam, fx, gate, removed

MBAR_GATES = (
    gate("shared::cta", "modifier .shared::cta", (7, 8), 80),
    gate("shared::cluster", "modifier .shared::cluster", (8, 0), 90),
    gate("cluster", ".cluster scope", (8, 0), 90),
    gate("release|acquire|cta", ".sem/.scope qualifiers", (8, 0), 80),
    gate("relaxed", "modifier .relaxed", (8, 6), 90),
)
BAR_RED_OPS = _set(".popc .and .or")  # bar.red's reductions
VOTE_MODES = _set(".all .any .uni .ballot")
REDUX_OPS = _set(".add .min .max .and .or .xor")
# the types each redux op takes (ptxas 13.0: "Incorrect type '.f32' for operation '.add' in instruction 'redux'")
REDUX_TYPES = {".add": _set(".u32 .s32"), ".min": _set(".u32 .s32 .f32"), ".max": _set(".u32 .s32 .f32"),
               ".and": _set(".b32"), ".or": _set(".b32"), ".xor": _set(".b32"), ".abs": _set(".f32"),
               ".NaN": _set(".f32")}
MBAR_MODS = _set(".shared .shared::cta .shared::cluster .release .acquire .relaxed .cta .cluster")

SPECS = [
    # ------------------------------------------------------------------ control flow
    fam("bra", "*", mods=_set(".uni"), group="control", summary="branch", effects=NOTHING),
    fam("brx.idx", ".u32, *", mods=_set(".uni"), ptx=(6, 0), sm=30, group="control",
        summary="indirect branch through a label table", effects=NOTHING),
    fam("call", "*, ...", mods=_set(".uni"), group="control", summary="call a function", effects=NOTHING),
    fam("ret", "", mods=_set(".uni"), group="control", effects=NOTHING),
    fam("exit", "", mods=_set(""), group="control", effects=NOTHING),
    fam("trap", "", mods=_set(""), group="misc", effects=fx(lanes="grid")),
    fam("brkpt", "", mods=_set(""), group="misc", effects=NOTHING),
    fam("nanosleep", "T", types=_set(".u32"), ntypes=(1,), mods=_set(""), ptx=(6, 3), sm=70, group="misc",
        effects=NOTHING),
    fam("pmevent", "*", mods=_set(".mask"), ptx=(1, 4), group="misc",
        gates=(gate("mask", "pmevent.mask", (3, 0), 20),), effects=NOTHING),
    fam("setmaxnreg", "I", types=_set(".u32"), ntypes=(1,), mods=_set(".inc .dec .sync .aligned"), ptx=(8, 0),
        sm=90, sfx="a", also=("sm_100a",) + BLACKWELL_A, group="misc",
        summary="change the per-thread register budget of a warpgroup", effects=fx(lanes="block")),
    fam("stacksave", "T", types=_set(".u32 .u64"), ntypes=(1,), ptx=(7, 3), sm=52, group="misc", effects=RESULT),
    fam("stackrestore", "T", types=_set(".u32 .u64"), ntypes=(1,), ptx=(7, 3), sm=52, group="misc", effects=NOTHING),
    fam("alloca", "T, T, .u32?", types=_set(".u32 .u64"), ntypes=(1,), ptx=(7, 3), sm=52, group="misc", effects=RESULT),
    # ------------------------------------------------------------------ barriers and fences
    fam("bar", [("red", "T, .u32, ..."), ("", ".u32, .u32?")], types=_set(".u32 .pred"),
        mods=_set(".cta .sync .arrive .red .aligned") | BAR_RED_OPS, slots={"redop": BAR_RED_OPS}, group="sync",
        needs=[("", _set(".sync .arrive .red"))],
        summary="CTA barrier (bar.sync / bar.arrive / bar.red)",
        gates=(gate("arrive|red", "bar.arrive / bar.red", (2, 0), 20), gate("cta", "modifier .cta", (7, 8), 20)),
        effects=fx((), "fence", "block"), effects_when={"red": fx((0,), "fence", "block")}),
    fam("barrier", [("red", "T, .u32, ..."), ("", ".u32, .u32?")], types=_set(".u32 .pred"),
        mods=_set(".cta .sync .arrive .red .aligned") | BAR_RED_OPS, slots={"redop": BAR_RED_OPS}, ptx=(6, 0),
        sm=30, group="sync",
        summary="CTA barrier", gates=(gate("cta", "modifier .cta", (7, 8), 30),),
        effects=fx((), "fence", "block"), effects_when={"red": fx((0,), "fence", "block")}),
    fam("bar.warp.sync", ".u32", mods=_set(""), ptx=(6, 0), sm=30, group="sync", summary="warp barrier",
        effects=fx((), "fence", "warp")),
    fam("barrier.cluster", "", mods=_set(".arrive .wait .release .relaxed .acquire .aligned"), ptx=(7, 8),
        sm=90, group="sync", summary="cluster barrier",
        gates=(gate("acquire|release|relaxed", ".acquire/.release/.relaxed", (8, 0), 90),),
        effects=fx((), "fence", "cluster")),
    fam("membar", "", mods=_set(".cta .gl .sys .proxy .alias .async .global .shared::cta .shared::cluster"),
        ptx=(1, 4), group="sync", summary="memory barrier",
        gates=(gate("sys", "membar.sys", (2, 0), 20), gate("proxy", "membar.proxy", (7, 5), 60)),
        effects=fx((), "fence")),
    fam("fence", "A?, .u32?", ptx=(6, 0), sm=70, group="sync", summary="memory / proxy fence",
        mods=_set(".sc .acq_rel .acquire .release .cta .cluster .gpu .sys .proxy .alias .async .global "
                  ".shared::cta .shared::cluster .async::generic .tensormap::generic .mbarrier_init "
                  ".sync_restrict::shared::cluster .sync_restrict::shared::cta"),
        gates=(gate("proxy", "fence.proxy", (7, 5), 70),
               gate("cluster", ".cluster scope", (7, 8), 90),
               gate("mbarrier_init", "fence.mbarrier_init", (8, 0), 90),
               gate("async|async::generic", "fence.proxy.async", (8, 0), 90),
               gate("tensormap::generic", "fence.proxy.tensormap::generic", (8, 3), 90),
               gate("acquire&!proxy&!mbarrier_init|release&!proxy&!mbarrier_init", "fence.acquire/.release",
                    (8, 6), 90),
               gate("sync_restrict*", "modifier .sync_restrict", (8, 6), 90)), effects=fx((), "fence")),
    # ------------------------------------------------------------------ mbarrier
    fam("mbarrier.init", "A, .u32", types=_set(".b64"), ntypes=(1,), mods=_set(".shared .shared::cta"),
        ptx=(7, 0), sm=80, group="mbarrier", gates=MBAR_GATES[:1], effects=fx((), "store", part="mbarrier")),
    fam("mbarrier.inval", "A", types=_set(".b64"), ntypes=(1,), mods=_set(".shared .shared::cta"),
        ptx=(7, 0), sm=80, group="mbarrier", gates=MBAR_GATES[:1], effects=fx((), "store", part="mbarrier")),
    fam("mbarrier.arrive", "T, A, .u32?", types=_set(".b64"), ntypes=(1,),
        mods=MBAR_MODS | _set(".expect_tx .noComplete"), ptx=(7, 0), sm=80, group="mbarrier",
        gates=(*MBAR_GATES, gate("expect_tx", "mbarrier.arrive.expect_tx", (8, 0), 90),
               gate("#3&!noComplete&!expect_tx", "count without .noComplete", (7, 8), 90)),
        effects=fx((0,), "atomic", part="mbarrier")),
    fam("mbarrier.arrive_drop", "T, A, .u32?", types=_set(".b64"), ntypes=(1,),
        mods=MBAR_MODS | _set(".expect_tx .noComplete"), ptx=(7, 0), sm=80, group="mbarrier",
        gates=(*MBAR_GATES, gate("expect_tx", "mbarrier.arrive_drop.expect_tx", (8, 0), 90),
               gate("#3&!noComplete&!expect_tx", "count without .noComplete", (7, 8), 90)),
        effects=fx((0,), "atomic", part="mbarrier")),
    fam("mbarrier.expect_tx", "A, .u32", types=_set(".b64"), ntypes=(1,), mods=MBAR_MODS, ptx=(8, 0), sm=90,
        group="mbarrier", effects=fx((), "atomic", part="mbarrier")),
    fam("mbarrier.complete_tx", "A, .u32", types=_set(".b64"), ntypes=(1,), mods=MBAR_MODS, ptx=(8, 0),
        sm=90, group="mbarrier", effects=fx((), "atomic", part="mbarrier")),
    fam("mbarrier.test_wait", [("parity", "P, A, .b32"), ("", "P, A, T")], types=_set(".b64"), ntypes=(1,),
        mods=MBAR_MODS | _set(".parity"), ptx=(7, 0), sm=80, group="mbarrier",
        gates=(*MBAR_GATES, gate("parity", "modifier .parity", (7, 1), 80)),
        effects=fx((0,), "atomic", part="mbarrier_wait")),
    fam("mbarrier.try_wait", [("parity", "P, A, .b32, .u32?"), ("", "P, A, T, .u32?")], types=_set(".b64"),
        ntypes=(1,), mods=MBAR_MODS | _set(".parity"), ptx=(7, 8), sm=90, group="mbarrier",
        gates=MBAR_GATES, effects=fx((0,), "atomic", part="mbarrier_wait")),
    fam("mbarrier.pending_count", ".u32, T", types=_set(".b64"), ntypes=(1,), mods=_set(""), ptx=(7, 0),
        sm=80, group="mbarrier", effects=fx((0,), part="mbarrier")),
    # ------------------------------------------------------------------ warp-level
    fam("vote.sync", "T, P, .u32", types=_set(".pred .b32"), ntypes=(1,), mods=VOTE_MODES,
        slots={"mode": VOTE_MODES}, ptx=(6, 0), sm=30, group="warp", summary="warp vote",
        effects=fx((0,), lanes="warp")),
    fam("vote", "T, P", types=_set(".pred .b32"), ntypes=(1,), mods=VOTE_MODES, slots={"mode": VOTE_MODES},
        ptx=(1, 2),
        group="warp", summary="warp vote (deprecated; use vote.sync)",
        gone=(removed("", (6, 4), 70, "vote without .sync is not supported on sm_70 or higher from PTX ISA "
                                      "6.4; use vote.sync"),), effects=fx((0,), lanes="warp")),
    fam("match", ".b32|, T, .u32", types=_set(".b32 .b64"), ntypes=(1,), mods=_set(".any .all .sync"),
        slots={"mode": _set(".any .all")},
        ptx=(6, 0), sm=70, group="warp", summary="match values across a warp", effects=fx((0,), lanes="warp")),
    fam("redux.sync", "T, T, .u32", types=_set(".u32 .s32 .b32 .f32"), ntypes=(1,),
        mods=REDUX_OPS | _set(".abs .NaN"), ptx=(7, 0), sm=80, group="warp",
        needs=[("", REDUX_OPS)], slots={"op": REDUX_OPS}, mod_types=REDUX_TYPES,
        summary="warp reduction",
        gates=(gate("T0=f32", "redux.sync.f32", (8, 6), 100, "a", ("sm_100f",)),
               gate("abs|NaN", "modifiers .abs/.NaN", (8, 6), 100, "a", ("sm_100f",))), effects=fx((0,), lanes="warp")),
    fam("activemask", "T", types=_set(".b32"), ntypes=(1,), mods=_set(""), ptx=(6, 2), sm=30, group="warp",
        effects=fx((0,), lanes="warp")),
    fam("elect.sync", ".b32|, .u32", mods=_set(""), ptx=(8, 0), sm=90, group="warp",
        summary="elect one leader thread", effects=fx((0,), lanes="warp")),
    fam("griddepcontrol", "", mods=_set(".launch_dependents .wait"), ptx=(7, 8), sm=90, group="sync",
        summary="programmatic dependent launch control", effects=fx(lanes="grid")),
    fam("clusterlaunchcontrol.try_cancel", "A, A", ptx=(8, 6), sm=100, group="sync",
        gates=(gate("multicast::cluster::all", "modifier .multicast::cluster::all", (8, 6), 100, "a",
                    BLACKWELL_A),), effects=fx((), "async", "grid")),
    fam("clusterlaunchcontrol.query_cancel", "*, ...", ptx=(8, 6), sm=100, group="sync", effects=RESULT),
]

__all__ = ["SPECS"]
