"""The DSL against the ISA table (ptx/isa): every instruction family is emitted by some DSL function or is
listed in `dsl.coverage.UNSUPPORTED` with the reason (those are written with `dsl.raw`). The families the DSL
emits are read off its source: each `emit(opcode, [suffixes...])` call (and each call of a helper that passes
a literal opcode on to one), looked up in the table as the validator would."""

from __future__ import annotations

import ast
from pathlib import Path

import ptxforge.dsl
from ptxforge.dsl.coverage import UNSUPPORTED
from ptxforge.ptx.isa import FAMILIES, lookup

DSL = Path(ptxforge.dsl.__file__).parent
EMITTERS = ("emit", "_emit", "_emit_mixed")


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)


def _literal_suffixes(node: ast.expr | None, fn: ast.FunctionDef) -> list[str]:
    """The leading literal suffixes of a suffix-list argument: ['async', 'bulk'] of ['async', 'bulk', x]."""
    while isinstance(node, ast.BinOp):  # ["async", "mbarrier", "arrive"] + (...) + [...]
        node = node.left
    if isinstance(node, ast.Name):  # mods = ['mma_async', 'sync', ...] assigned in the same function
        assigned = [a.value for a in ast.walk(fn) if isinstance(a, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
        node = assigned[0] if len(assigned) == 1 else None
    out: list[str] = []
    for e in node.elts if isinstance(node, ast.List) else []:
        if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
            break
        out.append(e.value.lstrip("."))
    return out


def emitted_families() -> tuple[dict[str, set[str]], list[str]]:
    """(family -> the DSL functions emitting it, emit sites whose family the source does not show)."""
    functions = [(p, fn) for p in sorted(DSL.glob("*.py")) for fn in ast.walk(ast.parse(p.read_text()))
                 if isinstance(fn, ast.FunctionDef)]
    # helpers taking the opcode as their first parameter and handing it to an emitter: _logic('and', ...)
    forwarders = {fn.name for _, fn in functions if fn.args.args and any(
        isinstance(c, ast.Call) and _name(c) in EMITTERS and c.args and isinstance(c.args[0], ast.Name)
        and c.args[0].id == fn.args.args[0].arg for c in ast.walk(fn))}
    found: dict[str, set[str]] = {}
    unknown: list[str] = []
    for path, fn in functions:
        for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call)):
            name = _name(call)
            if name not in EMITTERS and name not in forwarders or not call.args or fn.name in forwarders:
                continue
            op = call.args[0]
            if not (isinstance(op, ast.Constant) and isinstance(op.value, str)):
                unknown.append(f"{path.name}:{call.lineno} ({fn.name})")
                continue
            suffixes = _literal_suffixes(call.args[1] if name in EMITTERS and len(call.args) > 1 else None, fn)
            spec = lookup(".".join([op.value, *suffixes]))
            if spec is None:
                unknown.append(f"{path.name}:{call.lineno} ({fn.name}: {op.value})")
            else:
                found.setdefault(spec.family, set()).add(fn.name)
    return found, unknown


def test_every_emit_site_names_its_family():
    _, unknown = emitted_families()
    assert unknown == []


def test_every_isa_family_is_emitted_by_the_dsl_or_declared_unsupported():
    found, _ = emitted_families()
    missing = sorted(set(FAMILIES) - set(found) - set(UNSUPPORTED))
    assert missing == [], "families with neither a DSL function nor an UNSUPPORTED entry"
    stale = sorted(set(found) & set(UNSUPPORTED))
    assert stale == [], "families the DSL emits but UNSUPPORTED still lists"
    assert sorted(set(UNSUPPORTED) - set(FAMILIES)) == [], "UNSUPPORTED names families the ISA table lacks"
    assert all(len(reason) > 20 for reason in UNSUPPORTED.values())


def test_the_scan_sees_what_the_dsl_emits():
    """A few families the DSL is known to emit, through each kind of call site the scan reads."""
    found, _ = emitted_families()
    assert {"add", "and", "sqrt", "popc", "cp.async.mbarrier.arrive", "wgmma.mma_async", "bra"} <= set(found)


def test_the_dsls_roundings_and_comparisons_are_the_tables():
    """The DSL's early errors accept exactly the ISA table's spellings (ROUNDINGS is typed out, as the `Rounding`
    type beside it must be)."""
    from ptxforge.dsl import arith
    from ptxforge.ptx.isa import modifier_slot

    assert set(arith.ROUNDINGS) == modifier_slot("add", "rnd")
    assert set(arith.INT_ROUNDINGS) == modifier_slot("cvt", "irnd")
    assert arith._CMPS == modifier_slot("setp", "cmp_int") | modifier_slot("setp", "cmp_float")
