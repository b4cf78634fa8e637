"""Mutants of corpus instructions, judged by ptxforge's validator and by ptxas.

Each mutant is one corpus file with one instruction line changed: an operand swapped for a special register,
an immediate, a vector or a memory operand; a type or width changed (`.s32` -> `.s65`); a modifier added,
dropped or invented; an operand dropped or repeated. The sample is deterministic (a seeded choice over the
corpus), so its ptxas verdicts can be recorded once and compared in CI without ptxas:

    python tests/ptx/ptxas_mutants.py            # regenerate the sample and record ptxas's verdicts
    python tests/ptx/ptxas_mutants.py --report   # agreement of the current validator with the record
    python tests/ptx/ptxas_mutants.py --heldout 7 12   # a fresh sample (seed 7, 12 per file), ptxas run live

The record is tests/ptx/data/ptxas_mutants.json; test_validator_vs_ptxas.py reads it, and the accepted
differences in tests/ptx/ptxas_differences.txt.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
CORPUS = HERE.parent / "corpus"
RECORD = HERE / "data" / "ptxas_mutants.json"
DIFFERENCES = HERE / "ptxas_differences.txt"
SEED = 20261201
PER_FILE = 6  # mutants drawn from each corpus file
MAX_LINES = 1500  # corpus files larger than this are left out (keeps the test fast)
MAX_VERSION = (9, 0)  # the newest PTX ISA the recording ptxas (13.0) reads; newer files would fail whole

_INSTR = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?(?P<mn>[a-z][\w.:]*)(?P<sp>\s+)(?P<ops>.*?);\s*$")
_REG = re.compile(r"^%[a-z]+\d+$")
_WIDTHS = {".s32": ".s65", ".u32": ".u24", ".f32": ".f128", ".b32": ".b33", ".s64": ".s128", ".u64": ".u63",
           ".f64": ".f80", ".b64": ".b48", ".u16": ".u12", ".b16": ".b17", ".f16": ".f15", ".s16": ".s15"}
_SWAPS = {".u32": ".u64", ".s32": ".f32", ".f32": ".f64", ".b32": ".b64", ".u64": ".u32", ".s64": ".s32",
          ".f64": ".f32", ".b64": ".b32", ".f16": ".f32", ".u16": ".u32", ".b16": ".b32", ".pred": ".b32"}
_EXTRA_MODS = (".rn", ".lo", ".sat", ".ftz", ".wide", ".approx", ".volatile", ".sync", ".cta", ".bogus")


def split_operands(text: str) -> list[str]:
    """Top-level comma-separated operands (commas inside {} [] () stay)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _regs(ops: list[str], start: int = 1) -> list[int]:
    return [i for i, o in enumerate(ops) if i >= start and _REG.match(o)]


