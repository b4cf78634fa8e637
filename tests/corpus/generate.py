#!/usr/bin/env python3
"""Regenerate the PTX corpus under tests/corpus/ptx/ and its manifest.json.

Sources:
  src/cuda/*.cu    -> nvcc -ptx, per arch (sm_80 sm_89 sm_90a sm_100a, or the set named in the file's
                      ``archs:`` header comment), flags -O3 for every arch, plus -G -lineinfo for sm_80
                      and sm_90a (dropped when the -G PTX exceeds 400 KB), and -O3 -lineinfo for those two
                      when the file's header says ``variants: lineinfo``
  src/triton/*.py  -> triton.compile (no GPU needed) for sm_80 and sm_90, via compile_triton.py
  src/numba/*.py   -> numba.cuda.compile_ptx for sm_80 and sm_90, via compile_numba.py
  src/cuda/*.cu    -> also NVRTC (the run-time compiler) for the sources listed in compile_nvrtc.py

Triton, numba and NVRTC run in a subprocess of --tool-python (default: this interpreter); when they are not
importable (loadable) there, that generator is skipped with a message and its existing entries are kept.

Output is deterministic: absolute paths that nvcc writes into ``.file`` directives are rewritten to
repo-relative ones (sources) or ``$CUDA_HOME/...`` (CUDA headers), and the manifest is sorted.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
REPO = CORPUS.parent.parent
SRC = CORPUS / "src"
PTX = CORPUS / "ptx"
MANIFEST = CORPUS / "manifest.json"

CUDA_ARCHS = ("sm_80", "sm_89", "sm_90a", "sm_100a")
DEBUG_ARCHS = ("sm_80", "sm_90a")
FLAG_SETS = {"O3": ("-O3",), "G": ("-G", "-lineinfo"), "lineinfo": ("-O3", "-lineinfo")}
DEBUG_SIZE_LIMIT = 400 * 1024
PTXAS_MAX_VERSION = "9.0"  # highest .version that ptxas 13.0 accepts

_ARCHS_HEADER = re.compile(r"^//.*\barchs:\s*(.+)$")
_LINEINFO_HEADER = re.compile(r"^//.*\bvariants:.*\blineinfo\b")
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][\w$]*)", re.M)
_VERSION = re.compile(r"^\s*\.version\s+(\d+\.\d+)", re.M)
_TARGET = re.compile(r"^\s*\.target\s+([\w, ]+)", re.M)


@dataclass(frozen=True)
class Job:
    source: Path
    arch: str
    variant: str  # "O3", "G" or "lineinfo" (-O3 -lineinfo, for sources whose header asks for it)

    @property
    def out(self) -> Path:
        return PTX / "cuda" / f"{self.source.stem}.{self.arch}.{self.variant}.ptx"


def log(msg: str) -> None:
    print(msg, flush=True)


def rel(p: Path) -> str:
    return p.resolve().relative_to(CORPUS).as_posix()


# ----------------------------------------------------------------------------- tool location
def find_nvcc(option: str | None) -> Path:
    """--nvcc option, then $CUDA_HOME/bin/nvcc, then PATH."""
    if option:
        p = Path(option)
        if not (p.is_file() and os.access(p, os.X_OK)):
            sys.exit(f"error: --nvcc {option} is not an executable file")
        return p
    home = os.environ.get("CUDA_HOME")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return Path(home) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    sys.exit("error: nvcc not found: pass --nvcc PATH, set CUDA_HOME, or put nvcc on PATH")


def find_ptxas(nvcc_option: str | None) -> Path | None:
    """ptxas beside the nvcc that find_nvcc would pick (following a wrapper's real bin dir), else PATH."""
    candidates = [Path(nvcc_option)] if nvcc_option else []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc")
    if shutil.which("nvcc"):
        candidates.append(Path(shutil.which("nvcc")))
    for nvcc in candidates:
        if nvcc.is_file():
            beside = cuda_home_of(nvcc) / "bin" / "ptxas"
            if beside.is_file():
                return beside
    found = shutil.which("ptxas")
    return Path(found) if found else None


def nvcc_version(nvcc: Path) -> tuple[str, str]:
    """Return ("13.0", "13.0.88") from ``nvcc --version``."""
    text = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", text)
    if not m:
        sys.exit(f"error: cannot read the version from `{nvcc} --version`:\n{text}")
    return m.group(1), m.group(2)


def cuda_home_of(nvcc: Path) -> Path:
    """The CUDA root nvcc really uses (nvcc may be a wrapper script): _HERE_ from ``nvcc -dryrun``."""
    r = subprocess.run([str(nvcc), "-dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True)
    m = re.search(r"^#\$ _HERE_=(.+)$", r.stdout + r.stderr, re.M)
    return Path(m.group(1).strip()).resolve().parent if m else nvcc.resolve().parent.parent


# ----------------------------------------------------------------------------- CUDA sources
def source_archs(src: Path) -> tuple[str, ...]:
    """Archs named by the first ``// ... archs: ...`` comment in the first 10 lines (default: all)."""
    for line in src.read_text().splitlines()[:10]:
        m = _ARCHS_HEADER.match(line.strip())
        if m:
            words = re.findall(r"sm_\d+a?", m.group(1))
            if m.group(1).strip().startswith("all") or not words:
                return CUDA_ARCHS
            unknown = [w for w in words if w not in CUDA_ARCHS]
            if unknown:
                sys.exit(f"error: {src}: archs header names {unknown}, supported: {CUDA_ARCHS}")
            return tuple(a for a in CUDA_ARCHS if a in words)
    return CUDA_ARCHS


_FILE_DIRECTIVE = re.compile(r'^(\s*\.file\s+\d+\s+")([^"]+)(")', re.M)


def make_portable(ptx: str, cuda_home: Path) -> str:
    """Rewrite absolute paths in .file directives: repo files -> repo-relative, CUDA -> $CUDA_HOME/..."""
    def fix(m: re.Match) -> str:
        path = Path(os.path.normpath(m.group(2)))
        for root, shown in ((REPO, ""), (cuda_home, "$CUDA_HOME/")):
            if path.is_relative_to(root):
                return m.group(1) + shown + path.relative_to(root).as_posix() + m.group(3)
        return m.group(0)

    return _FILE_DIRECTIVE.sub(fix, ptx)


def compile_cuda(job: Job, nvcc: Path, cuda_home: Path, includes=()) -> tuple[Job, str | None]:
    """Compile one (source, arch, variant); return (job, error or None). Writes job.out on success.
    `includes`: extra header folders (-I), e.g. the nvidia-curand wheel's for curand_kernel.h."""
    flags = [*FLAG_SETS[job.variant], *(f"-I{d}" for d in includes)]
    with tempfile.TemporaryDirectory(prefix="ptxcorpus-") as tmp:
        out = Path(tmp) / "out.ptx"
        cmd = [str(nvcc), "-ptx", f"-arch={job.arch}", *flags, str(job.source.relative_to(REPO)), "-o",
               str(out)]
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if r.returncode != 0:
            return job, f"nvcc failed ({' '.join(cmd)}):\n{r.stderr.strip()}"
        text = make_portable(out.read_text(), cuda_home)
    if job.variant == "G" and len(text.encode()) > DEBUG_SIZE_LIMIT:
        return job, f"skipped: -G PTX is {len(text.encode()) // 1024} KB > {DEBUG_SIZE_LIMIT // 1024} KB"
    job.out.parent.mkdir(parents=True, exist_ok=True)
    job.out.write_text(text)
    return job, None


def cuda_jobs(pattern: str | None) -> list[Job]:
    jobs = []
    for src in sorted((SRC / "cuda").glob("*.cu")):
        if pattern and not fnmatch.fnmatch(src.stem, pattern):
            continue
        lineinfo = any(_LINEINFO_HEADER.match(line.strip()) for line in src.read_text().splitlines()[:10])
        for arch in source_archs(src):
            jobs.append(Job(src, arch, "O3"))
            if arch in DEBUG_ARCHS:
                jobs.append(Job(src, arch, "G"))
                if lineinfo:
                    jobs.append(Job(src, arch, "lineinfo"))
    return jobs


def ptx_facts(text: str) -> dict:
    v = _VERSION.search(text)
    t = _TARGET.search(text)
    return {
        "kernels": sorted(set(_ENTRY.findall(text))),
        "ptx_version": v.group(1) if v else None,
        "target": t.group(1).strip() if t else None,
    }


def generate_cuda(args, entries: dict[str, dict]) -> list[str]:
    nvcc = find_nvcc(args.nvcc)
    major_minor, full = nvcc_version(nvcc)
    cuda_home = cuda_home_of(nvcc)
    log(f"nvcc: {nvcc} (release {full})")
    jobs = cuda_jobs(args.only)
    problems = []
    # stale outputs are removed first (all of them without --only), so skipped -G files and the PTX of
    # deleted sources do not linger
    stale = (PTX / "cuda").glob("*.ptx") if args.only is None else (job.out for job in jobs)
    for path in list(stale):
        path.unlink(missing_ok=True)
    for key in [k for k, e in entries.items() if e["generator"].startswith("nvcc")
                and (not args.only or fnmatch.fnmatch(Path(e["source"]).stem, args.only))]:
        del entries[key]
    with futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda j: compile_cuda(j, nvcc, cuda_home, args.include), jobs)
        for i, (job, err) in enumerate(done, 1):
            name = rel(job.out)
            if err is None:
                text = job.out.read_text()
                entries[name] = {
                    "path": name,
                    "source": rel(job.source),
                    "generator": f"nvcc {major_minor}",
                    "generator_version": full,
                    "arch": job.arch,
                    "flags": " ".join(FLAG_SETS[job.variant]),
                    **ptx_facts(text),
                }
                log(f"[{i:3}/{len(jobs)}] {name} ({len(text.encode()) // 1024} KB)")
            else:
                log(f"[{i:3}/{len(jobs)}] {name}: {err}")
                if not err.startswith("skipped"):
                    problems.append(f"{name}: {err}")
    return problems


# ----------------------------------------------------------------------------- Triton / numba
def generate_tool(kind: str, args, entries: dict[str, dict]) -> list[str]:
    """Run compile_<kind>.py in --tool-python; it prints one JSON line per written PTX file."""
    script = CORPUS / f"compile_{kind}.py"
    probe_code = {"triton": "import triton", "numba": "import numba.cuda",
                  "nvrtc": f"import sys; sys.path.insert(0, {str(CORPUS)!r}); import compile_nvrtc as c; c.NVRTC()"}
    probe = subprocess.run([args.tool_python, "-c", probe_code[kind]], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        log(f"{kind}: skipped, not importable in {args.tool_python} ({last}); existing {kind} PTX kept")
        return []
    out_dir = PTX / kind
    # outputs of the modules about to be recompiled go first (all of them without --only)
    for key in [k for k, e in entries.items() if k.startswith(f"ptx/{kind}/")
                and (args.only is None or fnmatch.fnmatch(Path(e["source"]).stem, args.only))]:
        (CORPUS / key).unlink(missing_ok=True)
        del entries[key]
    if args.only is None:
        for old in out_dir.glob("*.ptx"):
            old.unlink()
    # one process per module: numba's mangled names carry per-process counters, so this keeps each
    # module's output independent of which other modules were compiled (e.g. with --only)
    if kind == "nvrtc":  # a selection of the CUDA sources, compiled with the CUDA headers of the nvcc found
        import compile_nvrtc

        stems = sorted(compile_nvrtc.NVRTC_SOURCES)
        src_dir, extra = SRC / "cuda", ["--include", str(cuda_home_of(find_nvcc(args.nvcc)) / "include")]
    else:
        stems, src_dir, extra = [m.stem for m in sorted((SRC / kind).glob("*.py"))], SRC / kind, []
    modules = [src_dir / stem for stem in stems if not args.only or fnmatch.fnmatch(stem, args.only)]
    problems = []
    for module in modules:
        cmd = [args.tool_python, str(script), "--src", str(src_dir), "--out", str(out_dir), "--only", module.stem,
               *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        for line in r.stdout.splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "error" in rec:
                log(f"{kind}: {rec['name']}: {rec['error']}")
                problems.append(f"{kind} {rec['name']}: {rec['error']}")
                continue
            path = Path(rec.pop("path"))
            text = path.read_text()
            name = rel(path)
            entries[name] = {"path": name, "source": rel(Path(rec.pop("source"))), **rec, **ptx_facts(text)}
            log(f"{kind}: {name} ({len(text.encode()) // 1024} KB)")
        if r.returncode != 0 and not any(p.startswith(f"{kind} ") for p in problems):
            problems.append(f"{kind}: {script.name} failed on {module.name} (exit {r.returncode}):\n"
                            f"{r.stderr.strip()[-2000:]}")
            log(problems[-1])
    return problems


# ----------------------------------------------------------------------------- ptxas check
def ptxas_check(path: Path, arch: str, ptxas: Path) -> str | None:
    """Assemble with ptxas; PTX newer than ptxas accepts is checked with .version lowered in a temp copy."""
    text = path.read_text()
    m = _VERSION.search(text)
    if m and tuple(map(int, m.group(1).split("."))) > tuple(map(int, PTXAS_MAX_VERSION.split("."))):
        text = text[: m.start(1)] + PTXAS_MAX_VERSION + text[m.end(1):]
    with tempfile.TemporaryDirectory(prefix="ptxcheck-") as tmp:
        src = Path(tmp) / path.name
        src.write_text(text)
        r = subprocess.run([str(ptxas), f"-arch={arch}", str(src), "-o", str(Path(tmp) / "out.cubin")],
                           capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip() or f"ptxas exited {r.returncode}")


def check_all(entries: dict[str, dict], ptxas: Path, jobs: int, everything: bool) -> list[str]:
    """Assemble the entries written in this run (those without ptxas_ok), or all with everything=True."""
    items = sorted((e for e in entries.values() if everything or "ptxas_ok" not in e), key=lambda e: e["path"])

    def one(e):
        arch = (e.get("target") or e["arch"]).split(",")[0].strip()
        return e, ptxas_check(CORPUS / e["path"], arch, ptxas)

    failures = []
    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for e, err in pool.map(one, items):
            e["ptxas_ok"] = err is None
            if err:
                failures.append(f"{e['path']}: {err}")
                log(f"ptxas FAIL {e['path']}: {err.splitlines()[0]}")
    log(f"ptxas: {len(items) - len(failures)}/{len(items)} files assemble")
    return failures


# ----------------------------------------------------------------------------- main
def load_entries() -> dict[str, dict]:
    if not MANIFEST.exists():
        return {}
    return {e["path"]: e for e in json.loads(MANIFEST.read_text())["files"]}


def write_manifest(entries: dict[str, dict]) -> None:
    live = [e for k, e in sorted(entries.items()) if (CORPUS / k).exists()]
    doc = {"description": "PTX corpus for ptxforge; paths are relative to tests/corpus/. "
                          "Regenerate with tests/corpus/generate.py.",
           "files": live}
    MANIFEST.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvcc", help="nvcc to use (default: $CUDA_HOME/bin/nvcc, then PATH)")
    ap.add_argument("--tool-python", default=sys.executable,
                    help="python interpreter that has triton / numba-cuda / nvidia-cuda-nvrtc (default: this one)")
    ap.add_argument("--include", action="append", default=[], metavar="DIR",
                    help="extra header folder for nvcc (-I), e.g. site-packages/nvidia/cu13/include of the "
                         "nvidia-curand wheel, which curand_*.cu needs")
    ap.add_argument("--only", metavar="GLOB", help="regenerate only sources whose stem matches GLOB")
    ap.add_argument("--skip", action="append", default=[], choices=["cuda", "triton", "numba", "nvrtc"],
                    help="skip a generator (repeatable)")
    ap.add_argument("--no-check", action="store_true", help="do not assemble the outputs with ptxas")
    ap.add_argument("--check-all", action="store_true",
                    help="assemble every corpus file, not only those written in this run")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="parallel compiles")
    args = ap.parse_args(argv)

    entries = load_entries()
    problems: list[str] = []
    if "cuda" not in args.skip:
        problems += generate_cuda(args, entries)
    for kind in ("triton", "numba", "nvrtc"):
        if kind not in args.skip:
            problems += generate_tool(kind, args, entries)
    entries = {k: v for k, v in entries.items() if (CORPUS / k).exists()}
    if not args.no_check:
        ptxas = find_ptxas(args.nvcc)
        if ptxas is None:
            log("ptxas not found: check skipped")
        else:
            problems += check_all(entries, ptxas, args.jobs, args.check_all)
    write_manifest(entries)
    log(f"manifest: {len(entries)} files -> {rel(MANIFEST)}")
    if problems:
        log(f"{len(problems)} problem(s):")
        for p in problems:
            log(f"  {p.splitlines()[0]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
