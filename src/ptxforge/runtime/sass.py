"""SASS (the GPU's machine code) for PTX: ptxas builds a cubin, `cuobjdump -sass` disassembles it.

cuobjdump calls nvdisasm, which comes from the CUDA toolkit or the nvidia-cuda-nvdisasm wheel; it is found
through $NVDISASM_PATH (a folder) or the same search as the other tools (toolchain.find_tool).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ptxforge import environment
from ptxforge.errors import Error
from ptxforge.runtime.resources import _ptx_text, ptxas_failure, target_arch
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

_FUNCTION = re.compile(r"^\s*Function : (?P<name>\S+)\s*$")
_END = re.compile(r"^\s*\.{10}\s*$")
_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$")


class DisassemblyError(Error, RuntimeError):
    """cuobjdump could not disassemble the cubin; the message carries its output."""


def nvdisasm_dir() -> Path:
    """Folder holding nvdisasm (cuobjdump needs it); ToolNotFound says how to install it."""
    try:
        env = environment.nvdisasm_path()
    except environment.EnvironmentVariableError as e:
        raise ToolNotFound(str(e)) from None
    if env is not None and (env / "nvdisasm").is_file():
        return env
    try:
        return find_tool("nvdisasm").parent
    except ToolNotFound as e:
        raise ToolNotFound(f"{e} cuobjdump -sass needs nvdisasm: pip install nvidia-cuda-nvdisasm, "
                           "or set NVDISASM_PATH to the folder that holds it.") from None


def disassemble(cubin: bytes, timeout: float = 120) -> str:
    """The raw `cuobjdump -sass` listing of a cubin."""
    tool = find_tool("cuobjdump")
    env = {**os.environ, "NVDISASM_PATH": str(nvdisasm_dir())}
    with tempfile.TemporaryDirectory(prefix="ptxforge-sass-") as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True,
                              timeout=timeout, env=env)
    if proc.returncode != 0:
        raise DisassemblyError(f"cuobjdump -sass failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def split_functions(listing: str, encodings: bool = False) -> dict[str, str]:
    """Function name -> its SASS lines from a cuobjdump listing; without `encodings`, the hex
    `/* 0x... */` instruction words are dropped so that each line is one instruction."""
    out: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group("name"), [])
            continue
        if current is None:
            continue
        if _END.match(line):
            current = None
            continue
        if not encodings:
            if line.strip().startswith("/* 0x"):
                continue
            line = _ENCODING.sub("", line)
        if line.strip():
            current.append(line.rstrip())
    return {name: "\n".join(lines) + "\n" for name, lines in out.items()}


def sass_functions(ptx: Any, arch: str | None = None, encodings: bool = False,
                   filename: str | None = None) -> dict[str, str]:
    """Function name -> SASS text for PTX text (or a Module) assembled by ptxas for `arch`
    (default: its .target). Raises PtxasError when ptxas rejects the PTX."""
    text, name = _ptx_text(ptx)
    arch = arch or target_arch(text)
    result = assemble(text, arch)
    if not result.ok:
        raise ptxas_failure(result, text, filename or name)
    return split_functions(disassemble(result.cubin), encodings)


def sass(ptx: Any, arch: str | None = None, kernel: str | None = None, encodings: bool = False,
         filename: str | None = None) -> str:
    """SASS of every function (each under a `// NAME` header), or of `kernel` alone."""
    funcs = sass_functions(ptx, arch, encodings, filename)
    if kernel is not None:
        if kernel not in funcs:
            raise KeyError(f"no function {kernel!r} in the cubin; it has: {', '.join(funcs)}")
        return funcs[kernel]
    return "".join(f"// {name}\n{body}\n" for name, body in funcs.items())
