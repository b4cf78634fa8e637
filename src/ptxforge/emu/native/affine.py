"""Lane-affine values: a warp's vector whose lane i holds lane 0's value + stride * i.

A global access at such an address, `stride` its size apart, is one span of memory: its check is one scalar
test of lane 0's address (`access_calls.span_fits`) and its load or store one vector access from there, with
no 64-bit address vector and no consecutive test (warp.py, `WarpEnv.load` / `WarpEnv.store`).

Two levels find them:

- `lane_strides` (the kernel's registers, PTX): a register whose only write is one unguarded `mov`, `cvta`,
  `add`, `sub`, `mul.lo`, `mad.lo`, `shl`, `cvt` or `mul.wide` of immediates, special registers, parameters and
  registers of the same kind surely written there holds a function of the thread's indices alone. Where %tid.x
  is lane 0's + lane in every warp (the block's x extent a multiple of 32, so a warp lies in one row), such a
  register is lane-affine, its stride known when compiling, in any warp all of whose lanes have written it; one
  widened from 32 bits (`cvt`, `mul.wide`) is so unless the narrow value wrapped inside the warp, which one
  compare of lane 31 with lane 0 tells when running (`Lanes`). A segment's register taken in from another one
  (a phi or a load of the register file) is tagged so (`SegmentRegs.lanes`).
- `stride` / `base` (the code a segment builds, LLVM IR): splats, constants, tagged registers and adds, subs,
  multiplies and shifts by constants of them are lane-affine modulo 2**width; a sign or zero extension is where
  lane 0's value leaves room for the other 31 lanes' without a wrap, a scalar test on lane 0 (`base`'s
  condition, with the lane-31 tests of the wrapping registers taken in: where it fails, the access goes the
  vector way).

A tagged register's lane 0 is what the warp's lanes all hold only where every lane has written it: `base` is
used only where every lane is active at the access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir as L

from ptxforge.emu.native.dataflow import write_counts, written
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

WARP = 32
_INT = ("u", "s", "b")
# the instructions whose result is a lane-affine function of lane-affine operands (their modifiers)
_AFFINE_OPS = {"mov": (), "cvta": ("to", "global"), "add": (), "sub": (), "mul": ("lo",), "mad": ("lo",),
               "shl": (), "cvt": (), "wide": ("wide",)}

# a register's lanes: (stride, wraps). wraps: a 64-bit register made by widening a 32-bit lane-affine value
# (`cvt`, `mul.wide`), then added to, multiplied and shifted by values the same in every lane: lane 0's + stride
# * lane except where the 32-bit value wrapped inside the warp, which lane 31 tells (`base`'s test)
Lanes = tuple[int, bool]
# a register's lanes as `lane_strides` gives them: (stride, wraps, checked). checked: a register written more than
# once (a loop's index), lane-affine where every lane took every step, which is told when running (`base`'s test)
Strides = tuple[int, bool, bool]
# id(vector) -> (the vector, *its Strides): registers taken in; checked may be the test already made (`lanes_test`)
Tags = dict[int, tuple[L.Value, int, bool, bool | L.Value]]


def sreg_stride(name: str, block: tuple[int, int, int]) -> int | None:
    """The stride of special register `name` in a warp of a block of shape `block` (None: not lane-affine)."""
    if name.startswith(("%ntid.", "%nctaid.", "%ctaid.")) or name == "%warpid":
        return 0
    if name == "%laneid":
        return 1
    if block[0] % WARP == 0 and name.startswith("%tid."):  # (a warp lies in one row)
        return 1 if name == "%tid.x" else 0
    return None


def lane_strides(layout: Layout, lo: int, hi: int, block: tuple[int, int, int], surely: dict[int, int],
                 uniform: set[int]) -> dict[int, Strides]:
    """Register slot -> (stride, wraps, checked) for the kernel's lane-affine registers (see the module docstring,
    `Lanes` and `Strides`). `surely`: `dataflow.surely_written`; `uniform`: slots known the same in every lane
    wherever surely written (constants, parameters)."""
    counts = write_counts(layout, lo, hi)
    if counts is None:
        return {}
    known: dict[int, Lanes] = {s: (0, False) for s in uniform}
    changed = True
    while changed:
        changed = False
        for pc in range(lo, hi):
            hit = _affine_def(layout, pc, counts, known, block, surely.get(pc, 0))
            if hit is not None and hit[0] not in known:
                known[hit[0]] = hit[1]
                changed = True
    out = {s: (*v, False) for s, v in known.items()}
    for slot, st in _stepped(layout, lo, hi, counts, known, block, surely).items():
        out[slot] = (st, False, True)
    return out


def _stepped(layout: Layout, lo: int, hi: int, counts: dict[int, int], known: dict[int, Lanes],
             block: tuple[int, int, int], surely: dict[int, int]) -> dict[int, int]:
    """Slot -> stride of the registers written more than once, each write lane-affine (`_affine_def`, the
    register itself taken as lane-affine where a write reads it: a loop's `add %r, %r, step`) with one stride
    and no wrap. Whether a warp's lanes all took the same steps is not known when compiling: `base` tests it."""
    writes: dict[int, list[int]] = {}
    for pc in range(lo, hi):
        bits = written(layout, pc) or 0
        while bits:
            low = bits & -bits
            slot = low.bit_length() - 1
            if counts.get(slot, 0) > 1 and slot not in known:
                writes.setdefault(slot, []).append(pc)
            bits ^= low
    out: dict[int, int] = {}
    for slot, pcs in writes.items():
        if len(pcs) != counts[slot]:
            continue
        guess = None
        for pc in pcs:  # (the stride of a write that does not read the register: its start)
            hit = _affine_def(layout, pc, counts, known, block, surely.get(pc, 0), multi=True)
            if hit is not None and hit[0] == slot and not hit[1][1]:
                guess = hit[1][0]
                break
        if guess is None:
            continue
        assume = {**known, slot: (guess, False)}
        hits = [_affine_def(layout, pc, counts, assume, block, surely.get(pc, 0), multi=True) for pc in pcs]
        if all(h is not None and h[0] == slot and h[1] == (guess, False) for h in hits):
            out[slot] = guess
    return out


def _affine_def(layout: Layout, pc: int, counts: dict[int, int], known: dict[int, Lanes],
                block: tuple[int, int, int], written: int, multi: bool = False) -> tuple[int, Lanes] | None:
    """(slot, its lanes) of the register the instruction at `pc` writes where it is its only write (`multi`: one of
    its writes) and lane-affine by `known` (registers surely written here: `written`)."""
    ins = layout.placed[pc].ins
    op = "wide" if ins.opcode == "mul" and ins.modifiers == (".wide",) else ins.opcode
    mods = _AFFINE_OPS.get(op)
    if mods is None or ins.guard is not None or ins.modifiers != tuple(f".{m}" for m in mods):
        return None
    types = ins.types
    if not types or any(t[1:2] not in _INT or t[2:] not in ("32", "64") for t in types) or len(types) > 2 or \
            (len(types) == 2) != (op == "cvt") or (op == "cvta" and types[0] != ".u64"):
        return None
    dst, *srcs = ins.operands
    width = 64 if op == "wide" else int(types[0][2:])  # (the destination's)
    src_width = int(types[-1][2:]) if op in ("cvt", "wide") else width
    slot = _slot(layout, pc, dst)
    if slot is None or (counts.get(slot) != 1 and not multi) or layout.reg_types[slot][2:] != str(width):
        return None
    vals: list[tuple[int, bool, int | None]] = []  # (stride, wraps, the value where an immediate)
    for o in srcs:
        if isinstance(o, ir.Immediate) and isinstance(o.value, int):
            vals.append((0, False, o.value))
            continue
        if isinstance(o, ir.SpecialRegister):
            st = sreg_stride(o.name, block) if src_width == 32 else None
            hit: Lanes | None = None if st is None else (st, False)
        else:
            src = _slot(layout, pc, o)
            rty = layout.reg_types[src][2:] if src is not None else ""
            ok = src is not None and written >> src & 1 and rty.isdigit() and int(rty) >= src_width
            hit = known.get(src) if ok and src is not None else None
            if hit is not None and hit[1] and int(rty) != src_width:  # (a wrapping one read narrower: exact)
                hit = (hit[0] % (1 << src_width), False)
        if hit is None:
            return None
        vals.append((hit[0], hit[1], None))
    out = _combine(op, vals, width, src_width, types[-1][1] == "s")
    return None if out is None else (slot, out)


def _combine(op: str, vals: list[tuple[int, bool, int | None]], width: int, src_width: int, sign: bool
             ) -> Lanes | None:
    """The lanes of `op`'s result from its operands' (stride, wraps, immediate value or None); `sign`: a
    widening's source is signed."""
    mod = 1 << width
    if op in ("cvt", "wide") and width > src_width and any(
            (WARP - 1) * abs(_signed(v[0], src_width)) >= 1 << (src_width - 1) for v in vals):
        return None  # (a stride so wide the 32 lanes could wrap twice: lane 31 would not tell)
    if sum(v[1] for v in vals) > 1:  # (two wraps could cancel at lane 31 alone)
        return None
    wraps = any(v[1] for v in vals)
    if op in ("mov", "cvta") and len(vals) == 1:
        return vals[0][0] % mod, wraps
    if op == "cvt" and len(vals) == 1:
        if width < src_width:  # (a truncation: exact, wrapped or not)
            return vals[0][0] % mod, False
        sv = _signed(vals[0][0], src_width)
        return sv % mod, wraps or (width > src_width and sv != 0)
    if op in ("add", "sub") and len(vals) == 2:
        return (vals[0][0] + (vals[1][0] if op == "add" else -vals[1][0])) % mod, wraps
    if op == "shl" and len(vals) == 2 and vals[1][2] is not None and 0 <= vals[1][2] < width and not vals[1][1]:
        return (vals[0][0] << vals[1][2]) % mod, wraps
    if op in ("mul", "mad", "wide") and len(vals) == (3 if op == "mad" else 2):
        (sa, _, ka), (sb, _, kb) = vals[:2]
        if sa and sb or sa and kb is None or sb and ka is None:
            return None
        if op == "wide":  # (the operands widened: lane 0's + stride * lane until the narrow one wraps)
            sa, sb = _signed(sa, src_width), _signed(sb, src_width)
            ext = (lambda k: _signed(k, src_width)) if sign else (lambda k: k % (1 << src_width))
            ka = None if ka is None else ext(ka)
            kb = None if kb is None else ext(kb)
            wraps = wraps or bool(sa or sb)
        s = sa * (kb or 0) + sb * (ka or 0)
        return (s + (vals[2][0] if op == "mad" else 0)) % mod, wraps
    return None


def _slot(layout: Layout, pc: int, o: Any) -> int | None:
    if not isinstance(o, ir.Register):
        return None
    hit = layout.lookup(layout.placed[pc], o.name)
    return hit[1] if isinstance(hit, tuple) else None


# ---------------------------------------------------------------------------------------------- LLVM values
def _splatted(v: L.Value) -> L.Value | None:
    """The scalar a `warp.splat` of it made `v` from, else None."""
    if not isinstance(v, L.ShuffleVector) or not all(m.constant == 0 for m in v.operands[2].constant):
        return None
    ins = v.operands[0]
    if isinstance(ins, L.InsertElement) and isinstance(ins.operands[2], L.Constant) and ins.operands[2].constant == 0:
        return ins.operands[1]
    return None


def uniform(v: L.Value) -> bool:
    """Whether the warp vector `v` is the same in every lane as built: a constant or a splat (a shuffle of lane 0)."""
    if isinstance(v, L.Constant):
        elems = v.constant
        return not isinstance(elems, tuple | list) or len({e.constant for e in elems}) == 1
    return isinstance(v, L.ShuffleVector) and all(m.constant == 0 for m in v.operands[2].constant)


def _lanes_of(v: L.Constant) -> list[int] | None:
    """The lanes of a constant integer vector (None where one is not a plain integer)."""
    c = v.constant
    if not isinstance(c, list | tuple):  # (one value for every lane; None: zeroinitializer)
        return [c or 0] * v.type.count if isinstance(c, int | type(None)) else None
    out = [e.constant for e in c]
    return out if all(isinstance(e, int) for e in out) else None


def _signed(x: int, width: int) -> int:
    x %= 1 << width
    return x - (1 << width) if x >> (width - 1) else x


def _ext_room(s: int, width: int, sign: bool) -> tuple[int, int] | None:
    """(lo, hi): the range lane 0's value (read signed for `sign`) must lie in for the 32 lanes' values of stride
    `s` (signed) not to wrap at `width` bits; None where none can."""
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if sign else (0, (1 << width) - 1)
    lo, hi = (lo, hi - (WARP - 1) * s) if s >= 0 else (lo - (WARP - 1) * s, hi)
    return (lo, hi) if lo <= hi else None


def _element_width(v: L.Value) -> int | None:
    t = v.type
    if isinstance(t, L.VectorType) and isinstance(t.element, L.IntType) and t.count == WARP:
        return t.element.width
    return None


def stride(v: L.Value, tags: Tags) -> int | None:
    """Lane i of the warp vector `v` is lane 0's + stride * i (modulo 2**width, given `base`'s condition): the
    stride (0 <= stride < 2**width), else None."""
    width = _element_width(v)
    if width is None or width == 1:
        return None
    mod = 1 << width
    tag = tags.get(id(v))
    if tag is not None and tag[0] is v:
        return tag[1]
    if isinstance(v, L.Constant):
        lanes = _lanes_of(v)
        if lanes is None:
            return None
        s = (lanes[1] - lanes[0]) % mod
        return s if all((x - lanes[0] - s * i) % mod == 0 for i, x in enumerate(lanes)) else None
    if _splatted(v) is not None:
        return 0
    if not isinstance(v, L.Instruction) or v.flags:
        return None
    op, args = v.opname, v.operands
    if op in ("add", "sub"):
        sa, sb = stride(args[0], tags), stride(args[1], tags)
        if sa is None or sb is None:
            return None
        return (sa + sb if op == "add" else sa - sb) % mod
    if op in ("mul", "shl"):
        sa, sb = stride(args[0], tags), stride(args[1], tags)
        if sa is None or sb is None:
            return None
        ka, kb = _constant(args[0]), _constant(args[1])
        if op == "shl":
            return (sa << kb) % mod if sb == 0 and kb is not None and kb < width else None
        if sa and sb or sa and kb is None or sb and ka is None:
            return None
        return (sa * (kb or 0) + sb * (ka or 0)) % mod
    if op in ("sext", "zext", "trunc"):
        src_w = _element_width(args[0])
        inner = stride(args[0], tags)
        if inner is None or src_w is None:
            return None
        if op == "trunc":
            return inner % mod
        if _ext_room(_signed(inner, src_w), src_w, op == "sext") is None:
            return None
        return _signed(inner, src_w) % mod
    return None


def _constant(v: L.Value) -> int | None:
    """The integer every lane of `v` holds where a constant the same in every lane (an extension or truncation
    of one too: the lowering widens a `mul.wide`'s immediate so), else None."""
    if isinstance(v, L.CastInstr) and v.opname in ("sext", "zext", "trunc") and not v.flags:
        k = _constant(v.operands[0])
        width, src_w = _element_width(v), _element_width(v.operands[0])
        if k is None or width is None or src_w is None:
            return None
        return (_signed(k, src_w) if v.opname == "sext" else k) % (1 << width)
    if not isinstance(v, L.Constant):
        return None
    lanes = _lanes_of(v)
    return lanes[0] % (1 << v.type.element.width) if lanes is not None and len(set(lanes)) == 1 else None


def lanes_test(b: L.IRBuilder, v: L.Value, stride: int) -> L.Value:
    """i1: every lane of the warp vector `v` is lane 0's + `stride` * lane (modulo 2**width)."""
    et = v.type.element
    step = L.Constant(v.type, [i * stride % (1 << et.width) for i in range(WARP)])
    lane0 = b.shuffle_vector(v, v, L.Constant(L.VectorType(L.IntType(32), WARP), [0] * WARP))
    off = b.icmp_unsigned("!=", v, b.add(lane0, step))
    return b.icmp_unsigned("==", b.bitcast(off, L.IntType(WARP)), L.Constant(L.IntType(WARP), 0))


def base(b: L.IRBuilder, v: L.Value, tags: Tags) -> tuple[L.Value, L.Value | None]:
    """(lane 0 of `v` as a scalar, i1 condition or None): for a vector `stride` knows, the scalar code of its
    lane 0, and where an extension needs it the test that no lane's value wraps (every lane active)."""
    conds: list[L.Value] = []
    memo: dict[int, L.Value] = {}
    u = _base(b, v, tags, conds, memo)
    cond = None
    for c in conds:
        cond = c if cond is None else b.and_(cond, c)
    return u, cond


def _base(b: L.IRBuilder, v: L.Value, tags: Tags, conds: list[L.Value], memo: dict[int, L.Value]) -> L.Value:
    hit = memo.get(id(v))
    if hit is not None:
        return hit
    et = v.type.element
    tag = tags.get(id(v))
    if tag is not None and tag[0] is v:
        out = b.extract_element(v, L.Constant(L.IntType(32), 0))
        if tag[2]:  # (lane 31 where no wrap put it: see `Lanes`)
            last = b.extract_element(v, L.Constant(L.IntType(32), WARP - 1))
            conds.append(b.icmp_unsigned("==", last, b.add(out, L.Constant(et, (WARP - 1) * tag[1] % (1 << et.width)))))
        if tag[3] is True:  # (every lane where lane 0's and the stride put it: see `Strides`)
            conds.append(lanes_test(b, v, tag[1]))
        elif tag[3] is not False:  # (that test, made where the register was taken in)
            conds.append(tag[3])
    elif isinstance(v, L.Constant):
        lanes = _lanes_of(v)
        assert lanes is not None
        out = L.Constant(et, lanes[0])
    elif (x := _splatted(v)) is not None:
        out = x
    else:
        op, args = v.opname, v.operands
        if op in ("sext", "zext", "trunc"):
            u = _base(b, args[0], tags, conds, memo)
            src_w = args[0].type.element.width
            s = stride(args[0], tags)
            assert s is not None
            if op != "trunc" and s:  # (lane 0's value leaves room for the others': see `_ext_room`)
                room = _ext_room(_signed(s, src_w), src_w, op == "sext")
                assert room is not None
                cmp = b.icmp_signed if op == "sext" else b.icmp_unsigned
                if _signed(s, src_w) > 0:
                    conds.append(cmp("<=", u, L.Constant(u.type, room[1])))
                else:
                    conds.append(cmp(">=", u, L.Constant(u.type, room[0])))
            out = {"sext": b.sext, "zext": b.zext, "trunc": b.trunc}[op](u, et)
        else:
            x, y = _base(b, args[0], tags, conds, memo), _base(b, args[1], tags, conds, memo)
            out = {"add": b.add, "sub": b.sub, "mul": b.mul, "shl": b.shl}[op](x, y)
    memo[id(v)] = out
    return out


def remake(b: L.IRBuilder, v: L.Value, tags: Tags) -> L.Value:
    """`v` (a vector `stride` knows) built again where `b` stands from the same leaves (tagged registers,
    splatted scalars, constants): a side path's copy, so that the path it was made on needs none of it."""
    memo: dict[int, L.Value] = {}

    def again(x: L.Value) -> L.Value:
        hit = memo.get(id(x))
        if hit is not None:
            return hit
        tag = tags.get(id(x))
        if isinstance(x, L.Constant) or (tag is not None and tag[0] is x) or not isinstance(x, L.Instruction):
            out = x
        elif (s := _splatted(x)) is not None:
            zero = L.Constant(x.type, None)
            out = b.shuffle_vector(b.insert_element(zero, s, L.Constant(L.IntType(32), 0)), zero, x.operands[2])
        elif x.opname in ("sext", "zext", "trunc"):
            out = {"sext": b.sext, "zext": b.zext, "trunc": b.trunc}[x.opname](again(x.operands[0]), x.type)
        else:
            op = {"add": b.add, "sub": b.sub, "mul": b.mul, "shl": b.shl}[x.opname]
            out = op(again(x.operands[0]), again(x.operands[1]))
        memo[id(x)] = out
        return out
    return again(v)
