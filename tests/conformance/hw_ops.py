"""One-instruction kernels for checking the emulator's semantics against a GPU, bit for bit.

Each case is a PTX instruction applied elementwise: thread i loads its operands from in0..in2[i], runs the
instruction and stores the result to out[i]. `EXACT` cases are fully specified by the PTX ISA (IEEE rounding,
conversions, integer ops): the emulator must give the GPU's bits. `APPROX` cases have only an error bound in
the manual: both devices must meet it; the share of identical bits is reported.
Used by tests/gpu/test_semantics_on_gpu.py (emulator against the GPU) and tests/emu/test_hw_op_kernels.py
(the same kernels validated, assembled and run on the emulator, so the GPU run cannot fail on a typo).
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

REFERENCE_N = 1024  # inputs per case in the recorded GPU results (tests/data/hw_reference.npz)


def case_rng(name: str) -> np.random.Generator:
    """The generator of a case's recorded inputs: seeded by the case name, so a recording can be replayed."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def warp_inputs(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two uint32 input arrays of a warp case."""
    rng = case_rng(f"warp/{name}")
    return rng.integers(0, 2**32, n, dtype=np.uint32), rng.integers(0, 2**32, n, dtype=np.uint32)

# register class, numpy storage type and load/store width for each PTX operand type
_TYPES = {
    "f32": ("f", np.float32, "b32"), "f64": ("fd", np.float64, "b64"), "u32": ("r", np.uint32, "b32"),
    "s32": ("r", np.int32, "b32"), "b32": ("r", np.uint32, "b32"), "u64": ("rd", np.uint64, "b64"),
    "s64": ("rd", np.int64, "b64"), "b16": ("h", np.uint16, "b16"),
}
_DECL = {"f": ".f32", "fd": ".f64", "r": ".b32", "rd": ".b64", "h": ".b16"}


@dataclass(frozen=True)
class Case:
    """`text` is the instruction with {d} for the destination and {a} {b} {c} for the operands."""

    name: str
    text: str
    ins: tuple[str, ...]  # operand types
    out: str
    bound: tuple[str, float] | None = None  # APPROX only: ("rel" | "abs" | "absrel" | "ulp", bound)
    # operands: "bits" (any pattern); for the last operand "nonzero" (divisors) or "small" (shift counts
    # 0..40); for float operands "angle" (|x| <= pi), "unit" (normal around 0, sd 8) or "positive"
    inputs: str = "bits"

    def ptx(self, arch: str = "sm_90a") -> str:
        regs = {"a": "%x0", "b": "%x1", "c": "%x2"}
        cls_in = [_TYPES[t][0] for t in self.ins]
        cls_out = _TYPES[self.out][0]
        lines = [f".version 8.0\n.target {arch}\n.address_size 64\n",
                 ".visible .entry k(.param .u64 in0, .param .u64 in1, .param .u64 in2, .param .u64 out, "
                 ".param .u32 n)\n{",
                 "\t.reg .pred %p;\n\t.reg .b32 %i, %n, %t;\n\t.reg .b64 %ptr, %off, %addr;"]
        for j, c in enumerate(cls_in):
            lines.append(f"\t.reg {_DECL[c]} %x{j};")
        lines.append(f"\t.reg {_DECL[cls_out]} %y;")
        lines += ["\tmov.u32 %i, %ctaid.x;", "\tmov.u32 %n, %ntid.x;", "\tmov.u32 %t, %tid.x;",
                  "\tmad.lo.u32 %i, %i, %n, %t;",
                  "\tld.param.u32 %n, [n];", "\tsetp.ge.u32 %p, %i, %n;", "\t@%p bra DONE;"]
        for j, t in enumerate(self.ins):
            width = np.dtype(_TYPES[t][1]).itemsize
            lines += [f"\tld.param.u64 %ptr, [in{j}];", f"\tmul.wide.u32 %off, %i, {width};",
                      "\tadd.s64 %addr, %ptr, %off;", f"\tld.global.{_TYPES[t][2]} %x{j}, [%addr];"]
        lines.append("\t" + self.text.format(d="%y", **regs) + ";")
        width = np.dtype(_TYPES[self.out][1]).itemsize
        lines += ["\tld.param.u64 %ptr, [out];", f"\tmul.wide.u32 %off, %i, {width};", "\tadd.s64 %addr, %ptr, %off;",
                  f"\tst.global.{_TYPES[self.out][2]} [%addr], %y;", "DONE:", "\tret;", "}", ""]
        return "\n".join(lines)

    def make_inputs(self, n: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Operands: random bit patterns with the format's special values mixed in."""
        out = []
        for j, t in enumerate(self.ins):
            last = j == len(self.ins) - 1
            dt = np.dtype(_TYPES[t][1])
            bits = np.dtype(f"u{dt.itemsize}")
            raw = rng.integers(0, np.iinfo(bits).max, n, dtype=bits, endpoint=True)
            if dt.kind == "f":
                special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40,
                                    3.4e38, 1e-45, 448.0, 449.0, 57344.0, 65504.0, 65520.0, 1.5, 2.5, -2.5],
                                   dtype=dt).view(bits)
                raw[: len(special)] = special
                values = raw.view(dt)
                if self.inputs == "angle":  # sin/cos: the manual's bound is for -pi..pi (an H200 exceeds it at 100 pi)
                    values = (rng.random(n) * 2 * np.pi - np.pi).astype(dt)
                    values[: 4] = [0.0, -0.0, np.pi, -np.pi]
                elif self.inputs == "unit":  # functions whose bound the manual gives on a range
                    values = (rng.standard_normal(n) * 8).astype(dt)
                elif self.inputs == "positive":  # logarithms and roots: 2**-40 .. 2**40
                    values = np.exp2(rng.uniform(-40, 40, n)).astype(dt)
                out.append(values)
                continue
            values = raw.view(dt)
            if self.inputs == "nonzero" and last:
                values = np.where(values == 0, 1, values).astype(dt)
                if dt.kind == "i":
                    values[:3] = [-1, np.iinfo(dt).min, 7]
            elif self.inputs == "small" and last:
                values = (raw % 41).astype(dt)
            out.append(values)
        return out


