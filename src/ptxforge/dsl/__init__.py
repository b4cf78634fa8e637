"""Write PTX kernels in Python: typed registers, one call = one instruction, structured control flow.

    from ptxforge.dsl import *

    @kernel(arch="sm_80")
    def vadd(a: ptr(f32), b: ptr(f32), c: ptr(f32), n: u32):
        i = mad(ctaid.x, ntid.x, tid.x)
        with if_(i < n):
            st(c[i], ld(a[i]) + ld(b[i]))

    vadd.ptx()                 # PTX text (vadd.ptx(arch="sm_90a") for another target)
    vadd.launch(grid=(4,), block=(256,), args=[a, b, c, np.uint32(n)], device="emu")

Parameters: `ptr(elem, space="global", align=)` and scalar types (`u32`, `f32`, ...); parameters with
defaults are compile-time constants (`k.specialize(TILE=32)`). Values: `reg.u32()`, `reg.f32(0.0)`,
`reg.f32[4]`; special registers `tid.x`, `ctaid.y`, `laneid`, ...; Python numbers become immediates.
Pointers: `p[i]`/`p + i` (one mad.wide), `p[i].cast(u32)`, `shared(f32, (16, 16), align=)`,
`dynamic_shared(f32)`, `mbarriers(n)`. Control flow: `with if_(p)`, `with else_()`, `for i in range_(...)`,
`with while_(lambda: cond)`, `with guard(p)` (predicated instructions), labels and `bra`, `@func` device
functions, `raw("ptx {x}", x=r)`. Instruction families: arith.py (integer/float/half arithmetic, logic,
compare/select, mov/pack, cvt incl. bf16 and fp8), memory.py (ld/st with cache hints and vectors, atom,
red), sync.py (bar, fence, mbarrier, cp.async, cp.async.bulk), warp.py (shfl, vote, redux, match),
mma.py (ldmatrix, mma.sync, setmaxnreg, wgmma). NVSHMEM's device API (puts, signals, fence, quiet, waits,
as nvcc declares them; run on `ptxforge.emu.Cluster`): `from ptxforge.dsl.nvshmem import *`.

Mistakes raise `DSLError` at the kernel's Python line: `DSLTypeError` for operand types
(`add: operands must share type .u32, got .u32 and .f32`), `DSLArchError` for instructions the
target lacks (`setmaxnreg needs sm_90a; this kernel targets sm_80`). The ISA table (ptxforge.ptx.isa)
decides both; the finished module is also run through the validator.
"""

