#!/usr/bin/env python3
"""Compile the Triton corpus kernels to PTX without a GPU (called by generate.py).

Each src/triton/*.py module defines a list ``CORPUS`` of dicts:
  name        output stem (unique across the corpus)
  fn          the @triton.jit function
  signature   {arg name: Triton type string, e.g. "*fp32", "i32", "constexpr"}
  constexprs  {arg name: value} for the constexpr args
  divisible   optional list of arg names known to be multiples of 16 (tt.divisibility hints)
  num_warps, num_stages  optional compile options
  archs       optional tuple of compute capabilities (default (80, 90))

For every (kernel, arch) this writes <out>/<name>.<target>.ptx, where target is the ``.target`` of the
produced PTX (sm_80, sm_90a), and prints one JSON line describing it on stdout. Absolute paths in
``.file`` directives are made relative (repo files to the repo root, Triton's files to site-packages).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import re
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FILE_DIRECTIVE = re.compile(r'^(\s*\.file\s+\d+\s+")([^"]+)(")', re.M)


def make_portable(ptx: str) -> str:
    """Rewrite absolute .file paths: repo files -> repo-relative, Triton's own files -> triton/..."""
    import triton

    site = Path(triton.__file__).resolve().parent.parent

    def fix(m: re.Match) -> str:
        path = Path(m.group(2))
        for root in (REPO, site):
            if path.is_relative_to(root):
                return m.group(1) + path.relative_to(root).as_posix() + m.group(3)
        return m.group(0)

    return _FILE_DIRECTIVE.sub(fix, ptx)


def load_module(path: Path):
    sys.dont_write_bytecode = True   # keep __pycache__ out of src/
    spec = importlib.util.spec_from_file_location(f"corpus_triton_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_one(spec: dict, cc: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = spec["signature"]
    names = list(sig)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in spec.get("divisible", ())}
    src = ASTSource(fn=spec["fn"], signature=sig, constexprs=spec.get("constexprs", {}), attrs=attrs)
    options = {"num_warps": spec.get("num_warps", 4), "num_stages": spec.get("num_stages", 3)}
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
    return make_portable(kernel.asm["ptx"]), options


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="folder of Triton corpus modules")
    ap.add_argument("--out", type=Path, required=True, help="folder for the PTX files")
    ap.add_argument("--only", help="compile only modules whose stem matches this glob")
    args = ap.parse_args()

    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in sorted(args.src.glob("*.py")):
        if args.only and not fnmatch.fnmatch(path.stem, args.only):
            continue
        for spec in load_module(path).CORPUS:
            for cc in spec.get("archs", (80, 90)):
                try:
                    ptx, options = compile_one(spec, cc)
                except Exception as exc:  # report and go on with the other kernels
                    failed += 1
                    detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
                    print(json.dumps({"name": f"{spec['name']}@{cc}", "error": detail}), flush=True)
                    continue
                target = re.search(r"^\.target\s+(\w+)", ptx, re.M).group(1)
                out = args.out / f"{spec['name']}.{target}.ptx"
                out.write_text(ptx)
                print(json.dumps({
                    "path": str(out.resolve()),
                    "source": str(path.resolve()),
                    "generator": f"triton {triton.__version__}",
                    "generator_version": triton.__version__,
                    "arch": target,
                    "flags": " ".join(f"{k}={v}" for k, v in sorted(options.items())),
                    "compute_capability": cc,
                    "constexprs": {k: v for k, v in spec.get("constexprs", {}).items()},
                }), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
