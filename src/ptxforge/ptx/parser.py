"""A hand-written recursive-descent parser from PTX text to the IR in `ptx.ir`.

It knows PTX's grammar, not its opcodes: an instruction is a dotted mnemonic and operands, and the
ISA table decides what the mnemonic means. Every syntax error is collected (the parser resumes at
the next `;` or `}`) and raised together as one `PTXSyntaxError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptxforge.ptx import ir
from ptxforge.ptx.errors import PTXSyntaxError
from ptxforge.ptx.literals import join_tokens, unquote
from ptxforge.ptx.parser_operands import SPECIAL_REGISTERS, OperandParser
from ptxforge.ptx.parser_tokens import MAX_NESTING, Token, _Recover

# (the parser's parts: parser_tokens.py, the token cursor; parser_operands.py, instructions and operands)
__all__ = ["LINKAGES", "MAX_NESTING", "MAX_REGISTER_RANGE", "PERF_DIRECTIVES", "SPECIAL_REGISTERS", "VAR_SPACES",
           "Parser", "parse", "parse_file"]

# A `%r<N>` declaration names N registers; real kernels declare thousands at most. The bound keeps a
# typo or a hostile file from making the tools enumerate billions of names.
MAX_REGISTER_RANGE = 1 << 20

LINKAGES = frozenset((".visible", ".extern", ".weak", ".common"))
VAR_SPACES = frozenset((".global", ".const", ".shared", ".local", ".param", ".tex", ".reg"))
PERF_DIRECTIVES = frozenset(
    """.maxntid .reqntid .minnctapersm .maxnctapersm .maxnreg .reqnctapercluster .explicitcluster
    .maxclusterrank .noreturn .blocksareclusters .abi_preserve .abi_preserve_control""".split()
)


class Parser(OperandParser):
    """Parses one PTX text; use `parse()`."""

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
        flat = self.flat_initializer()
        if flat is not None:
            return ir.Expr(flat, self.span(t0))
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

    def flat_initializer(self) -> str | None:
        """The canonical text of an initializer `{a, b, ..., z}` of single tokens (the tables compilers write,
        up to a million tokens) found without a Python step per token; None for any other initializer, which
        `parse_initializer` reads token by token (to the same result)."""
        texts = self.texts()
        i = self.i
        try:
            j = texts.index(";", i)
        except ValueError:
            return None
        n = j - i
        if n < 3 or n % 2 == 0 or texts[i] != "{" or texts[j - 1] != "}":
            return None
        commas, items = texts[i + 2:j - 1:2], texts[i + 1:j - 1:2]
        if commas.count(",") != len(commas) or not _NOT_AN_ITEM.isdisjoint(items):
            return None
        self.i = j
        return "{" + ", ".join(items) + "}"

# Token texts that change an initializer's nesting or its canonical spacing (`in "{("` also holds for "" and
# "{(", which only a section body could be), so `flat_initializer` leaves an initializer holding one to the loop.
_NOT_AN_ITEM = frozenset({",", ";", "{", "}", "(", ")", "", "{(", "})"})


def parse(text: str, filename: str = "<string>") -> ir.Module:
    """Parse PTX text into a `Module`; raises `PTXSyntaxError` listing every syntax error."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes PTX text as str, not {type(text).__name__}")
    return Parser(text, filename).parse_module()


def parse_file(path: str | Path) -> ir.Module:
    """Parse the PTX file at `path`."""
    p = Path(path)
    return parse(p.read_text(encoding="utf-8", errors="surrogateescape"), filename=str(path))