def _case(name, text, ins, out, **kw):
    return Case(name, text, tuple(ins.split()), out, **kw)


F1, F2, F3 = "f32", "f32 f32", "f32 f32 f32"
D2 = "f64 f64"
EXACT = [
    _case("add.rn.f32", "add.rn.f32 {d}, {a}, {b}", F2, "f32"),
    _case("add.rz.ftz.f32", "add.rz.ftz.f32 {d}, {a}, {b}", F2, "f32"),
    _case("sub.rm.f32", "sub.rm.f32 {d}, {a}, {b}", F2, "f32"),
    _case("mul.rp.f32", "mul.rp.f32 {d}, {a}, {b}", F2, "f32"),
    _case("mul.rn.sat.f32", "mul.rn.sat.f32 {d}, {a}, {b}", F2, "f32"),
    _case("fma.rn.f32", "fma.rn.f32 {d}, {a}, {b}, {c}", F3, "f32"),
    _case("fma.rz.ftz.f32", "fma.rz.ftz.f32 {d}, {a}, {b}, {c}", F3, "f32"),
    _case("div.rn.f32", "div.rn.f32 {d}, {a}, {b}", F2, "f32"),
    _case("div.rz.ftz.f32", "div.rz.ftz.f32 {d}, {a}, {b}", F2, "f32"),
    _case("sqrt.rn.f32", "sqrt.rn.f32 {d}, {a}", F1, "f32"),
    _case("rcp.rn.f32", "rcp.rn.f32 {d}, {a}", F1, "f32"),
    _case("min.f32", "min.f32 {d}, {a}, {b}", F2, "f32"),
    _case("max.NaN.f32", "max.NaN.f32 {d}, {a}, {b}", F2, "f32"),
    _case("abs.ftz.f32", "abs.ftz.f32 {d}, {a}", F1, "f32"),
    _case("copysign.f32", "copysign.f32 {d}, {a}, {b}", F2, "f32"),
    _case("add.rn.f64", "add.rn.f64 {d}, {a}, {b}", D2, "f64"),
    _case("fma.rn.f64", "fma.rn.f64 {d}, {a}, {b}, {c}", "f64 f64 f64", "f64"),
    _case("div.rn.f64", "div.rn.f64 {d}, {a}, {b}", D2, "f64"),
    _case("sqrt.rn.f64", "sqrt.rn.f64 {d}, {a}", "f64", "f64"),
    _case("cvt.rn.f32.f64", "cvt.rn.f32.f64 {d}, {a}", "f64", "f32"),
    _case("cvt.rni.s32.f32", "cvt.rni.s32.f32 {d}, {a}", F1, "s32"),
    _case("cvt.rzi.u32.f32", "cvt.rzi.u32.f32 {d}, {a}", F1, "u32"),
    _case("cvt.rn.f32.s32", "cvt.rn.f32.s32 {d}, {a}", "s32", "f32"),
    _case("cvt.rm.f32.u64", "cvt.rm.f32.u64 {d}, {a}", "u64", "f32"),
    _case("cvt.rn.f16.f32", "cvt.rn.f16.f32 {d}, {a}", F1, "b16"),
    _case("cvt.rn.bf16.f32", "cvt.rn.bf16.f32 {d}, {a}", F1, "b16"),
    _case("cvt.f32.f16", "cvt.f32.f16 {d}, {a}", "b16", "f32"),
    _case("cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e4m3x2.f32 {d}, {a}, {b}", F2, "b16"),
    _case("cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.satfinite.e5m2x2.f32 {d}, {a}, {b}", F2, "b16"),
    _case("cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e4m3x2 {d}, {a}", "b16", "b32"),
    _case("add.rn.f16x2", "add.rn.f16x2 {d}, {a}, {b}", "b32 b32", "b32"),
    _case("fma.rn.bf16x2", "fma.rn.bf16x2 {d}, {a}, {b}, {c}", "b32 b32 b32", "b32"),
    _case("min.NaN.f16x2", "min.NaN.f16x2 {d}, {a}, {b}", "b32 b32", "b32"),
    _case("mul.hi.s32", "mul.hi.s32 {d}, {a}, {b}", "s32 s32", "s32"),
    _case("mul.wide.u32", "mul.wide.u32 {d}, {a}, {b}", "u32 u32", "u64"),
    _case("div.s32", "div.s32 {d}, {a}, {b}", "s32 s32", "s32", inputs="nonzero"),
    _case("rem.u64", "rem.u64 {d}, {a}, {b}", "u64 u64", "u64", inputs="nonzero"),
    _case("bfe.s32", "bfe.s32 {d}, {a}, {b}, {c}", "s32 u32 u32", "s32"),
    _case("bfi.b32", "bfi.b32 {d}, {a}, {b}, {c}, 5", "b32 b32 u32", "b32"),
    _case("prmt.b32", "prmt.b32 {d}, {a}, {b}, {c}", "b32 b32 b32", "b32"),
    _case("shf.l.wrap.b32", "shf.l.wrap.b32 {d}, {a}, {b}, {c}", "b32 b32 u32", "b32"),
    _case("shr.s32", "shr.s32 {d}, {a}, {b}", "s32 u32", "s32", inputs="small"),
    _case("brev.b32", "brev.b32 {d}, {a}", "b32", "b32"),
    _case("clz.b64", "clz.b64 {d}, {a}", "u64", "u32"),
    _case("popc.b32", "popc.b32 {d}, {a}", "b32", "u32"),
    _case("dp4a.s32.u32", "dp4a.s32.u32 {d}, {a}, {b}, {c}", "b32 b32 s32", "s32"),
    _case("sad.u32", "sad.u32 {d}, {a}, {b}, {c}", "u32 u32 u32", "u32"),
    _case("mul24.lo.s32", "mul24.lo.s32 {d}, {a}, {b}", "s32 s32", "s32"),
    _case("add.sat.s32", "add.sat.s32 {d}, {a}, {b}", "s32 s32", "s32"),
]
MORE = [  # conversions, half-precision arithmetic, comparisons and 64-bit integer forms
    _case("cvt.rn.f16x2.f32", "cvt.rn.f16x2.f32 {d}, {a}, {b}", F2, "b32"),
    _case("cvt.rz.bf16x2.f32", "cvt.rz.bf16x2.f32 {d}, {a}, {b}", F2, "b32"),
    _case("cvt.rn.relu.bf16x2.f32", "cvt.rn.relu.bf16x2.f32 {d}, {a}, {b}", F2, "b32"),
    _case("cvt.rna.tf32.f32", "cvt.rna.tf32.f32 {d}, {a}", "b32", "b32"),
    _case("cvt.rn.satfinite.e4m3x2.f16x2", "cvt.rn.satfinite.e4m3x2.f16x2 {d}, {a}", "b32", "b16"),
    _case("cvt.rn.satfinite.e5m2x2.f16x2", "cvt.rn.satfinite.e5m2x2.f16x2 {d}, {a}", "b32", "b16"),
    _case("cvt.rn.f16x2.e5m2x2", "cvt.rn.f16x2.e5m2x2 {d}, {a}", "b16", "b32"),
    _case("cvt.f32.bf16", "cvt.f32.bf16 {d}, {a}", "b16", "f32"),
    _case("cvt.rzi.sat.u16.f16", "cvt.rzi.sat.u16.f16 {d}, {a}", "b16", "b16"),
    _case("cvt.rm.f16.f64", "cvt.rm.f16.f64 {d}, {a}", "f64", "b16"),
    _case("cvt.rp.f32.f64", "cvt.rp.f32.f64 {d}, {a}", "f64", "f32"),
    _case("cvt.rni.s64.f64", "cvt.rni.s64.f64 {d}, {a}", "f64", "s64"),
    _case("fma.rn.f16", "fma.rn.f16 {d}, {a}, {b}, {c}", "b16 b16 b16", "b16"),
    _case("fma.rn.relu.bf16", "fma.rn.relu.bf16 {d}, {a}, {b}, {c}", "b16 b16 b16", "b16"),
    _case("fma.rn.sat.f16x2", "fma.rn.sat.f16x2 {d}, {a}, {b}, {c}", "b32 b32 b32", "b32"),
    _case("add.rn.ftz.f16x2", "add.rn.ftz.f16x2 {d}, {a}, {b}", "b32 b32", "b32"),
    _case("mul.rn.bf16x2", "mul.rn.bf16x2 {d}, {a}, {b}", "b32 b32", "b32"),
    _case("max.NaN.bf16x2", "max.NaN.bf16x2 {d}, {a}, {b}", "b32 b32", "b32"),
    _case("neg.bf16x2", "neg.bf16x2 {d}, {a}", "b32", "b32"),
    _case("abs.f16x2", "abs.f16x2 {d}, {a}", "b32", "b32"),
    _case("min.f64", "min.f64 {d}, {a}, {b}", D2, "f64"),
    _case("rcp.rn.f64", "rcp.rn.f64 {d}, {a}", "f64", "f64"),
    _case("testp.subnormal.f32", "testp.subnormal.f32 %p, {a};\n\tselp.u32 {d}, 1, 0, %p", F1, "u32"),
    _case("setp.gtu.f32", "setp.gtu.f32 %p, {a}, {b};\n\tselp.u32 {d}, 1, 0, %p", F2, "u32"),
    _case("set.lt.u32.f32", "set.lt.u32.f32 {d}, {a}, {b}", F2, "u32"),
    _case("slct.f32.f32", "slct.f32.f32 {d}, {a}, {b}, {c}", F3, "f32"),
    _case("mad.hi.sat.s32", "mad.hi.sat.s32 {d}, {a}, {b}, {c}", "s32 s32 s32", "s32"),
    _case("mul.lo.u64", "mul.lo.u64 {d}, {a}, {b}", "u64 u64", "u64"),
    _case("popc.b64", "popc.b64 {d}, {a}", "u64", "u32"),
    _case("brev.b64", "brev.b64 {d}, {a}", "u64", "u64"),
    _case("bfind.u64", "bfind.u64 {d}, {a}", "u64", "u32"),
    _case("shf.r.clamp.b32", "shf.r.clamp.b32 {d}, {a}, {b}, {c}", "b32 b32 u32", "b32"),
    _case("prmt.b32.rc16", "prmt.b32.rc16 {d}, {a}, {b}, {c}", "b32 b32 b32", "b32"),
    _case("prmt.b32.ecl", "prmt.b32.ecl {d}, {a}, {b}, {c}", "b32 b32 b32", "b32"),
    _case("lop3.b32", "lop3.b32 {d}, {a}, {b}, {c}, 0x96", "b32 b32 b32", "b32"),
    _case("dp2a.lo.u32.s32", "dp2a.lo.u32.s32 {d}, {a}, {b}, {c}", "b32 b32 u32", "u32"),
]
EXACT = EXACT + MORE
B3 = "b32 b32 b32"
VIDEO = [  # operand selectors, merges and secondary operations of the video instructions
    _case("vadd.sat.add.sel", "vadd.s32.s32.s32.sat.add {d}, {a}.b1, {b}.h0, {c}", B3, "b32"),
    _case("vsub.merge", "vsub.u32.s32.u32 {d}.h1, {a}.h0, {b}.b3, {c}", B3, "b32"),
    _case("vabsdiff.min", "vabsdiff.s32.u32.s32.min {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vmax.max.sel", "vmax.u32.u32.s32.max {d}, {a}.b2, {b}, {c}", B3, "b32"),
    _case("vshl.clamp.add", "vshl.u32.u32.u32.clamp.add {d}, {a}, {b}.b0, {c}", B3, "b32"),
    _case("vshr.wrap", "vshr.s32.s32.u32.wrap {d}, {a}.h1, {b}", "b32 b32", "b32"),
    _case("vmad.neg.shr15.sat", "vmad.s32.s32.u32.sat.shr15 {d}, -{a}.h0, {b}.h1, {c}", B3, "b32"),
    _case("vmad.po", "vmad.u32.u32.u32.po {d}, {a}.b0, {b}.b1, {c}", B3, "b32"),
    _case("vmad.neg.c", "vmad.s32.u32.u32 {d}, {a}.h0, {b}.h0, -{c}", B3, "b32"),
    _case("vset.lt.add", "vset.u32.s32.lt.add {d}, {a}.b2, {b}.b1, {c}", B3, "b32"),
    _case("vadd2.sat", "vadd2.s32.s32.s32.sat {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vsub4.add", "vsub4.u32.u32.u32.add {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vavrg4", "vavrg4.s32.s32.s32 {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vavrg2.u", "vavrg2.u32.u32.u32 {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vabsdiff2.add", "vabsdiff2.u32.u32.u32.add {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vmin4.mask", "vmin4.s32.s32.s32 {d}.b20, {a}, {b}, {c}", B3, "b32"),
    _case("vmax4.sel", "vmax4.u32.u32.u32 {d}, {a}.b4321, {b}.b7531, {c}", B3, "b32"),
    _case("vset2.gt.add", "vset2.s32.s32.gt.add {d}, {a}, {b}, {c}", B3, "b32"),
    _case("vset4.ne", "vset4.u32.u32.ne {d}, {a}, {b}, {c}", B3, "b32"),
    # destination selectors: which part of the result lands where, with and without saturation
    _case("vadd.merge.h0", "vadd.s32.s32.s32 {d}.h0, {a}, {b}, {c}", B3, "b32"),
    _case("vadd.merge.h1.sat", "vadd.s32.s32.s32.sat {d}.h1, {a}.h0, {b}.h1, {c}", B3, "b32"),
    _case("vadd.merge.b0.u", "vadd.u32.u32.u32 {d}.b0, {a}.b1, {b}.b2, {c}", B3, "b32"),
    _case("vadd.merge.b1.sat", "vadd.s32.s32.s32.sat {d}.b1, {a}.b0, {b}.b3, {c}", B3, "b32"),
    _case("vsub.merge.b2.u.sat", "vsub.u32.u32.u32.sat {d}.b2, {a}.b2, {b}.b1, {c}", B3, "b32"),
    _case("vmax.merge.b3", "vmax.s32.u32.s32 {d}.b3, {a}.h1, {b}.b0, {c}", B3, "b32"),
    _case("vabsdiff.merge.h1.u", "vabsdiff.u32.u32.u32 {d}.h1, {a}, {b}, {c}", B3, "b32"),
    _case("vset.merge.b2", "vset.s32.s32.gt {d}.b2, {a}.b1, {b}.b0, {c}", B3, "b32"),
]
EXACT = EXACT + VIDEO
APPROX = [
    _case("ex2.approx.f32", "ex2.approx.f32 {d}, {a}", F1, "f32", bound=("ulp", 2), inputs="unit"),
    _case("ex2.approx.ftz.f32", "ex2.approx.ftz.f32 {d}, {a}", F1, "f32", bound=("ulp", 2), inputs="unit"),
    _case("lg2.approx.f32", "lg2.approx.f32 {d}, {a}", F1, "f32", bound=("absrel", 2**-22), inputs="positive"),
    _case("rcp.approx.f32", "rcp.approx.f32 {d}, {a}", F1, "f32", bound=("ulp", 1), inputs="unit"),
    _case("rsqrt.approx.f32", "rsqrt.approx.f32 {d}, {a}", F1, "f32", bound=("rel", 2**-22.9), inputs="positive"),
    _case("sqrt.approx.f32", "sqrt.approx.f32 {d}, {a}", F1, "f32", bound=("rel", 2**-23), inputs="positive"),
    _case("sin.approx.f32", "sin.approx.f32 {d}, {a}", F1, "f32", bound=("abs", 2**-20.5), inputs="angle"),
    _case("cos.approx.f32", "cos.approx.f32 {d}, {a}", F1, "f32", bound=("abs", 2**-20.5), inputs="angle"),
    _case("tanh.approx.f32", "tanh.approx.f32 {d}, {a}", F1, "f32", bound=("rel", 2**-10.987), inputs="unit"),
    _case("div.approx.f32", "div.approx.f32 {d}, {a}, {b}", F2, "f32", bound=("ulp", 2), inputs="unit"),
    _case("div.full.f32", "div.full.f32 {d}, {a}, {b}", F2, "f32", bound=("ulp", 2), inputs="unit"),
]


