"""`ptxforge demo`: the main job on bundled kernels, on whatever this machine has."""

from __future__ import annotations

import time
from collections import Counter
from importlib import resources

from ptxforge.ptx import ir


def register(sub) -> None:
    p = sub.add_parser("demo", help="parse, check, round-trip (and run) the bundled kernels",
                       description="Show ptxforge on bundled nvcc output: parse it, validate it, print it "
                                   "back (byte-identical, and canonical) and, where ptxas is available, "
                                   "check that ptxas builds the identical cubin from the printed text.")
    p.add_argument("--file", help="use this PTX file instead of the bundled one")
    p.set_defaults(func=run)


def bundled_ptx() -> tuple[str, str]:
    f = resources.files("ptxforge") / "data" / "demo.sm_90a.ptx"
    return f.read_text(), "demo.sm_90a.ptx"


def run(args) -> int:
    from ptxforge.cli.common import load_module, read_text
    from ptxforge.ptx.parser import parse
    from ptxforge.ptx.validator import validate

    if args.file:
        text, name = read_text(args.file), args.file
        if load_module(args.file) is None:
            return 1
    else:
        text, name = bundled_ptx()
    t0 = time.perf_counter()
    m = parse(text, filename=name)
    dt = time.perf_counter() - t0
    print(f"== {name}: {len(text):,} bytes, .version {m.version[0]}.{m.version[1]}, .target "
          f"{', '.join(m.target.targets)}  (parsed in {dt * 1e3:.1f} ms)")
    print(f"{'kernel':<18} {'params':>6} {'instrs':>6} {'regs':>5} {'smem B':>7}  most used")
    for k in m.kernels:
        ops = Counter(i.opcode for i in k.instructions())
        regs = sum(len(d.declared()) for d in _walk(k.body) if isinstance(d, ir.RegisterDecl))
        smem = sum(v.size for v in _walk(k.body) if isinstance(v, ir.Variable) and v.space == ".shared")
        top = ", ".join(f"{op} x{n}" for op, n in ops.most_common(4))
        print(f"{k.name:<18} {len(k.params):>6} {sum(ops.values()):>6} {regs:>5} {smem:>7}  {top}")
    problems = validate(m)
    print(f"validate: {'no problems' if not problems else f'{len(problems)} problems'}")
    for d in problems:
        print(d.format())
    same = m.to_ptx() == text
    canon = m.to_ptx(canonical=True)
    again = parse(canon) == m
    print(f"round trip: text {'byte-identical' if same else 'DIFFERS'}; canonical form re-parses "
          f"{'to the same IR' if again else 'DIFFERENTLY'}")
    ok = same and again and not problems
    ok &= _ptxas_check(m, text, canon)
    _emulate(m)
    print("demo: all checks passed" if ok else "demo: some checks FAILED")
    return 0 if ok else 1


def _ptxas_check(m, text: str, canon: str) -> bool:
    from ptxforge.toolchain import ToolNotFound, assemble, find_tool, ptxas_version

    try:
        tool = find_tool("ptxas")
    except ToolNotFound as e:
        print(f"ptxas: skipped ({e})")
        return True
    a = assemble(text, m.target.arch)
    b = assemble(canon, m.target.arch)
    if not (a.ok and b.ok):
        print(f"ptxas ({tool}): failed to assemble: {(a.stderr or b.stderr).strip()[:300]}")
        return False
    same = a.cubin == b.cubin
    print(f"ptxas {ptxas_version(tool)} ({tool}): cubin from canonical text "
          f"{'byte-identical' if same else 'DIFFERS'} ({len(a.cubin):,} bytes)")
    return same


def _emulate(m) -> None:
    """Run vadd on the CPU emulator when this build has one."""
    try:
        import numpy as np

        k = m.kernel("vadd")
        n = 1000
        a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
        c = np.zeros(n, np.float32)
        res = k.launch(grid=((n + 255) // 256,), block=(256,), args=[a, b, c, np.int32(n)], device="emu")
    except (ImportError, ModuleNotFoundError):
        print("emulator: not in this build yet")
        return
    ok = bool(np.array_equal(c, a + b))
    print(f"emulator: vadd on {n} elements {'matches numpy' if ok else 'MISMATCH'} ({res})")


def _walk(body):
    for s in body or ():
        yield s
        if isinstance(s, ir.Block):
            yield from _walk(s.body)
