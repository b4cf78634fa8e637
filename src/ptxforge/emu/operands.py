"""Operand access compiled once per instruction: readers, writers and address computations.

A reader is `fn(st) -> value` (a numpy array over lanes or a numpy scalar when uniform) holding the
raw bits of the instruction type; a writer is `fn(st, value, mask)` that stores into a register,
widening or truncating to the register's declared width. Nothing here does string work at run time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ptxforge.emu import ramps as R
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.memory import CLUSTER_RANK_SHIFT, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from ptxforge.emu.program import Layout, Placed, Symbol, storage_dtype
from ptxforge.ptx import ir
from ptxforge.ptx.isa.data_sreg import special_register
from ptxforge.ptx.printer import operand_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.op import Mask

    # raw bits over lanes (an array) or one numpy scalar when uniform: numpy's stubs cannot follow the mix of
    # arrays, scalars and dtypes-by-width the emulator computes with, so it is Any to mypy
    Value = Any
    Reader = Callable[[LaneState], Value]
    Writer = Callable[[LaneState, Value, Mask], None]

_U: dict[int, type[np.unsignedinteger[Any]]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_S: dict[int, type[np.signedinteger[Any]]] = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
FUNC_BASE = 0x7B00_0000_0000  # fake addresses of functions (for indirect calls)

# special registers read anew at every read (time passes); the rest are fixed for a launch
DYNAMIC_SREGS = frozenset({"%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"})


def function_index(module: ir.Module, name: str) -> int:
    """A function's number in its module: its fake address is FUNC_BASE + this."""
    return [f.name for f in module.functions].index(name)


def bits_of_type(ty: str) -> int:
    return 1 if ty == ".pred" else max(8, ir.type_bits(ty))


def udt(ty: str) -> type[np.generic]:
    return np.bool_ if ty == ".pred" else _U[bits_of_type(ty)]


def is_signed(ty: str) -> bool:
    return ty.startswith(".s")


def convert_width(v: Value, src_bits: int, dst_bits: int, signed: bool) -> Value:
    """Zero- or sign-extend / truncate raw bits between widths."""
    if src_bits == dst_bits:
        return v
    if dst_bits < src_bits or not signed:
        return np.asarray(v).astype(_U[dst_bits]) if np.ndim(v) else _U[dst_bits](int(v) & ((1 << dst_bits) - 1))
    sv = np.asarray(v).view(_S[src_bits]) if np.ndim(v) else _S[src_bits](np.asarray(v).view(_S[src_bits]))
    return np.asarray(sv).astype(_S[dst_bits]).view(_U[dst_bits]) if np.ndim(v) else \
        _U[dst_bits](int(sv) & ((1 << dst_bits) - 1))


def immediate_bits(imm: ir.Immediate, ty: str) -> Value:
    """An immediate as a numpy scalar of `ty`'s raw bits."""
    text = imm.text.strip()
    if ty == ".pred":
        return np.bool_(bool(imm.value))
    bits = bits_of_type(ty)
    low = text.lower().lstrip("-+")
    if low.startswith("0f") and len(low) == 10:
        v = int(low[2:], 16)
        if bits == 64 and ty in (".f64", ".b64"):  # 0f literal used with a double op: convert value
            v = int(np.float64(np.uint32(v).view(np.float32)).view(np.uint64))
        return _U[bits](v & ((1 << bits) - 1))
    if low.startswith("0d") and len(low) == 18:
        v = int(low[2:], 16)
        if bits == 32:
            v = int(np.float32(np.uint64(v).view(np.float64)).view(np.uint32))
        return _U[bits](v & ((1 << bits) - 1))
    val = imm.value
    if ty in (".f32", ".f64", ".f16", ".bf16") and (isinstance(val, float) or ty != ".b32"):
        f = float(val)
        if ty == ".f32":
            return np.float32(f).view(np.uint32)
        if ty == ".f64":
            return np.float64(f).view(np.uint64)
        if ty == ".f16":
            return np.float16(f).view(np.uint16)
        return np.asarray(f, ml_dtypes.bfloat16).view(np.uint16)[()]
    if isinstance(val, float):
        val = int(val)
    return _U[bits](int(val) & ((1 << bits) - 1))


