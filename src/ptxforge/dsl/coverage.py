"""The ISA table's instruction families (ptx/isa) the DSL has no function for, each with the reason. A kernel
still reaches every one of them through `raw("...")`, which checks the text against the same table.
tests/dsl/test_dsl_coverage.py holds this list and the DSL's emit calls to the table: each family is emitted
by a DSL function or listed here, never both."""

from __future__ import annotations


def _each(families: str, reason: str) -> dict[str, str]:
    return dict.fromkeys(families.split(), reason)


UNSUPPORTED: dict[str, str] = {
    **_each("addc subc madc", "carry chains (.cc flags) have no DSL form; use wide integers (mul_wide/mad_wide) "
                              "or raw()"),
    **_each("mul24 mad24 sad dp4a dp2a bfind fns cnot shf set slct testp copysign",
            "no DSL function yet; the arithmetic and bit functions cover the common forms, raw() the rest"),
    **_each("cvt.pack", "packing conversions have no DSL function yet; use cvt per element or raw()"),
    **_each("vadd vsub vabsdiff vmin vmax vshl vshr vmad vset vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 "
            "vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4 vset4",
            "the legacy video (SIMD-within-a-register) instructions have no DSL functions; use raw()"),
    **_each("ldu prefetch prefetchu applypriority discard createpolicy isspacep cvta",
            "cache hints, policies and address-space conversions have no DSL function yet; use raw()"),
    **_each("st.async red.async st.bulk", "remote shared-memory stores and bulk stores have no DSL function yet; "
                                          "use raw()"),
    **_each("mapa getctarank barrier.cluster", "thread-block cluster addressing and barriers have no DSL "
                                               "function yet; use raw()"),
    **_each("cp.async.bulk.commit_group cp.async.bulk.wait_group cp.async.bulk.prefetch "
            "cp.reduce.async.bulk cp.async.bulk.tensor cp.reduce.async.bulk.tensor cp.async.bulk.prefetch.tensor",
            "bulk groups, bulk reductions and TMA tensor copies have no DSL function yet; use raw()"),
    **_each("mbarrier.inval mbarrier.arrive_drop mbarrier.expect_tx mbarrier.complete_tx mbarrier.pending_count",
            "these mbarrier operations have no DSL function yet (init, arrive, expect_tx arrive, test/try_wait "
            "have); use raw()"),
    **_each("multimem.ld_reduce multimem.st multimem.red multimem.cp.async.bulk multimem.cp.reduce.async.bulk",
            "multimem (NVLink multicast) addresses have no DSL type; use raw()"),
    **_each("tensormap.cp_fenceproxy tensormap.replace", "tensor maps are built on the host (runtime.tensor_map); "
                                                         "editing one in a kernel needs raw()"),
    **_each("tex tld4 txq istypep suld sust sured suq", "textures and surfaces have no DSL types; use raw()"),
    **_each("alloca stacksave stackrestore", "the DSL lays local memory out statically; dynamic stack "
                                             "allocation needs raw()"),
    **_each("brx.idx", "indirect branches need a .branchtargets list, which the DSL's structured control flow "
                       "does not build; use raw()"),
    **_each("brkpt nanosleep pmevent griddepcontrol", "debug, sleep, profiler and grid-dependency hints have no "
                                                      "DSL function yet; use raw()"),
    **_each("bar.warp.sync barrier", "the DSL's bar_sync()/bar_arrive() emit bar.*; "
                                     "barrier.* and bar.warp.sync need raw()"),
    **_each("vote shfl", "the deprecated non-.sync forms (removed on sm_70+); the DSL emits vote.sync/shfl.sync"),
    **_each("clusterlaunchcontrol.try_cancel clusterlaunchcontrol.query_cancel",
            "cluster launch control (sm_100 work stealing) has no DSL function yet; use raw()"),
    **_each("wmma.load wmma.store wmma.mma movmatrix stmatrix", "the DSL's matrix functions are mma.sync, "
                                                                "ldmatrix and wgmma; these need raw()"),
    **_each("tcgen05.alloc tcgen05.dealloc tcgen05.relinquish_alloc_permit tcgen05.ld tcgen05.st tcgen05.wait "
            "tcgen05.cp tcgen05.shift tcgen05.mma tcgen05.commit tcgen05.fence",
            "tensor memory (tcgen05, sm_100a) has no DSL functions yet; use raw()"),
}