def mutations(line: str) -> list[tuple[str, str]]:
    """Every (kind, mutated line) the operators make of one instruction line ([] for other lines)."""
    m = _INSTR.match(line)
    if not m or m.group("mn").startswith(".") or ":" in m.group("mn").split(".")[0]:
        return []
    indent, guard, mn, ops_text = m.group("indent"), m.group("guard") or "", m.group("mn"), m.group("ops")
    ops = split_operands(ops_text)

    def make(new_mn: str = mn, new_ops: list[str] | None = None) -> str:
        return f"{indent}{guard}{new_mn} {', '.join(ops if new_ops is None else new_ops)};"
    out: list[tuple[str, str]] = []
    srcs = _regs(ops)
    for i in srcs[:2]:
        wide = ops[i].startswith(("%rd", "%fd"))
        out.append(("sreg", make(new_ops=ops[:i] + ["%clock64" if wide else "%tid.x"] + ops[i + 1:])))
        out.append(("imm_int", make(new_ops=ops[:i] + ["7"] + ops[i + 1:])))
        out.append(("imm_float", make(new_ops=ops[:i] + ["0f3F800000"] + ops[i + 1:])))
        out.append(("vector", make(new_ops=ops[:i] + [f"{{{ops[i]}, {ops[i]}}}"] + ops[i + 1:])))
        out.append(("addr_add", make(new_ops=ops[:i] + [f"[{ops[i]}]"] + ops[i + 1:])))
    if ops and _REG.match(ops[0]):
        out.append(("imm_dest", make(new_ops=["1"] + ops[1:])))
        out.append(("sreg_dest", make(new_ops=["%tid.x"] + ops[1:])))
    for i, o in enumerate(ops):
        a = re.fullmatch(r"\[(%\w+)\]", o)
        if a:
            out.append(("addr_strip", make(new_ops=ops[:i] + [a.group(1)] + ops[i + 1:])))
            out.append(("addr_offset", make(new_ops=ops[:i] + [f"[{a.group(1)}+4]"] + ops[i + 1:])))
            break
    parts = mn.split(".")
    for j in range(1, len(parts)):
        suf = "." + parts[j]
        if suf in _WIDTHS:
            out.append(("width", make(".".join(parts[:j] + [_WIDTHS[suf][1:]] + parts[j + 1:]))))
        if suf in _SWAPS:
            out.append(("type", make(".".join(parts[:j] + [_SWAPS[suf][1:]] + parts[j + 1:]))))
    for j in range(1, len(parts)):
        if "." + parts[j] not in _WIDTHS:
            out.append(("mod_drop", make(".".join(parts[:j] + parts[j + 1:]))))
    for extra in _EXTRA_MODS:
        if extra[1:] not in parts:
            out.append(("mod_add", make(".".join(parts[:1] + [extra[1:]] + parts[1:]))))
    if len(ops) > 1:
        out.append(("operand_drop", make(new_ops=ops[:-1])))
        out.append(("operand_extra", make(new_ops=ops + [ops[-1]])))
    return [(k, t) for k, t in out if t.strip() != line.strip()]


def corpus_sample(seed: int = SEED, per_file: int = PER_FILE) -> list[dict]:
    """The deterministic sample: `per_file` mutants from each small enough corpus file, one arch per source."""
    chosen: dict[str, Path] = {}
    for path in sorted((CORPUS / "ptx").glob("*/*.ptx")):
        key = path.parent.name + "/" + path.name.split(".")[0]
        text = path.read_text()
        version = tuple(int(x) for x in re.search(r"^\s*\.version\s+(\d+)\.(\d+)", text, re.M).groups())
        if text.count("\n") <= MAX_LINES and version <= MAX_VERSION and key not in chosen:
            chosen[key] = path
    mutants = []
    for _key, path in sorted(chosen.items()):
        rel = path.relative_to(CORPUS).as_posix()
        rng = random.Random(f"{seed}:{rel}")  # per file: a file added to the corpus leaves the others' draw alone
        lines = path.read_text().splitlines()
        candidates = [(n, k, t) for n, line in enumerate(lines, 1) for k, t in mutations(line)]
        by_kind: dict[str, list] = {}
        for c in candidates:
            by_kind.setdefault(c[1], []).append(c)
        picks = []
        kinds = sorted(by_kind)
        rng.shuffle(kinds)
        while len(picks) < per_file and kinds:  # round-robin over kinds, so every file gives a mix
            for k in list(kinds):
                pool = by_kind[k]
                if not pool:
                    kinds.remove(k)
                    continue
                picks.append(pool.pop(rng.randrange(len(pool))))
                if len(picks) == per_file:
                    break
        for n, k, t in sorted(picks):
            mutants.append({"id": f"{rel}:{n}:{k}", "file": rel, "line": n, "kind": k,
                            "original": lines[n - 1].strip(), "mutant": t.strip()})
    return mutants


def mutant_text(m: dict) -> str:
    """The mutated file; ValueError when the corpus line changed since the sample was recorded."""
    lines = (CORPUS / m["file"]).read_text().splitlines()
    if lines[m["line"] - 1].strip() != m["original"]:
        raise ValueError(f"{m['id']}: the corpus line changed; re-record with python tests/ptx/ptxas_mutants.py")
    lines[m["line"] - 1] = "    " + m["mutant"]
    return "\n".join(lines) + "\n"


