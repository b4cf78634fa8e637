"""Test helpers: assemble with ptxas and compare cubins (ELF sections) and SASS."""

from __future__ import annotations

import struct
import subprocess

from ptxforge.toolchain import ToolNotFound, assemble, find_tool


def have(tool: str) -> bool:
    try:
        find_tool(tool)
        return True
    except ToolNotFound:
        return False


def elf_sections(blob: bytes) -> dict[str, bytes]:
    """Section name -> contents of an ELF64 little-endian file (what ptxas writes)."""
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names_at = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = blob[names_at + h[0]:blob.index(b"\0", names_at + h[0])].decode()
        out[name] = b"" if h[1] == 8 else blob[h[4]:h[4] + h[5]]  # SHT_NOBITS has no bytes
    return out


def sass(cubin: bytes, tmp_path) -> str:
    path = tmp_path / "x.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(find_tool("cuobjdump")), "-sass", str(path)], capture_output=True, text=True)
    return out.stdout


def assemble_ok(text: str, arch: str) -> bytes:
    res = assemble(text, arch)
    assert res.ok, res.stderr
    return res.cubin