def _own_shared(c: Any) -> Reader:
    """A reader of shared address `c` of the executing CTA: in a cluster it carries the CTA's rank
    (memory.py's Hopper layout)."""
    dt = type(c)
    shift = dt(CLUSTER_RANK_SHIFT)

    def read(st: Any) -> Any:
        if st.sreg("%cluster_nctarank") == 1:
            return c
        return c + (np.asarray(st.sreg("%cluster_ctarank")).astype(dt) << shift)
    return read


class Ctx:
    """Compile context for one instruction: resolves names and builds readers/writers."""

    def __init__(self, layout: Layout, placed: Placed, pc: int, consts: dict[str, Any], reference: bool = False):
        self.layout = layout
        self.reference = reference  # build the plain form: each result from its semantics function, no fast path
        self.placed = placed
        self.ins = placed.ins
        self.pc = pc
        self.consts = consts  # per-launch constants: ntid, nctaid ... (scalars)

    def error(self, msg: str) -> UnsupportedInstruction:
        span = self.ins.span
        return UnsupportedInstruction(f"{span.file}:{span.line}: {self.ins.mnemonic}: {msg}")

    def lookup(self, name: str) -> tuple[str, int] | Symbol | None:
        return self.layout.lookup(self.placed, name)

    def reg_slot(self, op: ir.Operand) -> int:
        if isinstance(op, ir.Register):
            hit = self.lookup(op.name)
            if isinstance(hit, tuple):
                return hit[1]
        raise self.error(f"{_show(op)} is not a register")

    def reg_type(self, slot: int) -> str:
        return self.layout.reg_types[slot]

    # ------------------------------------------------------------------ readers
    def read(self, op: ir.Operand, ty: str, keep_ramps: bool = False) -> Reader:
        """Reader of an operand as raw bits of type `ty` (predicates as bool). A register that may hold a
        `ramps.Ramp` reads as its array, or (`keep_ramps`, for ops that make ramps of ramps) as it is."""
        if isinstance(op, ir.Register):
            hit = self.lookup(op.name)
            if isinstance(hit, tuple):
                if hit[1] in R.ramp_only(self.layout):
                    raw = self._reg_reader(hit[1], ty)
                    return raw if keep_ramps else (lambda st: R.value(st, raw(st)))
                return self._reg_reader(hit[1], ty)
            if isinstance(hit, Symbol):
                return self._symbol_reader(hit, ty)
            raise self.error(f"unknown register {op.name}")
        if isinstance(op, ir.Negated):
            inner = self.read(op.operand, ".pred")
            return lambda st: ~inner(st)
        if isinstance(op, ir.Minus):
            raise self.error("a negated operand '-' is only valid in vmad")
        if isinstance(op, ir.RegisterOffset):  # `%rd1+2`: added in the operand type, wrapping
            reg = self.read(op.register, ty)
            dt = _U[bits_of_type(ty)]
            c = dt(op.offset & ((1 << bits_of_type(ty)) - 1))
            return lambda st: (np.asarray(reg(st)).astype(dt, copy=False) + c).astype(dt, copy=False)
        if isinstance(op, ir.Immediate):
            c = immediate_bits(op, ty)
            return lambda st: c
        if isinstance(op, ir.SpecialRegister):
            return self._special_reader(op.name, ty)
        if isinstance(op, ir.Symbol):
            hit = self.lookup(op.name)
            if hit is None:
                raise self.error(f"unknown symbol {op.name}")
            return self._symbol_reader(hit, ty)  # type: ignore[arg-type]  # the parser makes registers ir.Register
        if isinstance(op, ir.Expr):
            return self._expr_reader(op.text, ty)
        if isinstance(op, ir.Address) and op.base is None:
            c = _U[bits_of_type(ty)](op.offset)
            return lambda st: c
        raise self.error(f"cannot read operand {_show(op)}")

    def _reg_reader(self, slot: int, ty: str) -> Reader:
        rty = self.layout.reg_types[slot]
        if ty == ".pred" or rty == ".pred":
            if ty == ".pred" and rty == ".pred":
                return lambda st: st.regs[slot]
            if rty == ".pred":
                dt = udt(ty)
                return lambda st: np.asarray(st.regs[slot]).astype(dt)
            return lambda st: st.regs[slot] != 0
        rb, tb = bits_of_type(rty), bits_of_type(ty)
        if rb == tb:
            return lambda st: st.regs[slot]
        signed = is_signed(ty) or is_signed(rty)
        return lambda st: convert_width(st.regs[slot], rb, tb, signed and rb < tb)

    def _special_reader(self, name: str, ty: str) -> Reader:
        """A special register's value: its width is the ISA table's (data_sreg.py); a predicate one
        (%is_explicit_cluster) is kept as a 32-bit 0/1."""
        if ty == ".pred":
            return lambda st: st.sreg(name) != 0
        tb = bits_of_type(ty)
        if name in DYNAMIC_SREGS:
            def rd(st, name=name):
                v = st.special_dynamic(name)
                return convert_width(v, 64, tb, False)
            return rd
        spec = special_register(name)
        sb = 64 if spec is not None and spec.bits == 64 else 32
        if tb == sb:
            return lambda st: st.sreg(name)
        return lambda st: convert_width(st.sreg(name), sb, tb, False)

    def _symbol_reader(self, sym: Symbol, ty: str) -> Reader:
        """The address (or pc) a name stands for, as a value."""
        tb = bits_of_type(ty)
        dt = _U[tb]
        if sym.kind == "global":
            c = dt(sym.value & ((1 << tb) - 1))
            return lambda st: c
        if sym.kind == "shared":
            return _own_shared(dt(sym.value))
        if sym.kind == "kparam":
            c = dt(sym.value)  # param-space address; cvta.param adds the window
            return lambda st: c
        if sym.kind == "local":
            off = sym.value
            return lambda st: (st.fb + off).astype(dt)
        if sym.kind == "func":
            idx = function_index(self.layout.module, sym.name)
            c = dt((FUNC_BASE + idx) & ((1 << tb) - 1))
            return lambda st: c
        if sym.kind == "label":
            c = dt(sym.value)
            return lambda st: c
        if sym.kind == "pvar":
            # a .param variable used as a value: its per-lane storage read as bits
            i, size = sym.value, sym.size
            nb = tb // 8
            return lambda st: st.pvars[i][:, :nb].copy().view(dt)[:, 0] if size >= nb else \
                np.zeros(st.N, dt)
        raise self.error(f"cannot use {sym.name} ({sym.kind}) as a value")

    _EXPR = re.compile(r"^\s*(generic\()?\s*([\w$.]+)\s*\)?\s*(?:\+\s*(\d+))?\s*$")

    def _expr_reader(self, text: str, ty: str) -> Reader:
        m = self._EXPR.match(text)
        if not m:
            raise self.error(f"unsupported constant expression {text!r}")
        sym: Symbol | None = self.lookup(m.group(2))  # type: ignore[assignment]  # _EXPR names no register
        if sym is None:
            raise self.error(f"unknown symbol in {text!r}")
        base = self._symbol_reader(sym, ty)
        off = int(m.group(3) or 0)
        if m.group(1) and sym.kind == "shared":
            off += SHARED_WINDOW
        dt = udt(ty)
        c = dt(off & ((1 << bits_of_type(ty)) - 1))
        return lambda st: base(st) + c

    # ------------------------------------------------------------------ writers
    def write(self, op: ir.Operand, ty: str) -> Writer:
        """Writer `fn(st, value, mask)` for a destination operand; value holds `ty` bits."""
        if isinstance(op, ir.Sink):
            return lambda st, v, m: None
        slot = self.reg_slot(op)
        rty = self.layout.reg_types[slot]
        rdt = storage_dtype(rty)
        if rty == ".pred" or ty == ".pred":
            conv = (lambda v: v) if ty == ".pred" and rty == ".pred" else (
                (lambda v: np.asarray(v) != 0) if rty == ".pred" else (lambda v: np.asarray(v).astype(rdt)))
        else:
            rb, tb = bits_of_type(rty), bits_of_type(ty)
            if rb == tb:
                conv = None
            else:
                signed = is_signed(ty)
                conv = lambda v, rb=rb, tb=tb, signed=signed: convert_width(v, tb, rb, signed)  # noqa: E731
        if conv is None:
            def w(st, v, m):
                if m is None:
                    st.regs[slot] = v
                else:
                    st.regs[slot] = merge(m, v, st.regs[slot])
        else:
            def w(st, v, m):
                v = conv(v)
                if m is None:
                    st.regs[slot] = v
                else:
                    st.regs[slot] = merge(m, v, st.regs[slot])
        return w

    # ------------------------------------------------------------------ addresses
    def address(self, op: ir.Operand, space: str) -> tuple[str, Reader]:
        """(space, reader of the address as uint64/int64) for a memory operand `[base+off]` of an instruction
        that cannot access a function's .param variable (see `address_or_param_var`)."""
        where, addr = self.address_or_param_var(op, space)
        if isinstance(where, tuple) or isinstance(addr, int):
            name = op.base.name if isinstance(op, ir.Address) and op.base is not None else _show(op)
            raise self.error(f"{name} is a .param variable of the function: only ld and st access those")
        return where, addr

    def address_or_param_var(self, op: ir.Operand, space: str, keep_ramps: bool = False
                             ) -> tuple[str, Reader] | tuple[tuple[str, int], int]:
        """(space, reader of the address as uint64/int64) for a memory operand `[base+off]`.

        Symbols resolve to their state space: a kernel parameter gives space 'param', a function's
        param variable gives (('pvar', index), offset), handled by the caller. `keep_ramps`: a register
        holding a `ramps.Ramp` reads as one (memory.py's checked path takes it as it is).
        """
        if not isinstance(op, ir.Address):
            raise self.error(f"expected a memory operand, got {_show(op)}")
        off = op.offset
        base = op.base
        c: np.integer[Any]
        if base is None:
            c = np.uint64(off & (2 ** 64 - 1))
            return space, lambda st: c
        if isinstance(base, ir.Symbol) or (isinstance(base, ir.Register) and
                                            not isinstance(self.lookup(base.name), tuple)):
            # not a register: an ir.Symbol never names one (the parser makes those ir.Register)
            sym: Symbol | None = self.lookup(base.name)  # type: ignore[assignment]
            if sym is None:
                raise self.error(f"unknown symbol {base.name}")
            if sym.kind == "pvar":
                return ("pvar", sym.value), off
            if sym.kind == "kparam":
                c = np.int64(sym.value + off)
                if space == "generic":
                    c = np.uint64(PARAM_WINDOW + sym.value + off)
                    return "generic", lambda st: c
                return "param", lambda st: c
            if sym.kind == "shared":
                if space == "generic":
                    return "generic", _own_shared(np.uint64(SHARED_WINDOW + sym.value + off))
                return "shared", _own_shared(np.int64(sym.value + off))
            if sym.kind == "global":
                c = np.uint64(sym.value + off)
                return (space if space != "shared" else "global"), lambda st: c
            if sym.kind == "local":
                o = sym.value + off
                if space == "generic":
                    return "generic", lambda st: (st.fb + o).astype(np.uint64) + np.uint64(LOCAL_WINDOW)
                return "local", lambda st: st.fb + o
            raise self.error(f"cannot address {base.name} ({sym.kind})")
        slot = self.reg_slot(base)
        rb = bits_of_type(self.layout.reg_types[slot])
        dt = _U[rb]
        c = dt(off & ((1 << rb) - 1))
        if slot in R.ramp_only(self.layout):  # (ld/st take its slice from the Ramp itself: ramp_reader)
            if keep_ramps:
                if off == 0:
                    return space, lambda st: st.regs[slot]
                return space, lambda st: R.shifted(st.regs[slot], c)
            if off == 0:
                return space, lambda st: R.value(st, st.regs[slot])
            return space, lambda st: R.value(st, R.shifted(st.regs[slot], c))
        if off == 0:
            return space, lambda st: st.regs[slot]
        return space, lambda st: st.regs[slot] + c


def merge(m: np.ndarray, v: Value, old: Value) -> Value:
    """`np.where(m, v, old)`, a masked register write: as a copy of `old` with `v` put in where `m` when `v` is an
    array or scalar of `old`'s dtype and shape (cheaper), else by np.where (its promotion and broadcasting)."""
    if type(old) is np.ndarray and old.shape == m.shape:
        t = type(v)
        if (t is np.ndarray and v.shape == old.shape or t is old.dtype.type) and v.dtype == old.dtype:
            a = old.copy()
            np.copyto(a, v, where=m)
            return a
    return np.where(m, v, old)


def _show(op: ir.Operand) -> str:
    """An operand as the PTX printer writes it (`%r3|%p1`, `[%rd1+8]`), for messages."""
    return operand_text(op)