def target_of(text: str) -> str:
    return re.search(r"^\s*\.target\s+(\w+)", text, re.M).group(1)


def ptxforge_verdict(text: str, filename: str) -> dict:
    """{'ok', 'line', 'message'} from parsing and validating, as `ptxforge check` does."""
    import ptxforge as pf
    from ptxforge.ptx.validator import validate

    try:
        m = pf.parse(text, filename=filename)
    except pf.PTXError as e:
        return {"ok": False, "line": getattr(e, "line", None), "message": str(e).splitlines()[0]}
    errors = [d for d in validate(m) if d.severity == "error"]
    if errors:
        return {"ok": False, "line": errors[0].line, "message": errors[0].message}
    return {"ok": True, "line": None, "message": ""}


def ptxas_verdict(text: str) -> dict:
    from ptxforge.toolchain import assemble

    res = assemble(text, target_of(text))
    errors = [msg for msg in res.messages if msg.severity == "error"]
    if res.ok:
        return {"ok": True, "line": None, "message": ""}
    first = errors[0] if errors else None
    return {"ok": False, "line": first.line if first else None,
            "message": first.message if first else res.stderr.strip()[:200]}


def load_differences() -> dict[str, str]:
    """id -> reason, from ptxas_differences.txt ('ID  # reason' per line)."""
    out = {}
    for raw in DIFFERENCES.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            ident, _, reason = line.partition("#")
            out[ident.strip()] = reason.strip()
    return out


def record() -> None:
    from ptxforge.toolchain import ptxas_version

    mutants = corpus_sample()
    for i, m in enumerate(mutants):
        m["ptxas"] = ptxas_verdict(mutant_text(m))
        if i % 50 == 0:
            print(f"{i}/{len(mutants)}", file=sys.stderr)
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    data = {"ptxas": ptxas_version(), "seed": SEED, "mutants": mutants}
    RECORD.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    print(f"recorded {len(mutants)} mutants with ptxas {data['ptxas']} in {RECORD}")


def heldout(seed: int, per_file: int) -> None:
    """Agreement on a fresh sample (another seed), running ptxas live: the rate not tuned on the record."""
    mutants = corpus_sample(seed, per_file)
    for m in mutants:
        m["ptxas"] = ptxas_verdict(mutant_text(m))
    report({"mutants": mutants})


def report(data: dict | None = None) -> None:
    data = data or json.loads(RECORD.read_text())
    agree, total, lines_agree, rejected = 0, 0, 0, 0
    by_kind: dict[str, list[int]] = {}
    for m in data["mutants"]:
        mine = ptxforge_verdict(mutant_text(m), m["file"])
        same = mine["ok"] == m["ptxas"]["ok"]
        total += 1
        agree += same
        by_kind.setdefault(m["kind"], [0, 0])
        by_kind[m["kind"]][0] += same
        by_kind[m["kind"]][1] += 1
        if not m["ptxas"]["ok"] and not mine["ok"]:
            rejected += 1
            lines_agree += mine["line"] == m["ptxas"]["line"]
            if mine["line"] != m["ptxas"]["line"] and "--lines" in sys.argv:
                print(f"{m['id']}  line {mine['line']} vs ptxas {m['ptxas']['line']}: {mine['message']} | "
                      f"{m['ptxas']['message']}")
        if not same:
            print(f"{m['id']}  # ptxas {'accepts' if m['ptxas']['ok'] else 'rejects: ' + m['ptxas']['message']}; "
                  f"ptxforge {'accepts' if mine['ok'] else 'rejects: ' + mine['message']}  [{m['mutant']}]")
    print(f"\n{total} mutants, agreement {agree}/{total} = {agree / total:.1%}; both reject on the same line: "
          f"{lines_agree}/{rejected}")
    for k, (a, n) in sorted(by_kind.items()):
        print(f"  {k:14s} {a}/{n}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    if "--heldout" in sys.argv:  # --heldout SEED PER_FILE
        i = sys.argv.index("--heldout")
        heldout(int(sys.argv[i + 1]), int(sys.argv[i + 2]))
    elif "--report" in sys.argv:
        report()
    else:
        record()
