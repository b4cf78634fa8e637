"""CUDA C++ onto the emulator: `compile_cuda(source, arch=...)` compiles with NVRTC and returns a `CudaModule`.

Kernels are found by their C++ names (`mod.kernel("scale<float>")`, through `name_expressions` and NVRTC's
lowered names, or by the demangled name; plain `extern "C"` names too). Each kernel's pointer parameters
carry the pointee type of its C++ signature, so a launch refuses a float64 array for a `float*`. Compile
errors are `FILE:LINE:COL: error:` diagnostics with the source line (`CudaCompileError`, a PTXError, so the
CLI prints them as it prints PTX errors). Results are kept in ptxforge's on-disk cache, keyed by the source,
the headers given, the options, the arch and the NVRTC library.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ptxforge import cache
from ptxforge.front import nvrtc
from ptxforge.ptx import ir
from ptxforge.ptx.demangle import CppType, DemangleError, signature, template_arguments
from ptxforge.ptx.errors import Diagnostic, PTXError
from ptxforge.ptx.parser import parse
from ptxforge.runtime.kernel import Kernel
from ptxforge.runtime.params import PointeeType

# C++ element types with a numpy (or ml_dtypes) equivalent; other pointees (structs, vectors, void) take any array
ELEMENT_DTYPES = {
    "float": "float32", "double": "float64", "half": "float16", "__half": "float16", "_Float16": "float16",
    "__nv_bfloat16": "bfloat16", "bool": "bool", "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32", "long": "int64",
    "unsigned long": "uint64", "long long": "int64", "unsigned long long": "uint64",
    "__nv_fp8_e4m3": "float8_e4m3fn", "__nv_fp8_e5m2": "float8_e5m2",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16", "int32_t": "int32",
    "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
}
_HINT = "pass an array of that type (a void* parameter takes any)"
_SIGNATURE_PROBE = "__ptxforge_signature_of"
_LOG_LINE = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
                       r"(?: #\S+)?: (?P<msg>.*)$")
_ARCH = re.compile(r"^(?:sm|compute)_(\d+)([af]?)$")


class CudaCompileError(PTXError):
    """NVRTC refused the CUDA C++ source; `.diagnostics` has every error with its file, line and column."""


class CudaKernel(Kernel):
    """A kernel of CUDA C++ source: launched like any `Kernel`, named by its C++ name."""

    def __init__(self, module: ir.Module, function: ir.Function, cpp_name: str, cpp_signature: str,
                 pointee: Any = None) -> None:
        super().__init__(module, function, pointee)
        self.cpp_name = cpp_name  # scale<float>
        self.cpp_signature = cpp_signature  # scale<float>(float*, float, int)

    @property
    def name(self) -> str:
        return self.cpp_name

    @property
    def mangled_name(self) -> str:
        return self.function.name

    def __repr__(self) -> str:
        return f"CudaKernel({self.cpp_signature})"


class CudaModule:
    """What `compile_cuda` returns: the PTX (`.ptx`, `.ir`), NVRTC's log (`.log`: warnings), the kernels."""

    def __init__(self, module: ir.Module, ptx: str, arch: str, log: str, lowered: Mapping[str, str],
                 signatures: Mapping[str, tuple[str, str, tuple[CppType, ...] | None]]) -> None:
        self.ir = module
        self.ptx = ptx
        self.arch = arch
        self.log = log
        self.lowered = dict(lowered)  # name expression -> mangled name
        self._signatures = dict(signatures)  # PTX name -> (C++ name, C++ signature, parameter types or None)

    def __repr__(self) -> str:
        return f"<CudaModule {self.ir.filename} for {self.arch}: {', '.join(self.kernel_names) or 'no kernels'}>"

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """The C++ signatures of the kernels, in PTX order."""
        return tuple(self._signatures[f.name][1] for f in self.ir.kernels)

    @property
    def kernels(self) -> tuple[ir.Function, ...]:
        return self.ir.kernels

    def to_ptx(self) -> str:
        return self.ptx

    def kernel(self, name: str) -> CudaKernel:
        """The kernel `name`: a name expression given at compile time, a demangled name with or without its
        parameter list (`scale<float>`, `scale<float>(float*, float, int)`), or the PTX (mangled) name."""
        ptx_name = self._resolve(name)
        cpp_name, cpp_sig, params = self._signatures[ptx_name]
        return CudaKernel(self.ir, self.ir.function(ptx_name), cpp_name, cpp_sig, _pointees(params))

    get_function = kernel  # CuPy's RawModule spelling
    get_kernel = kernel  # cuda.core's ObjectCode spelling

    def _resolve(self, name: str) -> str:
        if name in self.lowered:
            return self.lowered[name]
        names = [f.name for f in self.ir.kernels]
        if name in names:
            return name
        bare = name.replace(" ", "")
        for field in (1, 0):
            hits = [n for n in names if str(self._signatures[n][field]).replace(" ", "") == bare]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise KeyError(f"{name!r} names {len(hits)} kernels of {self.ir.filename}: "
                               + ", ".join(self._signatures[n][1] for n in hits) + "; give the parameter list")
        raise KeyError(f"no kernel {name!r} in {self.ir.filename}; it has: "
                       + (", ".join(self.kernel_names) or "no kernels")
                       + ("" if "<" not in name else
                          f" (a template is compiled only where instantiated: pass name_expressions=({name!r},))"))


