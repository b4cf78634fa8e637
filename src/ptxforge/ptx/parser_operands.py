"""The parser's instructions and operands: registers, immediates and constant expressions (folded as
ptxas folds them), addresses, vectors, predicate pairs. Part of `parser.Parser`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptxforge.ptx import ir
from ptxforge.ptx.const_expr import ConstExprError, evaluate
from ptxforge.ptx.isa.data_sreg import SPECIAL_REGISTERS as SREG_SPECS
from ptxforge.ptx.literals import join_tokens
from ptxforge.ptx.parser_tokens import MAX_NESTING, Token, TokenCursor, _span_at

SPECIAL_REGISTERS = frozenset(SREG_SPECS)  # the names the ISA table lists (ptx/isa/data_sreg.py)
_MNEMONICS: dict[str, tuple[str, tuple[str, ...]]] = {}  # 'ld.global.f32' -> ('ld', ('global', 'f32'))
_Register = ir.builder(ir.Register)
_Symbol = ir.builder(ir.Symbol)
_Instruction = ir.builder(ir.Instruction)
_Address = ir.builder(ir.Address)
_UNARY = frozenset("-~!")  # unary operators that may open a constant expression operand


class OperandParser(TokenCursor):
    """Instructions and their operands (the base of `Parser`)."""

    def nested_operand(self, tok: Token) -> Any:
        self.nest(tok)
        op = self.parse_operand()
        self.depth -= 1
        return op

    def parse_instruction(self, guard: ir.Guard | None, start_tok: Token) -> ir.Instruction:
        t = self.peek()
        if t[0] != "word" or t[1][0] in ".%$":
            self.fail(t, f"expected an instruction, found {self.describe(t)}")
        self.i += 1
        split = _MNEMONICS.get(t[1])
        if split is None:
            parts = t[1].split(".")
            if "" in parts:
                self.fail(t, f"malformed instruction name '{t[1]}'")
            if len(_MNEMONICS) > 50_000:  # a bound for hostile input; real code has a few hundred
                _MNEMONICS.clear()
            split = _MNEMONICS[t[1]] = (parts[0], tuple(parts[1:]))
        operands = []
        toks = self.toks
        if toks[self.i][1] != ";":
            parse_operand = self.parse_operand
            while True:
                operands.append(parse_operand())
                if toks[self.i][1] != ",":
                    break
                self.i += 1
        if toks[self.i][1] != ";":
            self.fail(self.peek(), f"expected ',' or ';' after an operand of {t[1]}, found "
                                   f"{self.describe(self.peek())}")
        self.i += 1
        return _Instruction(split[0], split[1], tuple(operands), guard, _span_at(self.file, self.src, start_tok[2]))

    def parse_operand(self) -> Any:
        tok = self.toks[self.i]
        kind, val, off = tok
        if kind == "word":
            self.i += 1
            if val[0] == "%" and val in self.regs:
                op = _Register(val, _span_at(self.file, self.src, off))
                nxt = self.toks[self.i][1]
                if nxt != "|" and nxt != "+":  # the common case: a register alone
                    return op
            else:
                op = self.name_operand(tok)
            if isinstance(op, ir.Immediate) and self.binary_operator_follows():  # WARP_SZ-1
                return self.const_expr(tok)
            nxt = self.toks[self.i][1]
            if nxt == "|":
                self.i += 1
                second = self.nested_operand(tok)
                return ir.PredPair(op, second, self.span(tok))
            if nxt in "+-" and nxt and isinstance(op, ir.Symbol):
                return self.expr_rest(tok, [val])
            if nxt == "+" and isinstance(op, ir.Register):
                offset = 0
                while self.accept("+"):
                    offset += self.integer("an integer after '+'")
                return ir.RegisterOffset(op, offset, self.span(tok))
            return op
        if kind == "num":
            self.i += 1
            imm = self.literal(tok, tok) or self.fail(tok, f"malformed number '{val}'")
            if isinstance(imm.value, int) and self.binary_operator_follows():  # 4*2, (1<<5)|3 ...
                return self.const_expr(tok)
            return imm
        if val == "-":
            nxt = self.peek(1)
            if nxt[0] == "num":
                self.i += 2
                num = self.literal(nxt, tok)
                if num is None:
                    self.fail(nxt, f"malformed number '{nxt[1]}'")
                v = num.value
                if isinstance(v, int) and self.binary_operator_follows():  # -7/2
                    return self.const_expr(tok)
                return ir.Immediate(-v if v != 0 or isinstance(v, int) else -0.0, "-" + nxt[1], self.span(tok))
            if nxt[0] == "word" and nxt[1].startswith("%"):
                self.i += 1
                return ir.Minus(self.nested_operand(tok), self.span(tok))
        if val in _UNARY and self.unary_constant_follows():  # ~0&255, -(1<<4), !0: folded as ptxas folds them
            self.i += 1
            return self.const_expr(tok)
        if val == "!":
            self.i += 1
            return ir.Negated(self.nested_operand(tok), self.span(tok))
        if val == "[":
            return self.parse_address(tok)
        if val == "{":
            self.i += 1
            return ir.Vector(self.operand_list("}"), self.span(tok))
        if val == "(":
            self.i += 1
            if self.parenthesized_constant():  # (1<<5)|3, not a call's argument list
                return self.const_expr(tok)
            return ir.ParenList(self.operand_list(")"), self.span(tok))
        self.fail(tok, f"expected an operand, found {self.describe(tok)}")

    _BINARY = frozenset("+-*/&|^<>=!")

    def binary_operator_follows(self) -> bool:
        t = self.toks[self.i]
        return t[0] == "punct" and t[1] in self._BINARY and not (t[1] == "!" and self.peek(1)[1] != "=")

    def unary_constant_follows(self) -> bool:
        """Whether the run of unary operators at the current token leads to a number or a parenthesized
        constant (a constant expression), not to a register (`-%r1`, `!%p1`). One scan settles the run."""
        j = self.i
        known = self.unary_verdicts.get(j)
        if known is not None:
            return known
        k = j
        while self.toks[k][1] in _UNARY:
            k += 1
        kind, val, _ = self.toks[k]
        verdict = kind == "num" or val == "WARP_SZ" or (val == "(" and self.parenthesized_constant(k + 1))
        for m in range(j, k):
            self.unary_verdicts[m] = verdict
        return verdict

    def parenthesized_constant(self, j: int | None = None) -> bool:
        """Whether the tokens after an opening '(' (consumed, or at `j - 1`) up to its ')' are integer
        arithmetic alone.

        One scan also settles every '(' nested inside (kept in `paren_verdicts`), so that nested parentheses
        cost one scan, not one each."""
        j = self.i if j is None else j
        known = self.paren_verdicts.get(j)
        if known is not None:
            return known
        verdicts = self.paren_verdicts
        opens = [(j, 0)]  # (the token after a '(', the numbers seen before it)
        numbers = 0
        while True:
            kind, val, _ = self.toks[j]
            if kind == "eof" or val in (",", ";", "{", "}", "[", "]"):
                break
            if val == ")":
                start, before = opens.pop()
                verdicts[start] = numbers > before
                if not opens:
                    return verdicts[start]
            elif val == "(":
                opens.append((j + 1, numbers))
            elif kind == "num" or val == "WARP_SZ":
                numbers += 1
            elif not (kind == "punct" and (val in self._BINARY or val == "~")):
                break
            j += 1
        for start, _ in opens:
            verdicts[start] = False
        return False

    def const_expr(self, first: Token) -> Any:
        """An integer constant expression starting at token `first` (already consumed, perhaps with some tokens
        after it), folded as ptxas folds it; the Immediate keeps the expression's text, so it prints back as
        written."""
        while self.toks[self.i - 1][2] != first[2]:  # back to `first`
            self.i -= 1
        self.i -= 1
        items: list = []
        depth = 0
        while True:
            t = self.toks[self.i]
            if t[0] == "eof" or t[1] in (",", ";", "}", "]") or (t[1] == ")" and depth == 0):
                break
            depth += {"(": 1, ")": -1}.get(t[1], 0)
            items.append(t)
            self.i += 1
        values: list = []
        where: list[Token] = []  # the token each entry of `values` came from
        prev_end = -1
        for t in items:
            if t[0] == "num":
                v = self.int_literal(t)
                if v is None:
                    self.fail(t, f"'{t[1]}' in a constant expression: only integers fold")
                values.append(v)
            elif t[1] == "WARP_SZ":
                values.append(32)
            elif t[0] == "punct" and values and isinstance(values[-1], str) and t[2] == prev_end \
                    and values[-1] + t[1] in ("<<", ">>", "<=", ">=", "==", "!=", "&&", "||"):
                values[-1] += t[1]  # two adjacent characters of one operator
                prev_end = t[2] + len(t[1])
                continue
            elif t[0] == "punct":
                values.append(t[1])
            else:
                self.fail(t, f"'{t[1]}' cannot appear in a constant expression")
            where.append(t)
            prev_end = t[2] + len(t[1])
        try:
            value = evaluate(values, MAX_NESTING)
        except ConstExprError as e:
            self.fail(where[e.index] if e.index is not None and e.index < len(where) else first, str(e))
        last = items[-1]
        return ir.Immediate(value, self.src.text[first[2]:last[2] + len(last[1])], self.span(first))

    def operand_list(self, close: str) -> tuple:
        items = []
        if self.accept(close):
            return ()
        self.nest(self.toks[self.i - 1])
        while True:
            items.append(self.parse_operand())
            if self.accept(close):
                self.depth -= 1
                return tuple(items)
            self.expect(",", f" or '{close}'")

    def declare_registers(self, names: Iterable[str], vector: int | None) -> None:
        """Register names an operand may use: a vector register's elements too (`v.x`, `v.r`, ...), so they
        are registers with or without a `%`."""
        for name in names:
            self.regs.add(name)
            if vector:
                self.regs.update(ir.vector_elements(name, vector))
                self.regs.update(f"{name}.{a}" for a in ir.VECTOR_COMPONENT_ALIASES[:vector])

    def name_operand(self, tok: Token) -> Any:
        val = tok[1]
        if val == "_":
            return ir.Sink(self.span(tok))
        if val[0] == "%":
            base = val.split(".", 1)[0]
            if base in SPECIAL_REGISTERS and val not in self.regs:
                return ir.SpecialRegister(val, self.span(tok))
            return _Register(val, self.span(tok))
        if val in self.regs:
            return _Register(val, self.span(tok))
        if val[0] == ".":
            self.fail(tok, f"expected an operand, found '{val}'")
        if val == "WARP_SZ":  # PTX's predefined constant (nvcc writes CUDA's warpSize as it)
            return ir.Immediate(32, val, self.span(tok))
        return _Symbol(val, self.span(tok))

    def expr_rest(self, tok: Token, parts: list[str]) -> Any:
        while self.peek()[1] in ("+", "-"):
            parts.append(self.next()[1])
            parts.append(str(self.integer("an offset")))
        return ir.Expr(join_tokens(parts), self.span(tok))

    def parse_address(self, tok: Token) -> Any:
        self.i += 1
        first = self.peek()
        if first[0] == "word" and self.peek(1)[1] in ("]", "+", "-"):
            self.i += 1
            base = self.name_operand(first)
            if not isinstance(base, ir.Register | ir.Symbol):
                self.fail(first, f"'{first[1]}' cannot be an address base")
            offset, written = 0, False
            while self.peek()[1] in ("+", "-"):
                sign = -1 if self.next()[1] == "-" else 1
                offset += sign * self.integer("an address offset")
                written = True
            self.expect("]", " to close the address")
            return _Address(base, offset, written, self.span(tok))
        if first[0] == "num" or first[1] == "-":
            offset = self.integer("an address")
            while self.peek()[1] in ("+", "-"):
                sign = -1 if self.next()[1] == "-" else 1
                offset += sign * self.integer("an address offset")
            self.expect("]", " to close the address")
            return ir.Address(None, offset, False, self.span(tok))
        items = self.operand_list("]")
        if not items:
            self.fail(tok, "empty address '[]'")
        return ir.AddressList(items, self.span(tok))
