"""Rows of several tensors packed side by side into one uint8 row, so one all_to_all moves them all.

A `RowFormat` lists fields (name, dtype, elements per row, kind); kind is "payload", "scales" or "meta", which
is how `Buffer.stats()` splits the bytes. Packing is a byte copy, so every field arrives bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Field:
    name: str
    dtype: torch.dtype
    width: int  # elements per row
    kind: str

    @property
    def nbytes(self) -> int:
        return self.width * torch.empty(0, dtype=self.dtype).element_size()


class RowFormat:
    def __init__(self, fields: list[Field]):
        self.fields = [f for f in fields if f.width > 0]
        self.offsets, off = {}, 0
        for f in self.fields:
            self.offsets[f.name] = off
            off += f.nbytes
        self.row_bytes = off

    def bytes_of(self, kind: str) -> int:
        return sum(f.nbytes for f in self.fields if f.kind == kind)

    def pack(self, tensors: dict[str, torch.Tensor], rows: int, device: torch.device | str) -> torch.Tensor:
        out = torch.empty((rows, self.row_bytes), dtype=torch.uint8, device=device)
        for f in self.fields:
            t = tensors[f.name].reshape(rows, f.width).contiguous()
            out[:, self.offsets[f.name]:self.offsets[f.name] + f.nbytes] = t.view(torch.uint8).reshape(rows, f.nbytes)
        return out

    def unpack(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        n = rows.shape[0]
        out = {}
        for f in self.fields:
            raw = rows[:, self.offsets[f.name]:self.offsets[f.name] + f.nbytes].contiguous()
            out[f.name] = raw.view(f.dtype).reshape(n, f.width)
        return out
