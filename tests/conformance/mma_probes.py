"""Tensor-core probes for recording a GPU's results: mma.sync on raw register contents, and wgmma through the
corpus kernels. Inputs come from fixed seeds, so a recorded D can be checked later without the GPU.

The mma.sync probes load each lane's A, B and C registers from arrays (lane-major: thread t's register j is
element t * count + j), run one instruction and store D the same way, so they need no knowledge of the
fragment layouts: the emulator maps registers to matrices itself.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import ptxforge as pf

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"mma/{name}".encode()))


def _floats(rng, n: int, dtype, spread: int) -> np.ndarray:
    """n values of `dtype`: normal samples scaled by 2**k, k uniform in [-spread, spread]."""
    x = rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread + 1, n))
    return x.astype(dtype)


def _pack(values: np.ndarray, per_word: int) -> np.ndarray:
    """Little-endian packing of `per_word` narrow values into each uint32."""
    return np.ascontiguousarray(values).view(np.uint8).view(np.uint32) if per_word else values


def _words(rng, kind: str, n: int, spread: int) -> np.ndarray:
    """n uint32 register words of one operand kind."""
    if kind == "f16x2":
        return _pack(_floats(rng, 2 * n, np.float16, spread), 2)
    if kind == "bf16x2":
        return _pack(_floats(rng, 2 * n, ml_dtypes.bfloat16, spread), 2)
    if kind in ("e4m3x4", "e5m2x4"):
        v = _floats(rng, 4 * n, E4M3 if kind == "e4m3x4" else E5M2, min(spread, 6))
        return _pack(v, 4)
    if kind in ("f32", "tf32"):
        return _floats(rng, n, np.float32, spread).view(np.uint32)
    if kind == "s8x4":
        return rng.integers(0, 2**32, n, dtype=np.uint32)
    if kind == "s32":
        return rng.integers(-(2**24), 2**24, n).astype(np.int32).view(np.uint32)
    raise ValueError(kind)


@dataclass(frozen=True)
class MmaProbe:
    """One mma.sync form: `ptx` is the instruction with {d} {a} {b} {c} register lists."""

    name: str
    ptx: str
    na: int
    nb: int
    nc: int
    nd: int
    kinds: tuple[str, str, str]  # A, B, C word kinds
    spread: int = 8
    arch: str = "sm_90a"
    warps: int = 64

    @property
    def d_words(self) -> int:
        return self.warps * 32 * self.nd

    def inputs(self, seed: str = "") -> list[np.ndarray]:
        """The recorded inputs; another `seed` draws fresh ones (to check a fitted model on new data)."""
        rng = _rng(self.name + seed)
        t = self.warps * 32
        return [_words(rng, k, t * n, self.spread) for k, n in zip(self.kinds, (self.na, self.nb, self.nc),
                                                                     strict=True)]

    def source(self) -> str:
        lines = [f".version 8.7\n.target {self.arch}\n.address_size 64\n",
                 ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)\n{",
                 "\t.reg .b32 %t, %w, %n;\n\t.reg .b64 %p, %off;"]
        regs = {}
        for key, count in (("a", self.na), ("b", self.nb), ("c", self.nc), ("d", self.nd)):
            names = [f"%{key}{j}" for j in range(count)]
            regs[key] = "{" + ", ".join(names) + "}"
            lines.append(f"\t.reg .b32 {', '.join(names)};")
        lines += ["\tmov.u32 %t, %tid.x;", "\tmov.u32 %w, %ctaid.x;", "\tmad.lo.u32 %t, %w, 32, %t;"]
        for key, count in (("a", self.na), ("b", self.nb), ("c", self.nc)):
            lines += [f"\tld.param.u64 %p, [p{key}];", f"\tmul.wide.u32 %off, %t, {4 * count};",
                      "\tadd.s64 %p, %p, %off;"]
            lines += [f"\tld.global.b32 %{key}{j}, [%p+{4 * j}];" for j in range(count)]
        lines.append("\t" + self.ptx.format(**regs) + ";")
        lines += ["\tld.param.u64 %p, [pd];", f"\tmul.wide.u32 %off, %t, {4 * self.nd};", "\tadd.s64 %p, %p, %off;"]
        lines += [f"\tst.global.b32 [%p+{4 * j}], %d{j};" for j in range(self.nd)]
        lines += ["\tret;", "}", ""]
        return "\n".join(lines)

    def kernel(self):
        return pf.parse(self.source(), filename=f"{self.name}.ptx").kernel("k")

    def run(self, device: str, seed: str = "") -> tuple[list[np.ndarray], np.ndarray]:
        """(register inputs, D words) of one run on `device`."""
        regs = self.inputs(seed)
        d = np.full(self.d_words, 0xA5A5A5A5, np.uint32)
        self.kernel().launch(grid=(self.warps,), block=(32,), args=[*regs, d], device=device)
        return regs, d


def _mma(name, shape, types, na, nb, nc, nd, kinds, **kw) -> MmaProbe:
    return MmaProbe(name, f"mma.sync.aligned.{shape}.row.col.{types} {{d}}, {{a}}, {{b}}, {{c}}", na, nb, nc, nd,
                    kinds, **kw)


PROBES = [
    _mma("f16_f32", "m16n8k16", "f32.f16.f16.f32", 4, 2, 4, 4, ("f16x2", "f16x2", "f32")),
    _mma("f16_f32_wide", "m16n8k16", "f32.f16.f16.f32", 4, 2, 4, 4, ("f16x2", "f16x2", "f32"), spread=14),
    _mma("f16_f32_k8", "m16n8k8", "f32.f16.f16.f32", 2, 1, 4, 4, ("f16x2", "f16x2", "f32")),
    _mma("bf16_f32", "m16n8k16", "f32.bf16.bf16.f32", 4, 2, 4, 4, ("bf16x2", "bf16x2", "f32"), spread=20),
    _mma("tf32_f32", "m16n8k8", "f32.tf32.tf32.f32", 4, 2, 4, 4, ("tf32", "tf32", "f32")),
    _mma("e4m3_f32", "m16n8k32", "f32.e4m3.e4m3.f32", 4, 2, 4, 4, ("e4m3x4", "e4m3x4", "f32")),
    _mma("e5m2_e4m3_f32", "m16n8k32", "f32.e5m2.e4m3.f32", 4, 2, 4, 4, ("e5m2x4", "e4m3x4", "f32")),
    _mma("f16_f16", "m16n8k16", "f16.f16.f16.f16", 4, 2, 2, 2, ("f16x2", "f16x2", "f16x2"), spread=4),
    _mma("s8_s32", "m16n8k32", "s32.s8.s8.s32", 4, 2, 4, 4, ("s8x4", "s8x4", "s32")),
]


@dataclass(frozen=True)
class WgmmaProbe:
    """A wgmma corpus kernel run `repeats` times (grid 1, 128 threads) on seeded inputs; D is argument `out`."""

    name: str
    module: str
    kernel_name: str
    shapes: tuple  # (dtype, shape) per array argument, in order; None marks the output
    out: int
    c_flag: bool = False  # a trailing int32 use_c argument (1)
    spread: int = 6
    repeats: int = 8
    structured: bool = False  # fp8 inputs built to expose the summation (see _fp8_structured)

    def inputs(self, repeat: int) -> list:
        rng = _rng(f"{self.name}/{repeat}")
        if self.structured:
            return _fp8_structured(rng, self.shapes)
        args = []
        for dtype, shape in self.shapes:
            n = int(np.prod(shape))
            args.append(np.zeros(shape, dtype) if len(args) == self.out else
                        _floats(rng, n, dtype, self.spread if np.dtype(dtype).itemsize > 1 else 4).reshape(shape))
        return [*args, np.int32(1)] if self.c_flag else args

    def kernel(self):
        from emu_corpus import corpus_module  # tests/emu on sys.path

        return corpus_module(self.module, "sm_90a.O3").kernel(self.kernel_name)

    def run(self, device: str, repeats=None) -> tuple[list[np.ndarray], np.ndarray]:
        """(every input array, the D of each repeat stacked) of the runs `repeats` (default: the recorded
        0 .. self.repeats - 1) on `device`, one launch of grid 1 x 128 threads each."""
        k, ins, outs = self.kernel(), [], []
        for r in range(self.repeats) if repeats is None else repeats:
            args = self.inputs(r)
            k.launch(grid=(1,), block=(128,), args=args, device=device)
            outs.append(args[self.out])
            ins += [a for i, a in enumerate(args) if i != self.out and isinstance(a, np.ndarray)]
        return ins, np.stack(outs)


def _fp8_structured(rng, shapes) -> list:
    """Inputs of an fp8 wgmma (A [64, 32], Bt [n, 32], C [64, n], D, use_c) where each row of A has 1-4
    nonzero entries with exponents far apart and B is 1 (odd columns 1.5, whose products with 1.5 need two
    integer bits), so each result is a short sum whose truncation and alignment can be read off."""
    (ta, sa), (tb, sb), (tc, sc), (td, sd) = shapes
    A = np.zeros(sa)
    for i in range(sa[0]):
        ks = rng.choice(sa[1], rng.integers(1, 5), replace=False)
        base = rng.integers(-2, 4)
        for j, k in enumerate(ks):
            mant = rng.choice([1.0, 1.125, 1.25, 1.5, 1.75, 1.875])
            A[i, k] = rng.choice([-1, 1]) * mant * 2.0 ** (base - (0 if j == 0 else rng.integers(1, 18)))
    Bt = np.ones(sb)
    Bt[1::2] = 1.5
    C = rng.choice([0.0, 1.0], sc) * rng.choice([-1, 1], sc) * np.exp2(rng.integers(-20, 6, sc)) \
        * rng.choice([1.0, 1.25, 1.5, 1.75], sc)
    return [A.astype(ta), Bt.astype(tb), C.astype(tc), np.zeros(sd, td), np.int32(1)]


F16, BF16, F32 = np.float16, ml_dtypes.bfloat16, np.float32
WGMMA = [
    WgmmaProbe("wgmma_f16_f32", "wgmma_sm90a", "wgmma_m64n8k16_f16", ((F16, (64, 16)), (F16, (8, 16)), (F32, (64, 8))),
               2),
    WgmmaProbe("wgmma_bf16_f32_k32", "wgmma_sm90a", "wgmma_m64n16k16_bf16_k32",
               ((BF16, (64, 32)), (BF16, (16, 32)), (F32, (64, 16))), 2, spread=12),
    WgmmaProbe("wgmma_tf32", "wgmma_variants_sm90a", "wgmma_tf32_m64n16k8",
               ((F32, (64, 8)), (F32, (16, 8)), (F32, (64, 16)), (F32, (64, 16))), 3, c_flag=True),
    WgmmaProbe("wgmma_e4m3_e5m2", "wgmma_variants_sm90a", "wgmma_e4m3_e5m2_m64n16k32_rs",
               ((E4M3, (64, 32)), (E5M2, (16, 32)), (F32, (64, 16)), (F32, (64, 16))), 3, c_flag=True),
    WgmmaProbe("wgmma_e4m3_e5m2_structured", "wgmma_variants_sm90a", "wgmma_e4m3_e5m2_m64n16k32_rs",
               ((E4M3, (64, 32)), (E5M2, (16, 32)), (F32, (64, 16)), (F32, (64, 16))), 3, c_flag=True,
               structured=True, repeats=16),
    WgmmaProbe("wgmma_f16acc_e4m3", "wgmma_variants_sm90a", "wgmma_f16acc_e4m3_m64n16k32",
               ((E4M3, (64, 32)), (E4M3, (16, 32)), (F16, (64, 16)), (F16, (64, 16))), 3, c_flag=True, spread=2),
    WgmmaProbe("wgmma_f16acc_f16", "wgmma_variants_sm90a", "wgmma_f16acc_m64n16k16",
               ((F16, (64, 16)), (F16, (16, 16)), (F16, (64, 16)), (F16, (64, 16))), 3, c_flag=True, spread=2),
]