def compile_cuda(source: str, arch: str = "sm_90a", options: Iterable[str] = (),
                 name_expressions: Iterable[str] = (), headers: Mapping[str, str] | None = None, *,
                 filename: str = "kernel.cu", nvrtc_library: str | os.PathLike | None = None) -> CudaModule:
    """Compile CUDA C++ `source` to PTX for `arch` with NVRTC (no driver or GPU needed) and parse it.

    `options` go to NVRTC after ptxforge's own (`--gpu-architecture`, `-lineinfo`, so reports name .cu
    lines); `name_expressions` instantiate templates and let `kernel()` find them by that spelling;
    `headers` maps include names to their text; `filename` names the source in messages and reports."""
    compute = _compute_arch(arch)
    options, names, headers = list(options), list(name_expressions), dict(headers or {})
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in options):
        options.insert(0, f"--gpu-architecture={compute}")
    if not any(o in ("-lineinfo", "--generate-line-info", "-G", "--device-debug") for o in options):
        options.append("-lineinfo")
    library = nvrtc.find_nvrtc(nvrtc_library)
    # the absolute path: NVRTC writes it into the PTX's .file, which reports show
    key = cache.key("nvrtc", source, os.path.abspath(filename), "\0".join(options), "\0".join(names),
                    "\0".join(f"{k}\0{v}" for k, v in sorted(headers.items())), _library_identity(str(library)))
    cacheable = _self_contained(source, headers)
    hit = cache.get_json("nvrtc", key) if cacheable else None
    if not (isinstance(hit, dict) and {"ptx", "log", "lowered", "probes"} <= hit.keys()):
        hit = _compile(source, filename, options, names, headers, library)
        if cacheable:
            cache.put_json("nvrtc", key, hit)
    stem = Path(filename).name.rsplit(".", 1)[0] or "kernel"
    module = parse(hit["ptx"], filename=f"{stem}.{arch}.ptx")
    return CudaModule(module, hit["ptx"], arch, hit["log"], hit["lowered"],
                      _signatures(module, hit["probes"]))


def compile_cuda_file(path: str | os.PathLike, arch: str = "sm_90a", options: Iterable[str] = (),
                      name_expressions: Iterable[str] = (), headers: Mapping[str, str] | None = None, *,
                      nvrtc_library: str | os.PathLike | None = None) -> CudaModule:
    """`compile_cuda` of a .cu file; its folder is on the include path (`#include "common.cuh"`)."""
    p = Path(path)
    try:
        source = p.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read it: {e.strerror or e}") from None
    include = f"--include-path={p.resolve().parent}"
    return compile_cuda(source, arch, [*options, include], name_expressions, headers, filename=str(path),
                        nvrtc_library=nvrtc_library)


def _compute_arch(arch: str) -> str:
    m = _ARCH.match(arch)
    if m is None:
        raise ValueError(f"arch {arch!r}: expected a target such as sm_80, sm_90a or sm_100a")
    return f"compute_{m.group(1)}{m.group(2)}"


