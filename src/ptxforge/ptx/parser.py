"""A hand-written recursive-descent parser from PTX text to the IR in `ptx.ir`.

It knows PTX's grammar, not its opcodes: an instruction is a dotted mnemonic and operands, and the
ISA table decides what the mnemonic means. Every syntax error is collected (the parser resumes at
the next `;` or `}`) and raised together as one `PTXSyntaxError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from ptxforge.ptx import ir
from ptxforge.ptx.const_expr import ConstExprError, evaluate
from ptxforge.ptx.errors import Diagnostic, PTXSyntaxError
from ptxforge.ptx.isa.data_sreg import SPECIAL_REGISTERS as SREG_SPECS
from ptxforge.ptx.lexer import SourceText, tokenize
from ptxforge.ptx.literals import LiteralOverflow, immediate, int_value, join_tokens, unquote

SPECIAL_REGISTERS = frozenset(SREG_SPECS)  # the names the ISA table lists (ptx/isa/data_sreg.py)

# A `%r<N>` declaration names N registers; real kernels declare thousands at most. The bound keeps a
# typo or a hostile file from making the tools enumerate billions of names.
MAX_REGISTER_RANGE = 1 << 20

# How deep `{` blocks and bracketed or prefixed operands (`{..}`, `(..)`, `[..]`, `!`, `-`, `|`) may nest.
# Real PTX nests a few levels; the bound keeps the recursive descent (and every IR walker after it)
# far from Python's recursion limit on hostile input.
MAX_NESTING = 100

LINKAGES = frozenset((".visible", ".extern", ".weak", ".common"))
VAR_SPACES = frozenset((".global", ".const", ".shared", ".local", ".param", ".tex", ".reg"))
PERF_DIRECTIVES = frozenset(
    """.maxntid .reqntid .minnctapersm .maxnctapersm .maxnreg .reqnctapercluster .explicitcluster
    .maxclusterrank .noreturn .blocksareclusters .abi_preserve .abi_preserve_control""".split()
)


_span_at = ir.Span.at
_MNEMONICS: dict[str, tuple[str, tuple[str, ...]]] = {}  # 'ld.global.f32' -> ('ld', ('global', 'f32'))
_Register = ir.builder(ir.Register)
_Symbol = ir.builder(ir.Symbol)
_Instruction = ir.builder(ir.Instruction)
_Address = ir.builder(ir.Address)


Token = tuple[str, str, int]  # (kind, text, offset), as `lexer.tokenize` gives them
_UNARY = frozenset("-~!")  # unary operators that may open a constant expression operand


class _Recover(Exception):
    """Raised after recording a syntax error, to resume at the next statement."""


class Parser:
    """Parses one PTX text; use `parse()`."""

    def __init__(self, text: str, filename: str):
        self.src = SourceText(text)
        self.text = text
        self.file = filename
        self.errors: list[Diagnostic] = []
        self.toks = self._tokenize_outside_sections()
        self.toks += [("eof", "", len(text))] * 8  # sentinels: peek() never runs off the end
        self.i = 0
        self.depth = 0  # current nesting of blocks and operands, bounded by MAX_NESTING
        self.regs: set[str] = set()  # register names declared in the function being parsed
        self.paren_verdicts: dict[int, bool] = {}  # token index after a '(' -> parenthesized_constant()
        self.unary_verdicts: dict[int, bool] = {}  # token index in a run of unary operators -> a constant?
        self.layout: dict = {}  # id(node) -> (node, start, end[, head_end, close_start])

    # ------------------------------------------------------------------ tokens

    def _tokenize_outside_sections(self):
        """Tokens of the text, except DWARF `.section` bodies, which become one ('section', body) token."""
        text, out, pos = self.text, [], 0
        while True:
            k = text.find(".section", pos)
            if k < 0:
                out += tokenize(text, pos)
                return out
            out += tokenize(text, pos, k)
            ob = text.find("{", k)
            cb = text.find("}", ob + 1) if ob >= 0 else -1
            head = text[k + 8:ob] if ob >= 0 else ""
            if ob < 0 or cb < 0 or len(head.split()) != 1 or any(c in head for c in ";}{"):
                out.append(("word", ".section", k))  # malformed: let the parser report it
                pos = k + 8
                continue
            out.append(("section", head.strip(), k))
            out.append(("sectionbody", text[ob + 1:cb], ob + 1))
            out.append(("punct", "}", cb))
            pos = cb + 1

    def end_offset(self) -> int:
        """Offset just past the last consumed token."""
        t = self.toks[self.i - 1]
        return t[2] + len(t[1])

    def mark(self, node: Any, start: int, *extra: int) -> None:
        self.layout[id(node)] = (node, start, self.end_offset(), *extra)

    def peek(self, ahead: int = 0) -> Token:
        return self.toks[self.i + ahead]

    def next(self) -> Token:
        t = self.toks[self.i]
        if t[0] != "eof":
            self.i += 1
        return t

    def at(self, value: str) -> bool:
        return self.toks[self.i][1] == value

    def accept(self, value: str) -> bool:
        if self.toks[self.i][1] == value:
            self.i += 1
            return True
        return False

    def expect(self, value: str, what: str = "") -> Token:
        t = self.peek()
        if t[1] != value:
            self.fail(t, f"expected '{value}'{what}, found {self.describe(t)}")
        self.i += 1
        return t

    def span(self, tok: Token) -> ir.Span:
        return _span_at(self.file, self.src, tok[2])

    @staticmethod
    def describe(tok: Token) -> str:
        kind, val, _ = tok
        if kind == "eof":
            return "end of file"
        return f"'{val}'" if len(val) <= 40 else f"'{val[:37]}...'"

    def fail(self, tok: Token, message: str) -> NoReturn:
        line, col = self.src.line_col(tok[2])
        self.errors.append(Diagnostic(self.file, line, col, message, source_line=self.src.line_text(line)))
        raise _Recover

    def recover(self, stop_at_brace: bool = True) -> None:
        """Skip to just after the next ';' (or stop before a '}' that closes the current scope)."""
        depth = 0
        while True:
            kind, val, _ = self.peek()
            if kind == "eof":
                return
            if val == "{":
                depth += 1
            elif val == "}":
                if depth == 0:
                    if stop_at_brace:
                        return
                else:
                    depth -= 1
            elif val == ";" and depth == 0:
                self.i += 1
                return
            self.i += 1

    def word(self, what: str) -> Token:
        t = self.peek()
        if t[0] != "word":
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        self.i += 1
        return t

    def integer(self, what: str = "an integer") -> int:
        neg = self.accept("-")
        t = self.peek()
        if t[0] != "num":
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        v = self.int_literal(t)
        if v is None:
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        self.i += 1
        return -v if neg else v

    def int_literal(self, tok: Token) -> int | None:
        """The value of an integer literal token, None for another number; an error past 64 bits."""
        try:
            return int_value(tok[1])
        except LiteralOverflow as e:
            self.fail(tok, str(e))

    def literal(self, tok: Token, span_tok: Token) -> ir.Immediate | None:
        """The Immediate of a number token (spanning from `span_tok`), None when malformed."""
        try:
            return immediate(tok[1], self.span(span_tok))
        except LiteralOverflow as e:
            self.fail(tok, str(e))

    def nest(self, tok: Token) -> None:
        """Enter one nesting level at `tok`; the caller leaves it with `self.depth -= 1`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            if self.toks[self.i - 1] is tok:
                self.i -= 1  # leave the bracket to recover(), which skips the group it opens
            self.fail(tok, self.too_deep())

    @staticmethod
    def too_deep() -> str:
        return f"nesting deeper than {MAX_NESTING} levels (blocks, braces, brackets, '!', '-', '|')"

    def nested_operand(self, tok: Token) -> Any:
        self.nest(tok)
        op = self.parse_operand()
        self.depth -= 1
        return op

    # ------------------------------------------------------------------ module

    def parse_module(self) -> ir.Module:
        version, target, address_size = (0, 0), None, None
        items: list = []
        header = 0  # ptxas's order: 0 nothing yet, 1 after .version, 2 after .target, 3 after the header
        while self.peek()[0] != "eof":
            start = self.i
            self.depth = 0
            try:
                tok = self.peek()
                val = tok[1]
                if val == ".version":
                    self.i += 1
                    if header:
                        self.fail(tok, "a second .version directive (a module has one, at its start)")
                    version = self.parse_version()
                    header = 1
                    self.layout["version"] = (version, tok[2], self.end_offset())
                elif val == ".target":
                    self.i += 1
                    if header != 1:
                        self.fail(tok, "a second .target directive" if header else
                                  "missing .version directive before .target (a module starts with .version)")
                    target = self.parse_target(tok)
                    header = 2
                    self.layout["target"] = (target, tok[2], self.end_offset())
                elif val == ".address_size":
                    self.i += 1
                    if header != 2:
                        self.fail(tok, ".address_size must come once, right after .target")
                    address_size = self.integer("an address size")
                    if address_size not in (32, 64):
                        self.fail(tok, f".address_size must be 32 or 64, not {address_size}")
                    header = 3
                    self.layout["address_size"] = (address_size, tok[2], self.end_offset())
                else:
                    if header < 2:
                        self.fail_soft(tok, "missing .target directive after .version" if header else
                                       "missing .version directive (every PTX module starts with one)")
                    header = 3
                    item = self.parse_toplevel()
                    if type(item) is not ir.Function:  # functions mark themselves
                        self.mark(item, tok[2])
                    items.append(item)
            except _Recover:
                if self.i == start and self.toks[self.i][0] != "eof":
                    self.i += 1
                self.recover(stop_at_brace=False)
                if self.at("}"):
                    self.i += 1
        if version == (0, 0) and not self.errors:
            self.fail_soft(("", "", 0), "missing .version directive (every PTX module starts with one)")
        if target is None and not self.errors:
            self.fail_soft(("", "", 0), "missing .target directive")
        if self.errors:
            raise PTXSyntaxError(self.errors)
        assert target is not None  # reported above when missing
        return ir.Module(version, target, address_size, tuple(items), filename=self.file,
                         source=self.text, layout=self.layout)

    def fail_soft(self, tok: Token, message: str) -> None:
        try:
            self.fail(tok, message)
        except _Recover:
            pass

    def parse_version(self) -> tuple[int, int]:
        t = self.peek()
        if t[0] != "num" or "." not in t[1] or not t[1].replace(".", "").isdigit() or len(t[1]) > 12:
            self.fail(t, f"expected a version like 8.5, found {self.describe(t)}")
        self.i += 1
        major, minor = t[1].split(".")
        return int(major), int(minor or 0)

    def parse_target(self, tok: Token) -> ir.Target:
        names = [self.word("a target such as sm_90a")[1]]
        while self.accept(","):
            names.append(self.word("a target")[1])
        return ir.Target(tuple(names), self.span(tok))

    def parse_toplevel(self) -> Any:
        tok = self.peek()
        kind, val, _ = tok
        if kind == "section":
            self.i += 1
            lines = tuple(ln.strip() for ln in self.next()[1].split("\n") if ln.strip())
            self.i += 1
            return ir.Section(val, lines, self.span(tok))
        if val == ".file":
            self.i += 1
            return self.parse_file_directive(tok)
        if val == ".pragma":
            self.i += 1
            return self.parse_pragma(tok)
        linkage = None
        if val in LINKAGES:
            linkage = val
            self.i += 1
            val = self.peek()[1]
        if val in (".entry", ".func"):
            return self.parse_function(linkage, tok)
        if val in VAR_SPACES or val == ".align" or val.startswith(".attribute"):
            var = self.parse_variable(linkage, tok)
            self.expect(";", " after the variable declaration")
            return var
        self.fail(self.peek(), f"expected a directive, .entry, .func or a variable, found {self.describe(self.peek())}")

    def parse_file_directive(self, tok: Token) -> ir.FileDirective:
        index = self.integer("a file index")
        t = self.peek()
        if t[0] != "str":
            self.fail(t, f"expected a quoted file name, found {self.describe(t)}")
        self.i += 1
        extra = []
        while self.accept(","):
            extra.append(str(self.integer("a timestamp or size")))
        return ir.FileDirective(index, unquote(t[1]), ", ".join(extra), self.span(tok))

    def parse_pragma(self, tok: Token) -> ir.Pragma:
        parts = []
        while True:
            t = self.peek()
            if t[0] != "str":
                self.fail(t, f"expected a quoted pragma, found {self.describe(t)}")
            self.i += 1
            parts.append(t[1])
            if not self.accept(","):
                break
        self.expect(";", " after .pragma")
        return ir.Pragma(", ".join(parts), self.span(tok))

    # ------------------------------------------------------------------ functions

    def parse_function(self, linkage: str | None, start_tok: Token) -> ir.Function:
        kind = self.next()[1][1:]
        returns: tuple = ()
        if kind == "func" and self.at("("):
            returns = self.parse_params()
        name = self.word("a function name")[1]
        self.regs = set()
        popen = self.peek()[2]
        params = self.parse_params() if self.at("(") else ()
        pclose = self.toks[self.i - 1][2] if params else popen
        directives: list[tuple[str, tuple[Any, ...]]] = []  # numbers; a .pragma's text
        while self.peek()[1] in PERF_DIRECTIVES or self.peek()[1] == ".pragma":
            d = self.next()
            if d[1] == ".pragma":
                pr = self.parse_pragma(d)
                directives.append((".pragma", (pr.text,)))
                continue
            nums = []
            if self.peek()[0] == "num":
                nums.append(self.integer())
                while self.accept(","):
                    nums.append(self.integer())
            directives.append((d[1], tuple(nums)))
        for p in params + returns:
            if p.space == ".reg":
                self.declare_registers((p.name,), p.vector)
        head_end = close = 0
        if self.accept(";"):
            body = None
        else:
            self.expect("{", f" to open the body of {name}")
            head_end = self.end_offset()
            body = self.parse_body()
            close = self.toks[self.i - 1][2]
        self.regs = set()
        f = ir.Function(kind, name, params, returns, linkage, tuple(directives), body, self.span(start_tok))
        self.mark(f, start_tok[2], head_end, close, popen, pclose)
        return f

    def parse_params(self) -> tuple[ir.Param, ...]:
        self.expect("(")
        params = []
        if self.accept(")"):
            return ()
        while True:
            params.append(self.parse_param())
            if self.accept(")"):
                return tuple(params)
            self.expect(",", " or ')' between parameters")

    def parse_param(self) -> ir.Param:
        tok = self.peek()
        space = self.word("'.param' or '.reg'")[1]
        if space not in (".param", ".reg"):
            self.fail(tok, f"expected '.param' or '.reg', found '{space}'")
        ty = align = ptr_space = ptr_align = vector = None
        ptr = False
        while True:
            t = self.peek()
            v = t[1]
            if v == ".align":
                self.i += 1
                if ptr:
                    ptr_align = self.integer("an alignment")
                else:
                    align = self.integer("an alignment")
            elif v == ".ptr":
                self.i += 1
                ptr = True
            elif v in ir.ALL_TYPES:
                self.i += 1
                ty = v
            elif v in (".v2", ".v4", ".v8"):
                self.vector_before_type(t, ty)
                self.i += 1
                vector = int(v[2:])
            elif ptr and v in (".global", ".shared", ".const", ".local", ".shared::cta", ".shared::cluster"):
                self.i += 1
                ptr_space = v
            else:
                break
        if ty is None:
            self.fail(self.peek(), f"expected a parameter type, found {self.describe(self.peek())}")
        name = self.word("a parameter name")
        array = self.parse_dims()
        return ir.Param(space, ty, name[1], array, align, ptr_space, ptr_align, vector, self.span(name))

    def vector_before_type(self, tok: Token, ty: str | None) -> None:
        if ty is not None:  # ptxas: a syntax error
            self.fail(tok, f"'{tok[1]}' must come before the type: write {tok[1]} {ty}")

    def parse_dims(self) -> tuple:
        dims: list[int | None] = []
        while self.accept("["):
            if self.accept("]"):
                dims.append(None)
                continue
            dims.append(self.integer("an array size"))
            self.expect("]")
        return tuple(dims)

    # ------------------------------------------------------------------ bodies

    def parse_body(self) -> tuple:
        """Statements up to and including the closing '}'."""
        out: list[Any] = []
        toks, layout = self.toks, self.layout
        while True:
            tok = toks[self.i]
            kind, val, off = tok
            if val == "}":
                self.i += 1
                return tuple(out)
            if kind == "eof":
                self.fail(tok, "unexpected end of file: missing '}'")
            start, depth = self.i, self.depth
            try:
                if kind == "word" and val[0] not in ".%$" and toks[start + 1][1] != ":":
                    st = self.parse_instruction(None, tok)  # the common case, straight to the instruction
                    out.append(st)
                    last = toks[self.i - 1]
                    layout[id(st)] = (st, off, last[2] + len(last[1]))
                    continue
                st = self.parse_statement(tok)
                if type(st) is list:
                    out.extend(st)
                    for d in st:
                        self.mark(d, tok[2])
                elif st is not None:
                    out.append(st)
                    if type(st) is ir.Block:
                        self.mark(st, tok[2], tok[2] + 1, self.toks[self.i - 1][2])
                    else:
                        self.mark(st, tok[2])
            except _Recover:
                self.depth = depth
                if self.i == start and self.toks[self.i][0] != "eof":
                    self.i += 1
                self.recover()

    def parse_statement(self, tok: Token) -> Any:
        kind, val, _ = tok
        if kind == "word":
            nxt = self.peek(1)[1]
            if nxt == ":" and not val.startswith("."):
                self.i += 2
                if self.peek()[1] == ".callprototype":
                    return self.parse_prototype(tok)
                if self.peek()[1] in (".branchtargets", ".calltargets"):
                    return self.parse_target_list(tok)
                return ir.Label(val, self.span(tok))
            if val[0] == ".":
                return self.parse_body_directive(tok)
            return self.parse_instruction(None, tok)
        if val == "@":
            return self.parse_instruction(self.parse_guard(), tok)
        if val == "{":
            self.i += 1
            if self.depth >= MAX_NESTING:  # report it, then skip the whole block
                self.fail_soft(tok, self.too_deep())
                self.recover()
                while self.peek()[0] != "eof" and not self.accept("}"):
                    self.recover()
                return None
            self.depth += 1
            block = ir.Block(self.parse_body(), self.span(tok))
            self.depth -= 1
            return block
        if val == ";":
            self.i += 1
            return None
        self.fail(tok, f"expected an instruction, label or directive, found {self.describe(tok)}")

    def parse_guard(self) -> ir.Guard:
        self.i += 1
        neg = self.accept("!")
        t = self.word("a predicate register after '@'")
        return ir.Guard(t[1], neg)

    def parse_body_directive(self, tok: Token) -> Any:
        val = tok[1]
        if val == ".reg":
            return self.parse_reg_decl(tok)
        if val == ".loc":
            self.i += 1
            return self.parse_loc(tok)
        if val == ".pragma":
            self.i += 1
            return self.parse_pragma(tok)
        if val in VAR_SPACES or val in LINKAGES or val == ".align":
            linkage = None
            if val in LINKAGES:
                linkage = val
                self.i += 1
            var = self.parse_variable(linkage, tok)
            self.expect(";", " after the variable declaration")
            return var
        self.fail(tok, f"unknown directive '{val}' in a function body")

    def parse_reg_decl(self, tok: Token) -> Any:
        self.i += 1
        ty = vector = align = None
        while True:
            v = self.peek()[1]
            if v in ir.ALL_TYPES:
                ty = v
            elif v in (".v2", ".v4", ".v8"):
                self.vector_before_type(self.peek(), ty)
                vector = int(v[2:])
            elif v == ".align":
                self.i += 1
                align = self.integer("an alignment")
                continue
            else:
                break
            self.i += 1
        if ty is None:
            self.fail(self.peek(), f".reg: expected a type, found {self.describe(self.peek())}")
        decls = []
        names: list[str] = []
        while True:
            name = self.word("a register name")[1]
            if self.accept("<"):
                count_tok = self.peek()
                count = self.integer("a register count")
                if not 0 < count <= MAX_REGISTER_RANGE:
                    self.fail(count_tok, f"register range {name}<{count}>: the count must be 1 to "
                                         f"{MAX_REGISTER_RANGE:,}")
                self.expect(">")
                decls.append(ir.RegisterDecl(ty, (name,), count, vector, align, self.span(tok)))
                self.declare_registers(decls[-1].declared(), vector)
            else:
                names.append(name)
                self.declare_registers((name,), vector)
            if not self.accept(","):
                break
        self.expect(";", " after the register declaration")
        if names:
            decls.append(ir.RegisterDecl(ty, tuple(names), None, vector, align, self.span(tok)))
        return decls[0] if len(decls) == 1 else decls

    def parse_loc(self, tok: Token) -> ir.Loc:
        f = self.integer("a file index")
        line = self.integer("a line number")
        col = self.integer("a column")
        # The optional tail `, function_name LABEL[+N], inlined_at FILE LINE COL` ends at the end of the
        # line, a ';', or after inlined_at's three numbers (a statement may follow on the same line).
        extra: list[str] = []
        eol = self.text.find("\n", tok[2])
        if eol < 0:
            eol = len(self.text)
        numbers = -1  # numbers still to take after inlined_at
        while self.at(",") if not extra else numbers != 0:
            t = self.peek()
            if t[1] == ";" or t[0] == "eof" or t[2] > eol or numbers > 0 and t[0] != "num":
                break
            extra.append(t[1])
            self.i += 1
            numbers = 3 if t[1] == "inlined_at" else numbers - (numbers > 0)
        return ir.Loc(f, line, col, join_tokens(extra), self.span(tok))

    def parse_target_list(self, tok: Token) -> ir.TargetList:
        directive = self.next()[1]
        targets = [self.word("a label")[1]]
        while self.accept(","):
            targets.append(self.word("a label")[1])
        self.expect(";", f" after {directive}")
        return ir.TargetList(tok[1], directive, tuple(targets), self.span(tok))

    def parse_prototype(self, tok: Token) -> ir.CallPrototype:
        parts = []
        while not self.at(";"):
            t = self.next()
            if t[0] == "eof":
                self.fail(t, "unexpected end of file in .callprototype")
            parts.append(t[1])
        self.i += 1
        return ir.CallPrototype(tok[1], join_tokens(parts), self.span(tok))

    # ------------------------------------------------------------------ variables

    def parse_variable(self, linkage: str | None, start_tok: Token) -> ir.Variable:
        space = ty = align = vector = None
        attributes = []
        while True:
            t = self.peek()
            v = t[1]
            if v in VAR_SPACES and space is None:
                space = v
            elif v == ".align":
                self.i += 1
                align = self.integer("an alignment")
                continue
            elif v in ir.ALL_TYPES:
                ty = v
            elif v in (".v2", ".v4", ".v8"):
                self.vector_before_type(t, ty)
                vector = int(v[2:])
            elif v == ".attribute":
                self.i += 1
                attributes.append(".attribute" + self.balanced_text("(", ")"))
                continue
            elif v == ".ptr" or (space == ".param" and v.startswith(".") and t[0] == "word" and ty is None):
                attributes.append(v)
            else:
                break
            self.i += 1
        if space is None:
            self.fail(start_tok, "expected a state space (.global, .shared, .const, .local, .param)")
        if ty is None:
            self.fail(self.peek(), f"{space}: expected a type, found {self.describe(self.peek())}")
        name = self.word("a variable name")
        if space == ".reg":
            self.declare_registers((name[1],), vector)
        array = self.parse_dims()
        init = None
        if self.accept("="):
            init = self.parse_initializer()
        return ir.Variable(space, ty, name[1], array, align, vector, linkage, init, tuple(attributes),
                           self.span(name))

    def balanced_text(self, open_: str, close: str) -> str:
        parts, depth = [], 0
        while True:
            t = self.next()
            if t[0] == "eof":
                self.fail(t, f"unexpected end of file: missing '{close}'")
            parts.append(t[1])
            if t[1] == open_:
                depth += 1
            elif t[1] == close:
                depth -= 1
                if depth == 0:
                    return join_tokens(parts)

    def parse_initializer(self) -> ir.Expr:
        t0 = self.peek()
        parts, depth = [], 0
        while True:
            t = self.peek()
            if t[0] == "eof":
                self.fail(t, "unexpected end of file in an initializer")
            if depth == 0 and t[1] == ";":
                break
            if t[1] in "{(":
                depth += 1
            elif t[1] in "})":
                depth -= 1
            parts.append(t[1])
            self.i += 1
        if not parts:
            self.fail(t0, "expected an initializer after '='")
        return ir.Expr(join_tokens(parts), self.span(t0))

    # ------------------------------------------------------------------ instructions

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
        return _Instruction(split[0], split[1], tuple(operands), guard, self.span(start_tok))

    def parse_operand(self) -> Any:
        tok = self.toks[self.i]
        kind, val, off = tok
        if kind == "word":
            self.i += 1
            if val[0] == "%" and val in self.regs:
                op = _Register(val, _span_at(self.file, self.src, off))
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


def parse(text: str, filename: str = "<string>") -> ir.Module:
    """Parse PTX text into a `Module`; raises `PTXSyntaxError` listing every syntax error."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes PTX text as str, not {type(text).__name__}")
    return Parser(text, filename).parse_module()


def parse_file(path: str | Path) -> ir.Module:
    """Parse the PTX file at `path`."""
    p = Path(path)
    return parse(p.read_text(encoding="utf-8", errors="surrogateescape"), filename=str(path))
