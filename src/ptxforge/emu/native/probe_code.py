"""The no-progress watchdog's probe in a block's machine code: when the launcher asks (the worker's probe slot),
the block answers with a hash of its warps' pcs and registers, the block, its memory writes so far, and its first
runnable warp and that warp's pc. The same answer twice with no write in between is a state the block cannot
leave (the launcher decides: launcher.py, watchdog.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu import op as C
from ptxforge.emu.native.lower import I32, I64, WARP, V, counted_loop

if TYPE_CHECKING:
    from ptxforge.emu.native.codegen import BlockGen

# probe slot: [request (the launcher sets 1, the code answers with 0; -1: the worker is done), hash of the
# block's pcs and registers, block, memory writes so far, warp, pc]
PROBE_REQ, PROBE_HASH, PROBE_BLOCK, PROBE_WRITES, PROBE_WARP, PROBE_PC, PROBE_LEN = range(7)


def emit_probe(gen: BlockGen, b: L.IRBuilder) -> None:
    """Answer the watchdog's request, if any: a hash of the block's pcs and registers, the block, the memory
    writes so far, and the first runnable warp and its pc. The same answer twice with no write in between
    is a state the block cannot leave (the launcher decides: launcher.py)."""
    fn = gen.fn
    req = b.load_atomic(b.gep(gen.probe, [L.Constant(I64, PROBE_REQ)]), "monotonic", 8)
    answer, done = fn.append_basic_block("probe"), fn.append_basic_block("probe_done")
    b.cbranch(b.icmp_signed(">", req, L.Constant(I64, 0)), answer, done)
    b.position_at_end(answer)
    h = L.Constant(I64, 0xCBF29CE484222325)
    words = [(gen.pcs, gen.nwarps * WARP // 2), (gen.regfile, gen.nwarps * gen.warp_bytes // 8)]
    for base, n in words:
        p64 = b.bitcast(base, I64.as_pointer())
        pre = b.block
        head, body, out = (fn.append_basic_block(f"probe_{x}") for x in ("head", "body", "out"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        hv = b.phi(I64)
        i.add_incoming(L.Constant(I64, 0), pre)
        hv.add_incoming(h, pre)
        b.cbranch(b.icmp_signed("<", i, L.Constant(I64, n)), body, out)
        b.position_at_end(body)
        x = b.load(b.gep(p64, [i]), align=8)
        h2 = b.mul(b.xor(hv, x), L.Constant(I64, 0x100000001B3))
        i.add_incoming(b.add(i, L.Constant(I64, 1)), body)
        hv.add_incoming(h2, body)
        b.branch(head)
        b.position_at_end(out)
        h = hv
    # the first warp with a runnable lane, and its lowest pc (what the message names)
    umin = gen.intrinsic("llvm.vector.reduce.umin.v32i32", I32, [V(I32)])
    warp_at, pc_at = gen.acc64, b.gep(gen.acc64, [L.Constant(I64, 1)])
    none = L.Constant(I64, -1)
    b.store(none, warp_at)
    b.store(none, pc_at)

    def scan(wi: L.Value) -> None:
        low = b.call(umin, [b.load(gen.pc_ptr(b, wi), align=64)])
        warp_i = b.load(warp_at)
        first = b.and_(b.icmp_unsigned("<", low, L.Constant(I32, C.WAIT_BAR)), b.icmp_signed("==", warp_i, none))
        b.store(b.select(first, wi, warp_i), warp_at)
        b.store(b.select(first, b.zext(low, I64), b.load(pc_at)), pc_at)
    counted_loop(b, fn, gen.nwarps, scan, "probe_scan")
    warp_i, pc_i = b.load(warp_at), b.load(pc_at)
    for slot, v in ((PROBE_HASH, h), (PROBE_BLOCK, b.load(gen.bid)), (PROBE_WRITES, b.load(gen.writes)),
                    (PROBE_WARP, warp_i), (PROBE_PC, pc_i)):
        b.store(v, b.gep(gen.probe, [L.Constant(I64, slot)]))
    b.store_atomic(L.Constant(I64, 0), b.gep(gen.probe, [L.Constant(I64, PROBE_REQ)]), "release", 8)
    b.branch(done)
    b.position_at_end(done)