def _self_contained(source: str, headers: Mapping[str, str]) -> bool:
    """Whether the cache key covers every input: no `#include "..."` of a file outside `headers` (a header on
    disk could change under the same key). Angle-bracket includes come with NVRTC (part of the key)."""
    return all(name in headers for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', source, re.M))


@functools.lru_cache(maxsize=8)
def _library_identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{nvrtc.version(path)}"


def _compile(source: str, filename: str, options: list[str], names: list[str], headers: dict[str, str],
             library: Path) -> dict[str, Any]:
    out = nvrtc.compile_program(source, filename, options, names, headers, library)
    if not out.ok:
        raise CudaCompileError(_diagnostics(out.log, filename, source, headers))
    unmangled = [n for n in re.findall(r"^\s*\.(?:visible|weak)?\s*\.entry\s+([\w$]+)", out.ptx, re.M)
                 if not n.startswith("_Z")]
    return {"ptx": out.ptx, "log": out.log, "lowered": out.lowered,
            "probes": _probe_signatures(source, filename, options, headers, unmangled, library)}


def _probe_signatures(source: str, filename: str, options: list[str], headers: dict[str, str],
                      kernels: list[str], library: Path) -> dict[str, str]:
    """extern "C" kernels' names carry no types: compile once more with a template instantiated on each
    kernel's type (`decltype`) and read the types from its mangled name. {} if that does not compile (an
    extern "C" kernel inside a namespace): those kernels then take arrays of any type."""
    if not kernels:
        return {}
    probe = source + f"\ntemplate <typename T> __global__ void {_SIGNATURE_PROBE}() {{}}\n"
    exprs = {k: f"{_SIGNATURE_PROBE}<decltype({k})>" for k in kernels}
    out = nvrtc.compile_program(probe, filename, options, list(exprs.values()), headers, library)
    return {k: out.lowered[e] for k, e in exprs.items()} if out.ok else {}


def _signatures(module: ir.Module, probes: Mapping[str, str]) -> dict[str, tuple[str, str, Any]]:
    out: dict[str, tuple[str, str, Any]] = {}
    for f in module.kernels:
        try:
            if f.name in probes:
                ftype = template_arguments(probes[f.name])[0]
                params: tuple[CppType, ...] | None = ftype.params
                out[f.name] = (f.name, f"{f.name}({', '.join(map(str, ftype.params))})", params)
                continue
            sig = signature(f.name)
            out[f.name] = (sig.name, str(sig), sig.params)
        except (DemangleError, IndexError):
            out[f.name] = (f.name, f.name, None)
    return out


def _pointees(params: tuple[CppType, ...] | None) -> list[PointeeType | None] | None:
    if params is None:
        return None
    out: list[PointeeType | None] = []
    for t in params:
        inner = t.pointee()
        if inner is None:
            out.append(None)
            continue
        label = f"{t} in the C++ signature"
        dtype = ELEMENT_DTYPES.get(inner.name) if inner.kind in ("builtin", "class") else None
        out.append(PointeeType(label, dtype, None, _HINT))
    return out


def _diagnostics(log: str, filename: str, source: str, headers: Mapping[str, str]) -> list[Diagnostic]:
    """NVRTC's log as diagnostics: `FILE(LINE): error: MSG`, then the source line and a caret line."""
    lines = log.splitlines()
    found = []
    for i, text in enumerate(lines):
        m = _LOG_LINE.match(text)
        if m is None or m.group("sev") not in ("error", "catastrophic error"):
            continue
        file, line = m.group("file"), int(m.group("line"))
        col = 0
        caret = lines[i + 2] if i + 2 < len(lines) else ""
        if caret.strip() == "^":
            col = len(caret) - len(caret.lstrip()) - 2  # NVRTC indents the quoted line by two spaces
        text_of = source if file == filename else headers.get(file)
        src_line = ""
        if text_of is not None and 0 < line <= len(text_of.splitlines()):
            src_line = text_of.splitlines()[line - 1]
        elif i + 1 < len(lines):
            src_line = lines[i + 1][2:]
        found.append(Diagnostic(file, line, max(col, 0) + 1, m.group("msg"), "error", src_line))
    if not found:
        found.append(Diagnostic(filename, 0, 0, log.strip() or "NVRTC failed without a message"))
    return found
