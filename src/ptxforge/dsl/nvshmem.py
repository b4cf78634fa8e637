"""NVSHMEM's device API from the DSL: one call = one `call` of the `.extern .func` NVSHMEM's device library defines.

    from ptxforge.dsl.nvshmem import *
    me = nvshmem_my_pe()                                   # s32, as NVSHMEM's int
    nvshmem_putmem_nbi(recv + me * n, send, 4 * n, pe)     # pointers, or u64/b64 registers; sizes u64; PEs 32-bit
    nvshmem_fence()
    nvshmemx_signal_op(sig, 1, NVSHMEM_SIGNAL_ADD, pe)
    nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, npes)   # -> u64, the value it saw

The names, argument order and .param layout (.b64 for pointers, sizes and 64-bit values, .b32 for ints) are
nvcc's for NVSHMEM's C prototypes, so the PTX links against NVSHMEM's device library on a real cluster; the
emulator's `ptxforge.emu.Cluster` provides them. Arguments: a `Pointer`, a register of the parameter's width
(any integer or bit type), or a Python int.
"""

from __future__ import annotations

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import operand
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLTypeError
from ptxforge.dsl.kernel import ExternFunction
from ptxforge.dsl.memory import Pointer
from ptxforge.dsl.types import DType
from ptxforge.dsl.values import Reg, new_reg, value_of
from ptxforge.ptx import ir

NVSHMEM_SIGNAL_SET, NVSHMEM_SIGNAL_ADD = 9, 10
NVSHMEM_CMP_EQ, NVSHMEM_CMP_NE, NVSHMEM_CMP_GT, NVSHMEM_CMP_LE, NVSHMEM_CMP_LT, NVSHMEM_CMP_GE = range(6)


class NvshmemFunction(ExternFunction):
    """An NVSHMEM device function: declared with nvcc's .b32/.b64 params, called with pointers, registers of
    the right width, or Python ints; the result read into a register of type `result`."""

    def __init__(self, name: str, params: list[tuple[str, DType]], ret: DType | None = None,
                 result: DType | None = None):
        super().__init__(name, params, ret)
        self.result = result or ret

    def __call__(self, *args: object) -> Reg | None:
        b = current()
        if len(args) != len(self.params):
            raise DSLTypeError(f"{self.name} takes {len(self.params)} argument(s) "
                               f"({', '.join(n for n, _ in self.params)}), got {len(args)}")
        self.built(b.arch)
        b.funcs[self.name] = self
        stmts: list[ir.Statement] = []
        names = []
        for i, ((pname, spec), a) in enumerate(zip(self.params, args, strict=True)):
            assert isinstance(spec, DType)  # (NVSHMEM's parameters are all .b32/.b64 here)
            src = self._argument(pname, spec, a)
            stmts.append(ir.Variable(".param", spec.name, f"param{i}"))
            b.emit("st", [".param", spec.name], [ir.Address(ir.Symbol(f"param{i}")), src], into=stmts)
            names.append(f"param{i}")
        call_ops: list[ir.Operand] = [ir.Symbol(self.name), ir.ParenList(tuple(ir.Symbol(n) for n in names))]
        out = None
        if self.ret is not None and self.result is not None:
            stmts.append(ir.Variable(".param", self.ret.name, "retval0"))
            call_ops.insert(0, ir.ParenList((ir.Symbol("retval0"),)))
        b.emit("call", ["uni"], call_ops, into=stmts)
        if self.ret is not None and self.result is not None:
            out = new_reg(self.result)
            b.emit("ld", [".param", self.ret.name], [out.operand, ir.Address(ir.Symbol("retval0"))], into=stmts)
        b.place(ir.Block(tuple(stmts)))
        return out

    def _argument(self, pname: str, spec: DType, a: object) -> ir.Operand:
        if isinstance(a, Pointer):
            a = a.value()
        a = value_of(a)
        if isinstance(a, Reg):
            if a.type.bits != spec.bits or not (a.type.is_int or a.type.kind == "b"):
                raise DSLTypeError(f"{self.name}: argument {pname} takes a {spec.bits}-bit integer, got {a!r}")
            return a.operand
        if isinstance(a, int) and not isinstance(a, bool):
            return operand(a, T.u64 if spec.bits == 64 else T.u32)
        raise DSLTypeError(f"{self.name}: argument {pname} takes a pointer, a {spec.bits}-bit register or an int, "
                           f"got {a!r}")


