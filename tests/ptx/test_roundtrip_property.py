"""Property: parse(print(m)) == m for modules generated from the ISA table.

The strategy builds IR directly: instructions from the table's families with their modifiers and types,
operands of every kind the IR has (registers, special registers, immediates and constant expressions,
addresses, vectors, predicates, pairs, symbols, labels), register and variable declarations over the
fundamental types, kernel directives, nested blocks and guards. The printed text must parse back to an equal
module (immediate values included, which IR equality leaves out) and print identically again.
"""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxforge as pf
from ptxforge.ptx import ir
from ptxforge.ptx.isa import FAMILIES
from ptxforge.ptx.isa.targets import PTX_VERSIONS, SM_MIN_PTX, SUFFIXED

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SCALAR_TYPES = sorted(t for t in ir.ALL_TYPES if t != ".pred")
REG_TYPES = [".b16", ".b32", ".b64", ".f32", ".f64", ".pred"]
REGS = {".b16": "%rs", ".b32": "%r", ".b64": "%rd", ".f32": "%f", ".f64": "%fd", ".pred": "%p"}
SREGS = ["%tid.x", "%ntid.y", "%ctaid.z", "%laneid", "%warpid", "%clock64", "%smid"]
FAMILY_NAMES = sorted(FAMILIES)
TARGETS = sorted([f"sm_{n}" for n in SM_MIN_PTX if n >= 50]
                 + [f"sm_{n}{x}" for x in ("a", "f") for n in SUFFIXED[x]])
PERF = [".maxntid", ".reqntid", ".minnctapersm", ".maxnreg"]
GLOBALS = ["gbuf", "table", "counter"]


@cache  # one strategy object per argument: hypothesis validates each new one, per draw otherwise
def register(kind: str | None = None) -> st.SearchStrategy:
    kinds = [kind] if kind else REG_TYPES
    return st.builds(lambda t, i: ir.Register(f"{REGS[t]}{i}"), st.sampled_from(kinds), st.integers(0, 7))


@cache
def int_text() -> st.SearchStrategy:
    """Integer literal spellings as the parser keeps them: decimal, hex, octal, binary, U suffix, a minus."""
    v = st.integers(0, (1 << 64) - 1)
    spelled = st.one_of(v.map(str), v.map(lambda n: f"0x{n:X}"), v.map(lambda n: f"0{n:o}" if n else "0"),
                        v.map(lambda n: f"0b{n:b}"), v.map(lambda n: f"{n}U"))
    return st.tuples(st.booleans(), spelled).map(lambda p: ("-" if p[0] else "") + p[1])


@cache
def immediate() -> st.SearchStrategy:
    floats = st.sampled_from(["0f3F800000", "0fBF000000", "0d4000000000000000", "1.5", "0.0", "2.5e3"])
    exprs = st.sampled_from(["4*2", "WARP_SZ-1", "(1<<5)|3", "-7/2", "(((1)))", "~0&255", "1+2*3-4",
                             "-(-(-1))", "!0", "(3>2)==1"])
    return st.one_of(int_text(), floats, exprs).map(lambda t: ir.Immediate(0, t))


@cache
def address() -> st.SearchStrategy:
    base = st.one_of(register(".b64"), register(".b32"), st.sampled_from(GLOBALS).map(ir.Symbol))
    offset = st.integers(-(1 << 40), 1 << 40)
    # `written` is True whenever the offset is not 0 (the parser's and the DSL's form); for 0 it tells `[p+0]`
    # from `[p]`
    return st.one_of(st.builds(lambda b, o, w: ir.Address(b, o, w or o != 0), base, offset, st.booleans()),
                     offset.map(lambda o: ir.Address(None, o, False)))


@cache
def scalar() -> st.SearchStrategy:
    return st.one_of(register(), register(), immediate(), st.sampled_from(SREGS).map(ir.SpecialRegister),
                     st.sampled_from(GLOBALS).map(ir.Symbol), st.just(ir.Sink()))


@cache
def operand() -> st.SearchStrategy:
    pred = register(".pred")
    return st.one_of(
        scalar(), scalar(), address(),
        st.lists(st.one_of(register(), st.just(ir.Sink())), min_size=1, max_size=4).map(
            lambda es: ir.Vector(tuple(es))),
        pred.map(ir.Negated), register(".f32").map(ir.Minus),
        st.builds(ir.PredPair, register(), pred),
        st.builds(ir.RegisterOffset, register(".b64"), st.integers(0, 1 << 20)),
    )


