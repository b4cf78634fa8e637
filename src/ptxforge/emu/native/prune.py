"""Drop the instructions of a function nothing uses and that have no effect (llvmlite IR, before LLVM sees it).

A span access (warp.py, affine.py) builds its address vector again on its side path, so the copy the lowering
built on the straight path is left unused. LLVM's first common-subexpression pass would take that dead copy
for the side path's (it dominates it) and keep it alive on the straight path; dropping it first keeps the
vector work off the path every converged warp runs.
"""

from __future__ import annotations

from llvmlite import ir as L

# opnames of instructions with no effect but their value (no memory, no traps: no division)
PURE = frozenset({"add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "sext", "zext", "trunc",
                  "bitcast", "inttoptr", "ptrtoint", "icmp", "select", "shufflevector", "insertelement",
                  "extractelement", "getelementptr", "phi"})


def _uses(ins: L.Instruction) -> list[L.Value]:
    if isinstance(ins, L.PhiInstr):
        return [v for v, _ in ins.incomings]
    return list(ins.operands)


def drop_dead(fn: L.Function) -> int:
    """Remove `fn`'s unused instructions of `PURE` kinds, and those only they used; how many."""
    count: dict[int, int] = {}
    for blk in fn.blocks:
        for ins in blk.instructions:
            for v in _uses(ins):
                count[id(v)] = count.get(id(v), 0) + 1
    work = [ins for blk in fn.blocks for ins in blk.instructions if ins.opname in PURE and not count.get(id(ins))]
    dead: set[int] = set()
    while work:
        ins = work.pop()
        if id(ins) in dead:
            continue
        dead.add(id(ins))
        for v in _uses(ins):
            n = count[id(v)] = count[id(v)] - 1
            if n == 0 and isinstance(v, L.Instruction) and v.opname in PURE:
                work.append(v)
    if dead:
        for blk in fn.blocks:
            blk.instructions = [i for i in blk.instructions if id(i) not in dead]
    return len(dead)