def reference(case: Case, inputs: list[np.ndarray]) -> np.ndarray:
    """The exact value of an APPROX case in float64."""
    a = inputs[0].astype(np.float64)
    op = case.name.split(".")[0]
    with np.errstate(all="ignore"):
        if op == "div":
            return a / inputs[1].astype(np.float64)
        return {"ex2": np.exp2, "lg2": np.log2, "rcp": lambda x: 1 / x, "rsqrt": lambda x: 1 / np.sqrt(x),
                "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}[op](a)


def within_bound(case: Case, got: np.ndarray, exact: np.ndarray, slack: float = 1.0) -> np.ndarray:
    """Per element: the result meets the case's bound (times `slack`)."""
    kind, bound = case.bound
    bound *= slack
    g = got.astype(np.float64)
    with np.errstate(all="ignore"):
        if kind == "abs":
            return np.abs(g - exact) <= bound
        if kind == "rel":
            return np.abs(g - exact) <= bound * np.abs(exact)
        if kind == "absrel":
            return np.abs(g - exact) <= bound * np.maximum(1.0, np.abs(exact))
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        return np.abs(g - exact) <= bound * ulp


def checkable(case: Case, exact: np.ndarray) -> np.ndarray:
    """Elements where the manual's bound applies: finite, normal float32 results away from overflow."""
    tiny = np.finfo(np.float32).tiny
    with np.errstate(all="ignore"):
        return np.isfinite(exact) & (np.abs(exact) >= tiny) & (np.abs(exact) < 1e37)


POISON = 0xA5  # every byte of an output before the launch


def poisoned_output(case: Case, n: int) -> np.ndarray:
    """The output array, every byte POISON, so that an element no thread wrote shows."""
    return np.full(n * np.dtype(_TYPES[case.out][1]).itemsize, POISON, np.uint8).view(_TYPES[case.out][1])


def unwritten(out: np.ndarray) -> int:
    """How many elements still hold the poison pattern."""
    return int(np.count_nonzero((out.view(np.uint8).reshape(len(out), -1) == POISON).all(1)))


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bit equality, with any two NaNs of a float type counted as equal."""
    eq = a.view(f"u{a.dtype.itemsize}") == b.view(f"u{b.dtype.itemsize}")
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


# Warp-level operations: the body reads %a and %b (u32 in0[i], in1[i]) and leaves its result in %y (u32).
# These are exact too; divergent branches and partial member masks are where an emulator can go wrong.
WARP_BODIES = {
    "shfl.idx": "and.b32 %t1, %b, 31;\n shfl.sync.idx.b32 %y, %a, %t1, 0x1f, 0xffffffff;",
    "shfl.up.clamp": "and.b32 %t1, %b, 7;\n shfl.sync.up.b32 %y|%q, %a, %t1, 0, 0xffffffff;\n"
                     " selp.b32 %t2, 0x80000000, 0, %q;\n xor.b32 %y, %y, %t2;",
    "shfl.down.pred": "and.b32 %t1, %b, 15;\n shfl.sync.down.b32 %y|%q, %a, %t1, 0x1f, 0xffffffff;\n"
                      " selp.b32 %t2, 1, 0, %q;\n add.u32 %y, %y, %t2;",
    "shfl.bfly.segment": "shfl.sync.bfly.b32 %y, %a, 3, 0x0c07, 0xffffffff;",
    "shfl.half.warp": "mov.u32 %t1, %laneid;\n setp.lt.u32 %q, %t1, 16;\n mov.u32 %y, 7;\n @!%q bra SKIP;\n"
                      " shfl.sync.bfly.b32 %y, %a, 5, 0x1f, 0x0000ffff;\nSKIP:",
    "vote.ballot.divergent": "and.b32 %t1, %a, 1;\n setp.eq.u32 %q, %t1, 1;\n mov.u32 %y, 0;\n @!%q bra SKIP;\n"
                             " and.b32 %t2, %b, 2;\n setp.ne.u32 %r2, %t2, 0;\n activemask.b32 %t3;\n"
                             " vote.sync.ballot.b32 %y, %r2, %t3;\nSKIP:",
    "vote.any.all.uni": "and.b32 %t1, %a, 0xff;\n setp.lt.u32 %q, %t1, 3;\n vote.sync.any.pred %r2, %q, 0xffffffff;\n"
                        " selp.b32 %y, 1, 0, %r2;\n vote.sync.all.pred %r2, %q, 0xffffffff;\n"
                        " selp.b32 %t2, 2, 0, %r2;\n or.b32 %y, %y, %t2;\n vote.sync.uni.pred %r2, %q, 0xffffffff;\n"
                        " selp.b32 %t2, 4, 0, %r2;\n or.b32 %y, %y, %t2;",
    "match.any": "and.b32 %t1, %a, 3;\n match.any.sync.b32 %y, %t1, 0xffffffff;",
    "match.all": "and.b32 %t1, %a, 0x80000000;\n match.all.sync.b32 %y|%q, %t1, 0xffffffff;\n"
                 " selp.b32 %t2, 1, 0, %q;\n xor.b32 %y, %y, %t2;",
    "redux.add": "redux.sync.add.u32 %y, %a, 0xffffffff;",
    "redux.min.s32": "redux.sync.min.s32 %y, %a, 0xffffffff;",
    "redux.or.divergent": "and.b32 %t1, %b, 1;\n setp.eq.u32 %q, %t1, 0;\n mov.u32 %y, 0;\n @%q bra SKIP;\n"
                          " activemask.b32 %t3;\n redux.sync.or.b32 %y, %a, %t3;\nSKIP:",
    "activemask.divergent": "and.b32 %t1, %a, 3;\n setp.eq.u32 %q, %t1, 0;\n @%q bra ELSE;\n activemask.b32 %y;\n"
                            " bra.uni DONE2;\nELSE:\n activemask.b32 %y;\n not.b32 %y, %y;\nDONE2:",
    "elect": "elect.sync %t1|%q, 0xffffffff;\n selp.b32 %t2, 0x100, 0, %q;\n or.b32 %y, %t1, %t2;",
    "fns": "and.b32 %t1, %b, 31;\n fns.b32 %y, %a, %t1, 1;",
    "bfind.shiftamt": "bfind.shiftamt.s32 %y, %a;",
    "prmt.f4e": "prmt.b32.f4e %y, %a, %b, 5;",
    "szext.clamp": "and.b32 %t1, %b, 63;\n szext.clamp.s32 %y, %a, %t1;",
    "bmsk.wrap": "bmsk.wrap.b32 %y, %a, %b;",
    "movmatrix": "movmatrix.sync.aligned.m8n8.trans.b16 %y, %a;",
}


def warp_case_ptx(name: str, arch: str = "sm_90a") -> str:
    """A kernel running WARP_BODIES[name] once per thread: out[i] = body(in0[i], in1[i])."""
    body = WARP_BODIES[name].replace("\n ", "\n\t")
    return f""".version 8.0
.target {arch}
.address_size 64

.visible .entry k(.param .u64 in0, .param .u64 in1, .param .u64 out, .param .u32 n)
{{
\t.reg .pred %p, %q, %r2;
\t.reg .b32 %i, %n, %t, %a, %b, %y, %t1, %t2, %t3;
\t.reg .b64 %ptr, %off;
\tmov.u32 %i, %ctaid.x;
\tmov.u32 %n, %ntid.x;
\tmov.u32 %t, %tid.x;
\tmad.lo.u32 %i, %i, %n, %t;
\tmul.wide.u32 %off, %i, 4;
\tld.param.u64 %ptr, [in0];
\tadd.s64 %ptr, %ptr, %off;
\tld.global.u32 %a, [%ptr];
\tld.param.u64 %ptr, [in1];
\tadd.s64 %ptr, %ptr, %off;
\tld.global.u32 %b, [%ptr];
\t{body}
\tld.param.u64 %ptr, [out];
\tadd.s64 %ptr, %ptr, %off;
\tst.global.u32 [%ptr], %y;
\tret;
}}
"""


# --------------------------------------------------------------------------- running the cases


def digest(arrays) -> str:
    """A short hash of input arrays: recorded beside each GPU result, to prove a replay uses the same inputs."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()[:16]


def run_case(case: Case, device: str, ins: list[np.ndarray] | None = None, n: int = REFERENCE_N):
    """(inputs, output) of one case on `device`: the recorded inputs unless `ins` is given; the output starts
    poisoned, so an element no thread wrote shows."""
    ins = case.make_inputs(n, case_rng(case.name)) if ins is None else ins
    n = len(ins[0])
    out = poisoned_output(case, n)
    pad = [np.zeros(n, np.uint32)] * (3 - len(ins))
    _kernel(case.ptx(), case.name).launch(grid=(n // 256,), block=(256,), args=[*ins, *pad, out, np.uint32(n)],
                                          device=device)
    return ins, out


def run_warp(name: str, device: str, ins: tuple[np.ndarray, np.ndarray] | None = None, n: int = REFERENCE_N):
    """(inputs, output) of one warp case on `device` (recorded inputs unless `ins` is given)."""
    a, b = warp_inputs(name, n) if ins is None else ins
    out = np.full(len(a), 0xA5A5A5A5, np.uint32)
    _kernel(warp_case_ptx(name), name).launch(grid=(len(a) // 256,), block=(256,), args=[a, b, out, np.uint32(len(a))],
                                              device=device)
    return (a, b), out


def _kernel(text: str, name: str):
    import ptxforge as pf

    return pf.parse(text, filename=f"{name}.ptx").kernel("k")


TMA_PADDINGS = ((70, 2), (66, 6))  # (rows H, padding): a 100 x H transpose stored into rows of H + padding


def run_tma_transpose(H: int, pad: int, device: str) -> np.ndarray:
    """The destination after the corpus kernel tma_transpose_2d stores the transpose of a 100 x H array into
    rows of H + pad floats (the padding starts at -7.5): which padding elements a TMA store writes."""
    from emu_corpus import corpus_module  # tests/emu on sys.path

    from ptxforge.runtime import tensor_map, to_device

    W = 100
    src = to_device(np.arange(H * W, dtype=np.float32).reshape(H, W) + 1, device=device)
    dst = to_device(np.full((W + 4, H + pad), -7.5, np.float32), device=device)
    corpus_module("tma_bulk_sm90", "sm_90a.O3").kernel("tma_transpose_2d").launch(
        grid=(-(-W // 32), -(-H // 32)), block=(256,), device=device,
        args=[tensor_map(src, np.float32, (W, H), (W * 4,), (32, 32)),
              tensor_map(dst, np.float32, (H, W), ((H + pad) * 4,), (32, 32))])
    return dst.to_host()


DSMEM_KERNELS = ("dsmem_xor_peer", "dsmem_mapa_peer")


def run_dsmem_layout(device: str) -> np.ndarray:
    """The shared-memory addresses the corpus kernels dsmem_xor_peer / dsmem_mapa_peer record per CTA of two
    2-CTA clusters (see tests/corpus/src/cuda/dsmem_layout_sm90.cu), shape (2, 4 CTAs, 4), as uint64; each
    kernel's exchange through the peer is checked on the way."""
    from emu_corpus import corpus_module  # tests/emu on sys.path

    from ptxforge.runtime import to_device

    m = corpus_module("dsmem_layout_sm90", "sm_90a.O3")
    inp = np.arange(4 * 64, dtype=np.int32)
    want = 1000 * (np.arange(4) % 2)[:, None] + inp.reshape(4, 64) + np.arange(1, 65)
    rows = []
    for name in DSMEM_KERNELS:
        out = to_device(np.full(4 * 64, -1, np.int32), device=device)
        addrs = to_device(np.zeros(4 * 4, np.uint64), device=device)
        m.kernel(name).launch(grid=(4,), block=(64,), device=device, args=[to_device(inp, device=device), out, addrs])
        if not (out.to_host().reshape(4, 64) == want).all():
            raise AssertionError(f"{name}: the exchange through the peer CTA's shared memory went wrong")
        rows.append(addrs.to_host().reshape(4, 4))
    return np.stack(rows)


def mismatch_report(name: str, ins, got, want, got_name: str = "emulator", want_name: str = "H200") -> str:
    """The count of differing elements and the first few, with their inputs in hex."""
    bad = np.flatnonzero(~same_bits(got, want))
    bits = f"u{got.dtype.itemsize}"
    rows = [f"  in=({', '.join(hex(int(x[i].view(f'u{x.dtype.itemsize}'))) for x in ins)}) "
            f"{got_name}={hex(int(got.view(bits)[i]))} {want_name}={hex(int(want.view(bits)[i]))}" for i in bad[:6]]
    return f"{name}: {bad.size} of {got.size} differ\n" + "\n".join(rows)