@st.composite
def instruction(draw) -> ir.Instruction:
    family = draw(st.sampled_from(FAMILY_NAMES))
    spec = FAMILIES[family]
    opcode, *parts = family.split(".")
    mods = sorted(spec.modifiers or ())
    chosen = draw(st.lists(st.sampled_from(mods), max_size=2, unique=True)) if mods else []
    types = sorted(spec.types or ())
    ntypes = draw(st.sampled_from(spec.ntypes or (1,))) if types else 0
    suffixes = [*parts, *(m.lstrip(".") for m in chosen), *(draw(st.sampled_from(types)).lstrip(".")
                                                            for _ in range(ntypes))]
    sig = spec.signatures[0] if spec.signatures else None
    low = sig.min_count if sig else 0
    high = min(sig.max_count if sig and sig.max_count is not None else low + 2, low + 2, 6)
    ops = draw(st.lists(operand(), min_size=min(low, 6), max_size=max(high, min(low, 6))))
    guard = draw(st.one_of(st.none(), st.builds(lambda i, n: ir.Guard(f"%p{i}", n), st.integers(0, 7),
                                                st.booleans())))
    return ir.Instruction(opcode, tuple(suffixes), tuple(ops), guard)


@cache
def statement(depth: int) -> st.SearchStrategy:
    options = [instruction(), instruction(), instruction(),
               st.sampled_from(["L0", "L1", "$L__BB0_2"]).map(ir.Label),
               st.builds(lambda t, n: ir.Variable(".shared", t, f"sh{n}", (n + 1,), 4 if n % 2 else None),
                         st.sampled_from(SCALAR_TYPES), st.integers(0, 9)),
               st.builds(ir.Loc, st.integers(1, 3), st.integers(1, 5000), st.integers(0, 80))]
    if depth < 3:
        options.append(st.lists(st.deferred(lambda: statement(depth + 1)), max_size=4).map(
            lambda body: ir.Block(tuple(body))))
    return st.one_of(*options)


def declarations() -> tuple:
    return tuple(ir.RegisterDecl(t, (REGS[t],), 8) for t in REG_TYPES)


@st.composite
def module(draw) -> ir.Module:
    target = draw(st.sampled_from(TARGETS))
    version = draw(st.sampled_from(sorted(v for v in PTX_VERSIONS if v >= (8, 0))))
    variables = tuple(
        ir.Variable(draw(st.sampled_from([".global", ".const"])), draw(st.sampled_from(SCALAR_TYPES)), name,
                    draw(st.sampled_from([(), (4,), (2, 3)])), draw(st.sampled_from([None, 4, 16])))
        for name in GLOBALS)
    params = tuple(ir.Param(".param", draw(st.sampled_from([".u64", ".u32", ".f32", ".b8"])), f"p{i}",
                            draw(st.sampled_from([(), (16,)])))
                   for i in range(draw(st.integers(0, 3))))
    directives = tuple((d, tuple(draw(st.lists(st.integers(1, 1024), min_size=1, max_size=3))))
                       for d in draw(st.lists(st.sampled_from(PERF), unique=True, max_size=2)))
    body = declarations() + tuple(draw(st.lists(statement(0), min_size=1, max_size=12)))
    kernel = ir.Function("entry", "k", params, (), ".visible", directives, body)
    helper = ir.Function("func", "helper", (), (), None, (), declarations() + (ir.Instruction("ret", (), ()),))
    return ir.Module(version, ir.Target((target,)), 64, (*variables, helper, kernel))


def immediates(m: ir.Module) -> list:
    """(text, value) of every immediate, in order (IR equality compares only the text)."""
    out: list = []

    def walk_op(o) -> None:
        if isinstance(o, ir.Immediate):
            out.append((o.text, o.value))
        for name in ("operand", "first", "second", "register"):
            if hasattr(o, name):
                walk_op(getattr(o, name))
        for name in ("elements", "items"):
            for e in getattr(o, name, ()):
                walk_op(e)

    for f in m.functions:
        for ins in f.instructions():
            for o in ins.operands:
                walk_op(o)
    return out


@SETTINGS
@given(module())
def test_parse_of_print_is_the_module(m):
    text = m.to_ptx()
    back = pf.parse(text, filename="gen.ptx")
    assert back == m, text
    assert back.to_ptx(canonical=True) == text
    got = immediates(back)
    assert [t for t, _ in got] == [t for t, _ in immediates(m)]
    again = immediates(pf.parse(back.to_ptx(canonical=True)))
    assert got == again  # the same values from the same text


def test_the_strategy_covers_the_table():
    """The families sampled reach every group of the table (so the property is about the ISA, not a corner)."""
    groups = {FAMILIES[f].group for f in FAMILY_NAMES}
    assert len(FAMILY_NAMES) > 100 and len(groups) > 3
