"""Find and run NVIDIA's command-line tools (ptxas, nvcc, cuobjdump).

Search order: an explicit path, $CUDA_HOME/bin (absolute: a relative one is refused), PATH (absolute entries
only), then the pip wheels (nvidia-cuda-nvcc, nvidia-cuda-cuobjdump) in this interpreter's site-packages.
Environment variables are read through `ptxforge.environment`. Never the current directory
or other `sys.path` entries: `python -m` puts the working directory first on sys.path, and a planted
`./nvidia/cu13/bin/ptxas` must not run.
"""

from __future__ import annotations

import functools
import os
import re
import site
import struct
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptxforge import cache, environment
from ptxforge.errors import Error


class ToolNotFound(Error, RuntimeError):
    """The tool is in none of the places searched; the message lists them."""


def find_tool(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """Path of the tool `name`, searched in the documented order; ToolNotFound says where it looked."""
    tried = []
    if explicit:
        p = Path(explicit)
        if p.is_dir():
            p = p / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise ToolNotFound(f"{name}: the path given, {explicit}, is not an executable")
    try:
        cuda_home = environment.cuda_home()
    except environment.EnvironmentVariableError as e:  # a relative CUDA_HOME would run ./bin/ptxas
        raise ToolNotFound(f"{name}: {e}") from None
    if cuda_home is not None:
        p = cuda_home / "bin" / name
        tried.append(str(p))
        if p.is_file():
            return p
    found = environment.which(name)  # absolute PATH entries only: '' or '.' would mean the current directory
    tried.append(f"PATH ({name})")
    if found:
        return found
    for p in _wheel_candidates(name):
        tried.append(str(p))
        if p.is_file():
            return p
    raise ToolNotFound(f"{name} not found; looked in: {', '.join(tried)}. Install the tools extra "
                       f"(pip install 'ptxforge[tools]': NVIDIA's nvcc/cuobjdump/nvdisasm wheels) or set CUDA_HOME.")


def _site_packages() -> list[Path]:
    """This interpreter's installation directories for packages (not sys.path, which may hold the cwd)."""
    paths = sysconfig.get_paths()
    roots = [paths.get("purelib"), paths.get("platlib"), *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        roots.append(site.getusersitepackages())
    out: list[Path] = []
    for r in roots:
        if r and Path(r).is_absolute() and Path(r).is_dir() and Path(r) not in out:
            out.append(Path(r))
    return out


def _wheel_candidates(name: str):
    for root in _site_packages():
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cu12/bin"):
            yield root / sub / name


@dataclass(frozen=True)
class ToolMessage:
    """One line ptxas printed, mapped to the PTX file and line it names."""

    severity: str  # 'error' | 'warning' | 'info'
    line: int
    message: str


_PTXAS_LINE = re.compile(
    r"^ptxas\s+(?P<file>.*?), line (?P<line>\d+); (?P<sev>fatal|error|warning|info)\s*: (?P<msg>.*)$")
_PTXAS_PLAIN = re.compile(r"^ptxas\s+(?P<sev>fatal|error|warning|info)\s*: (?P<msg>.*)$")


@dataclass
class AssembleResult:
    ok: bool
    cubin: bytes
    messages: list[ToolMessage]
    stderr: str


def ptxas_version(ptxas: Path | None = None) -> str:
    out = subprocess.run([str(ptxas or find_tool("ptxas")), "--version"], capture_output=True, text=True)
    m = re.search(r"release (\d+\.\d+)", out.stdout)
    return m.group(1) if m else out.stdout.strip().splitlines()[-1]


def ptxas_max_ptx_version(ptxas: Path | None = None) -> tuple[int, int] | None:
    """The newest PTX ISA version ptxas reads (`ptxas --list-version`), or None if it does not say."""
    out = subprocess.run([str(ptxas or find_tool("ptxas")), "--list-version"], capture_output=True, text=True)
    versions = [(int(major), int(minor)) for major, minor in re.findall(r"^(\d+)\.(\d+)\s*$", out.stdout, re.M)]
    return max(versions) if versions else None


def assemble(ptx: str, arch: str, flags: list[str] | tuple = (), ptxas: str | None = None,
             timeout: float = 300) -> AssembleResult:
    """Run ptxas on PTX text for `arch`; messages carry the PTX line numbers ptxas names.

    Results are kept in the on-disk cache (see ptxforge.cache), keyed by the text, arch, flags and the ptxas
    binary (its path, size, mtime and version), so a second build of the same PTX costs a file read."""
    tool = find_tool("ptxas", ptxas)
    k = cache.key(ptx, arch, "\0".join(map(str, flags)), _tool_identity(str(tool)))
    hit = _verdict(cache.get_json("ptxas", k))
    if hit is not None:
        return hit
    result = _assemble(ptx, arch, flags, tool, timeout)
    cache.put_json("ptxas", k, {"ok": result.ok, "cubin": result.cubin.hex(), "stderr": result.stderr,
                                "messages": [[m.severity, m.line, m.message] for m in result.messages]})
    return result


_SEVERITIES = ("error", "warning", "info")


def _verdict(entry: object) -> AssembleResult | None:
    """A cached ptxas verdict whose fields are all of their type and agree with each other (ok: an ELF cubin
    and no error message; not ok: no cubin), else None: assemble again rather than trust it."""
    if not isinstance(entry, dict) or set(entry) != {"ok", "cubin", "messages", "stderr"}:
        return None
    ok, cubin, messages, stderr = entry["ok"], entry["cubin"], entry["messages"], entry["stderr"]
    if not isinstance(ok, bool) or not isinstance(cubin, str) or not isinstance(stderr, str):
        return None
    if not isinstance(messages, list) or not all(
            isinstance(m, list) and len(m) == 3 and m[0] in _SEVERITIES and type(m[1]) is int and m[1] >= 0
            and isinstance(m[2], str) for m in messages):
        return None
    try:
        blob = bytes.fromhex(cubin)
    except ValueError:
        return None
    errors = any(m[0] == "error" for m in messages)
    if (ok and (not blob.startswith(b"\x7fELF") or errors)) or (not ok and blob):
        return None
    return AssembleResult(ok, blob, [ToolMessage(*m) for m in messages], stderr)


@functools.lru_cache(maxsize=16)
def _tool_identity(path: str) -> str:
    st = os.stat(path)
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    return f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{out.stdout.strip()}"


def _assemble(ptx: str, arch: str, flags, tool: Path, timeout: float) -> AssembleResult:
    with tempfile.TemporaryDirectory(prefix="ptxforge-") as d:
        src, out = Path(d) / "input.ptx", Path(d) / "out.cubin"
        src.write_text(ptx, encoding="utf-8", errors="surrogateescape")
        proc = subprocess.run([str(tool), f"-arch={arch}", *flags, str(src), "-o", str(out)],
                              capture_output=True, text=True, timeout=timeout)
        cubin = out.read_bytes() if out.exists() and proc.returncode == 0 else b""
    messages = []
    for line in (proc.stderr + proc.stdout).splitlines():
        m = _PTXAS_LINE.match(line.strip())
        if m:
            sev = "error" if m.group("sev") == "fatal" else m.group("sev")
            messages.append(ToolMessage(sev, int(m.group("line")), m.group("msg").strip()))
            continue
        m = _PTXAS_PLAIN.match(line.strip())
        if m and m.group("msg").strip() != "Ptx assembly aborted due to errors":
            sev = "error" if m.group("sev") == "fatal" else m.group("sev")
            messages.append(ToolMessage(sev, 0, m.group("msg").strip()))
    return AssembleResult(proc.returncode == 0, cubin, messages, proc.stderr)


def elf_sections(blob: bytes) -> dict[str, bytes]:
    """Section name -> contents of an ELF64 little-endian file such as a cubin."""
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names_at = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = blob[names_at + h[0]:blob.index(b"\0", names_at + h[0])].decode()
        out[name] = b"" if h[1] == 8 else blob[h[4]:h[4] + h[5]]  # SHT_NOBITS has no bytes
    return out
