"""Test helpers: assemble with ptxas and compare cubins (ELF sections) and SASS."""

from __future__ import annotations

import subprocess

from ptxforge.toolchain import ToolNotFound, assemble, elf_sections, find_tool  # noqa: F401


def have(tool: str) -> bool:
    try:
        find_tool(tool)
        return True
    except ToolNotFound:
        return False


def sass(cubin: bytes, tmp_path) -> str:
    path = tmp_path / "x.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(find_tool("cuobjdump")), "-sass", str(path)], capture_output=True, text=True)
    return out.stdout


def assemble_ok(text: str, arch: str) -> bytes:
    res = assemble(text, arch)
    assert res.ok, res.stderr
    return res.cubin