from ptxforge.dsl.arith import (
    abs_,
    add,
    and_,
    bfe,
    bfi,
    bitcast,
    bmsk,
    brev,
    clz,
    cos,
    cvt,
    cvt_pack,
    div,
    ex2,
    fma,
    lg2,
    lop3,
    mad,
    mad_wide,
    max_,
    min_,
    mov,
    mul,
    mul_hi,
    mul_wide,
    neg,
    not_,
    or_,
    pack,
    popc,
    prmt,
    rcp,
    rem,
    rsqrt,
    selp,
    setp,
    shl,
    shr,
    sin,
    sqrt,
    sub,
    szext,
    tanh,
    unpack,
    xor,
)
from ptxforge.dsl.control import (
    bra,
    else_,
    exit_,
    guard,
    if_,
    new_label,
    place_label,
    range_,
    raw,
    ret,
    trap,
    while_,
)
from ptxforge.dsl.errors import DSLArchError, DSLError, DSLTypeError
from ptxforge.dsl.kernel import DeviceFunction, ExternFunction, Kernel, func, kernel, link, vprintf
from ptxforge.dsl.memory import Pointer, atom, atom_cas, dynamic_shared, ld, red, shared, st
from ptxforge.dsl.mma import (
    ldmatrix,
    mma_sync,
    setmaxnreg,
    wgmma_commit,
    wgmma_descriptor,
    wgmma_fence,
    wgmma_mma_async,
    wgmma_wait,
)
from ptxforge.dsl.sync import (
    bar_arrive,
    bar_sync,
    cp_async,
    cp_async_bulk,
    cp_async_commit,
    cp_async_mbarrier_arrive,
    cp_async_wait,
    cp_async_wait_all,
    elect_sync,
    fence,
    fence_mbarrier_init,
    fence_proxy_async,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_test_wait,
    mbarrier_try_wait,
    mbarrier_wait,
    mbarriers,
    membar,
    syncthreads,
)
from ptxforge.dsl.types import (
    DType,
    Ptr,
    b8,
    b16,
    b32,
    b64,
    b128,
    bf16,
    bf16x2,
    e4m3,
    e4m3x2,
    e5m2,
    e5m2x2,
    f16,
    f16x2,
    f32,
    f64,
    pred,
    ptr,
    s8,
    s16,
    s32,
    s64,
    tf32,
    u8,
    u16,
    u32,
    u64,
)
from ptxforge.dsl.values import (
    Pred,
    Reg,
    SReg,
    clock64,
    ctaid,
    dynamic_smem_size,
    laneid,
    lanemask_eq,
    lanemask_le,
    lanemask_lt,
    nctaid,
    ntid,
    nwarpid,
    reg,
    smid,
    tid,
    warpid,
)
from ptxforge.dsl.warp import (
    activemask,
    ballot,
    match_all,
    match_any,
    redux,
    shfl,
    shfl_down,
    shfl_idx,
    shfl_up,
    shfl_xor,
    vote_all,
    vote_any,
)

__all__ = [
    "abs_", "add", "and_", "bfe", "bfi", "bitcast", "bmsk", "brev", "clz", "cos", "cvt", "cvt_pack", "div", "ex2",
    "fma", "lg2", "lop3", "mad", "mad_wide", "max_", "min_", "mov", "mul", "mul_hi", "mul_wide", "neg", "not_", "or_",
    "pack", "popc", "prmt", "rcp", "rem", "rsqrt", "selp", "setp", "shl", "shr", "sin", "sqrt", "sub", "szext",
    "tanh", "unpack", "xor", "bra", "else_", "exit_", "guard", "if_", "new_label", "place_label", "range_", "raw",
    "ret",
    "trap", "while_", "DSLArchError", "DSLError", "DSLTypeError", "DeviceFunction", "ExternFunction", "Kernel",
    "func", "kernel", "link", "vprintf",
    "Pointer", "atom", "atom_cas", "dynamic_shared", "ld", "red", "shared", "st", "ldmatrix", "mma_sync",
    "setmaxnreg", "wgmma_commit", "wgmma_descriptor", "wgmma_fence", "wgmma_mma_async", "wgmma_wait", "bar_arrive",
    "bar_sync", "cp_async", "cp_async_bulk", "cp_async_commit", "cp_async_mbarrier_arrive", "cp_async_wait",
    "cp_async_wait_all", "elect_sync", "fence", "fence_mbarrier_init", "fence_proxy_async", "mbarrier_arrive",
    "mbarrier_arrive_expect_tx", "mbarrier_init", "mbarrier_test_wait", "mbarrier_try_wait", "mbarrier_wait",
    "mbarriers", "membar", "syncthreads", "DType", "Ptr", "b8", "b16", "b32", "b64", "b128", "bf16", "bf16x2",
    "e4m3", "e4m3x2", "e5m2", "e5m2x2", "f16", "f16x2", "f32", "f64", "pred", "ptr", "s8", "s16", "s32", "s64",
    "tf32", "u8", "u16", "u32", "u64", "Pred", "Reg", "SReg", "clock64", "ctaid", "dynamic_smem_size", "laneid",
    "lanemask_eq", "lanemask_le", "lanemask_lt", "nctaid", "ntid", "nwarpid", "reg", "smid", "tid", "warpid",
    "activemask", "ballot", "match_all", "match_any", "redux", "shfl", "shfl_down", "shfl_idx", "shfl_up",
    "shfl_xor", "vote_all", "vote_any",
]
