"""The blocking calls of NVSHMEM's device API as PTX functions of our own, linked into a module that declares
them: `nvshmem_signal_wait_until` spins on a test builtin (nvshmem.py), `nvshmem_barrier_all` completes the
PE's operations, arrives and spins. `link(module)` is what a Cluster GPU loads instead of the module (the
same module when it declares neither). On a real cluster NVSHMEM's own device library provides them.
"""

from __future__ import annotations

import dataclasses

from ptxforge.ptx import ir
from ptxforge.ptx.parser import parse

LIBRARY = """
.version 7.0
.target sm_70
.address_size 64
.extern .func (.param .b32 func_retval0) __ptxforge_nvshmem_test
(.param .b64 p0, .param .b32 p1, .param .b64 p2);
.extern .func (.param .b64 func_retval0) __ptxforge_nvshmem_barrier_arrive ();
.extern .func (.param .b32 func_retval0) __ptxforge_nvshmem_barrier_test (.param .b64 p0);
.extern .func nvshmem_quiet ();

.visible .func (.param .b64 func_retval0) nvshmem_signal_wait_until
(.param .b64 sig_addr, .param .b32 cmp, .param .b64 cmp_value)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    .reg .pred %p<1>;
    ld.param.b64 %rd0, [sig_addr];
    ld.param.b32 %r0, [cmp];
    ld.param.b64 %rd1, [cmp_value];
$L_wait:
    {
    .param .b64 a0;
    .param .b32 a1;
    .param .b64 a2;
    .param .b32 r0;
    st.param.b64 [a0], %rd0;
    st.param.b32 [a1], %r0;
    st.param.b64 [a2], %rd1;
    call.uni (r0), __ptxforge_nvshmem_test, (a0, a1, a2);
    ld.param.b32 %r1, [r0];
    }
    setp.eq.u32 %p0, %r1, 0;
    @%p0 bra $L_wait;
    ld.acquire.sys.global.u64 %rd2, [%rd0];
    st.param.b64 [func_retval0], %rd2;
    ret;
}

.visible .func nvshmem_barrier_all ()
{
    .reg .b64 %rd<1>;
    .reg .b32 %r<1>;
    .reg .pred %p<1>;
    call.uni nvshmem_quiet, ();
    {
    .param .b64 r0;
    call.uni (r0), __ptxforge_nvshmem_barrier_arrive, ();
    ld.param.b64 %rd0, [r0];
    }
$L_barrier:
    {
    .param .b64 a0;
    .param .b32 r0;
    st.param.b64 [a0], %rd0;
    call.uni (r0), __ptxforge_nvshmem_barrier_test, (a0);
    ld.param.b32 %r0, [r0];
    }
    setp.eq.u32 %p0, %r0, 0;
    @%p0 bra $L_barrier;
    fence.acq_rel.sys;
    ret;
}
"""

_parsed: ir.Module | None = None


def library() -> ir.Module:
    global _parsed
    if _parsed is None:
        _parsed = parse(LIBRARY, filename="<ptxforge nvshmem library>")
    return _parsed


def provides(module: ir.Module) -> bool:
    """Whether `module` declares (without defining) a function the library defines."""
    names = {f.name for f in library().functions if f.body is not None}
    return any(f.body is None and f.name in names for f in module.functions)


def link(module: ir.Module) -> ir.Module:
    """`module` with the library's definitions in place of its declarations of them (and the builtins they
    call declared); `module` itself when it declares none of them."""
    if not provides(module):
        return module
    lib = library()
    defined = {f.name: f for f in lib.functions if f.body is not None}
    have = {f.name for f in module.functions}
    items: list[ir.TopLevel] = []
    for it in module.items:
        if isinstance(it, ir.Function) and it.body is None and it.name in defined:
            continue  # the definition comes from the library
        items.append(it)
    first = next((i for i, it in enumerate(items) if isinstance(it, ir.Function)), len(items))
    extra = [f for f in lib.functions if f.body is None and f.name not in have]
    extra += [f for f in lib.functions if f.body is not None]
    items[first:first] = extra
    return dataclasses.replace(module, items=tuple(items), source=None, layout=None)