_P = T.b64  # pointers, sizes and 64-bit values
_I = T.b32  # ints (PEs, ops, comparisons)
_PUT = [("dest", _P), ("source", _P), ("nelems", _P), ("pe", _I)]
_PUT_SIGNAL = [("dest", _P), ("source", _P), ("nelems", _P), ("sig_addr", _P), ("signal", _P), ("sig_op", _I),
               ("pe", _I)]

nvshmem_my_pe = NvshmemFunction("nvshmem_my_pe", [], T.b32, T.s32)
nvshmem_n_pes = NvshmemFunction("nvshmem_n_pes", [], T.b32, T.s32)
nvshmem_putmem_nbi = NvshmemFunction("nvshmem_putmem_nbi", _PUT)
nvshmemx_putmem_nbi_warp = NvshmemFunction("nvshmemx_putmem_nbi_warp", _PUT)
nvshmemx_putmem_nbi_block = NvshmemFunction("nvshmemx_putmem_nbi_block", _PUT)
nvshmemx_putmem_signal_nbi = NvshmemFunction("nvshmemx_putmem_signal_nbi", _PUT_SIGNAL)
nvshmemx_putmem_signal_nbi_warp = NvshmemFunction("nvshmemx_putmem_signal_nbi_warp", _PUT_SIGNAL)
nvshmemx_putmem_signal_nbi_block = NvshmemFunction("nvshmemx_putmem_signal_nbi_block", _PUT_SIGNAL)
nvshmemx_signal_op = NvshmemFunction("nvshmemx_signal_op", [("sig_addr", _P), ("signal", _P), ("sig_op", _I),
                                                            ("pe", _I)])
nvshmem_uint64_atomic_add = NvshmemFunction("nvshmem_uint64_atomic_add", [("dest", _P), ("value", _P), ("pe", _I)])
nvshmem_fence = NvshmemFunction("nvshmem_fence", [])
nvshmem_quiet = NvshmemFunction("nvshmem_quiet", [])
nvshmem_barrier_all = NvshmemFunction("nvshmem_barrier_all", [])
nvshmem_ptr = NvshmemFunction("nvshmem_ptr", [("dest", _P), ("pe", _I)], T.b64, T.u64)
nvshmem_signal_wait_until = NvshmemFunction("nvshmem_signal_wait_until",
                                            [("sig_addr", _P), ("cmp", _I), ("cmp_value", _P)], T.b64, T.u64)

__all__ = [
    "NVSHMEM_CMP_EQ", "NVSHMEM_CMP_GE", "NVSHMEM_CMP_GT", "NVSHMEM_CMP_LE", "NVSHMEM_CMP_LT", "NVSHMEM_CMP_NE",
    "NVSHMEM_SIGNAL_ADD", "NVSHMEM_SIGNAL_SET", "NvshmemFunction", "nvshmem_barrier_all", "nvshmem_fence",
    "nvshmem_my_pe", "nvshmem_n_pes", "nvshmem_ptr", "nvshmem_putmem_nbi", "nvshmem_quiet",
    "nvshmem_signal_wait_until", "nvshmem_uint64_atomic_add", "nvshmemx_putmem_nbi_block",
    "nvshmemx_putmem_nbi_warp", "nvshmemx_putmem_signal_nbi", "nvshmemx_putmem_signal_nbi_block",
    "nvshmemx_putmem_signal_nbi_warp", "nvshmemx_signal_op",
]
