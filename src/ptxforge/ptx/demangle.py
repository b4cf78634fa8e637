"""C++ names of kernels: a small Itanium-ABI demangler for the names CUDA kernels get.

`demangle("_Z5scaleIfEvPT_S0_i")` is `"scale<float>(float*, float, int)"`; `signature(...)` gives the parts
(`CppSignature`: the qualified name with its template arguments and each parameter's `CppType`), which is
what the launch checks read pointee types from. It covers what `__global__` functions are made of:
namespaces, builtin and class types, pointers, references, cv-qualifiers, template arguments (types and
integer literals), template parameters and substitutions. Anything else (operators, lambdas' closure
types, expressions in template arguments) raises `DemangleError`, and `demangle` then returns the name as
it was: a report shows the mangled name rather than a wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ptxforge.errors import Error

BUILTIN = {
    "v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
    "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long",
    "x": "long long", "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float",
    "d": "double", "e": "long double", "g": "__float128", "z": "...", "w": "wchar_t",
}
BUILTIN_D = {"h": "half", "s": "char16_t", "i": "char32_t", "u": "char8_t", "n": "decltype(nullptr)"}
_LITERAL_SUFFIX = {"unsigned int": "u", "long": "l", "unsigned long": "ul", "long long": "ll",
                   "unsigned long long": "ull"}
STD_ABBREV = {"a": "std::allocator", "b": "std::basic_string", "s": "std::string", "i": "std::istream",
              "o": "std::ostream", "d": "std::iostream"}


class DemangleError(Error, ValueError):
    """The name is not a mangled name this demangler understands."""


@dataclass(frozen=True)
class CppType:
    """A C++ type: `kind` is builtin | class | pointer | lvalue-ref | rvalue-ref | const | volatile | restrict |
    function | literal (a template argument's value); `inner` the type a pointer, reference or qualifier
    applies to, or a function type's return type."""

    kind: str
    name: str = ""
    inner: CppType | None = None
    params: tuple[CppType, ...] = ()  # a function type's parameters (its `inner` is the return type)

    def __str__(self) -> str:
        if self.kind in ("builtin", "class", "literal"):
            return self.name
        if self.kind == "function":
            return f"{self.inner} ({', '.join(str(p) for p in self.params)})"
        assert self.inner is not None
        suffix = {"pointer": "*", "lvalue-ref": "&", "rvalue-ref": "&&", "const": " const",
                  "volatile": " volatile", "restrict": " __restrict__"}[self.kind]
        return f"{self.inner}{suffix}"

    def unqualified(self) -> CppType:
        """The type without top-level const/volatile/restrict."""
        t = self
        while t.kind in ("const", "volatile", "restrict") and t.inner is not None:
            t = t.inner
        return t

    def pointee(self) -> CppType | None:
        """What a pointer (or reference) points to, without its qualifiers; None for other types."""
        t = self.unqualified()
        if t.kind in ("pointer", "lvalue-ref", "rvalue-ref") and t.inner is not None:
            return t.inner.unqualified()
        return None


@dataclass(frozen=True)
class CppSignature:
    """A demangled function: `name` with its template arguments (`scale<float>`), then its parameters."""

    name: str
    params: tuple[CppType, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(p) for p in self.params)})"


def demangle(symbol: str) -> str:
    """`scale<float>(float*, float, int)` for `_Z5scaleIfEvPT_S0_i`; a name that is not mangled (an
    `extern "C"` kernel) or that this demangler does not cover comes back unchanged."""
    try:
        if symbol.startswith("_ZZ"):  # a function's local static: _ZZ <function> E <name> [_ <discriminator>]
            p = _Parser(symbol)
            p.pos = 3
            owner = p.encoding(local=True)
            if not p.take("E"):
                raise p.fail("expected the end of a local name's function")
            return f"{owner}::{p.unqualified_name()}"
        return str(signature(symbol))
    except DemangleError:
        return symbol


def demangle_words(text: str) -> str:
    """`text` with every mangled name in it demangled (`__shared__ _ZZ4sum...E3buf` -> `__shared__ sum(...)::buf`)."""
    return re.sub(r"\b_Z\w+", lambda m: demangle(m.group(0)), text)


def short_name(symbol: str) -> str:
    """The C++ name without its parameter list (`scale<float>`); unmangled names unchanged."""
    try:
        return signature(symbol).name
    except DemangleError:
        return symbol


def template_arguments(symbol: str) -> tuple[CppType, ...]:
    """The template arguments of a mangled function template's name."""
    p = _Parser(symbol)
    if not symbol.startswith("_Z"):
        raise DemangleError(f"{symbol!r} is not a mangled C++ name")
    p.encoding()
    return tuple(p.template_args)


def signature(symbol: str) -> CppSignature:
    """The parts of a mangled function name; DemangleError if it is not one this demangler covers."""
    if not symbol.startswith("_Z"):
        raise DemangleError(f"{symbol!r} is not a mangled C++ name")
    return _Parser(symbol).encoding()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 2
        self.subs: list[CppType] = []  # substitution candidates, in order of appearance
        self.template_args: list[CppType] = []  # of the function itself (what T_ refers to)

    def fail(self, why: str) -> DemangleError:
        return DemangleError(f"{self.text}: {why} at offset {self.pos}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def take(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def number(self) -> int:
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise self.fail("expected a number")
        return int(self.text[start:self.pos])

    def seq_id(self, end: str = "_") -> int:
        """A base-36 index followed by `end` (empty means 0, `0_` means 1 ...)."""
        if self.take(end):
            return 0
        start = self.pos
        while self.peek() and (self.peek().isdigit() or self.peek().isupper()):
            self.pos += 1
        if not self.take(end) or start == self.pos - 1:
            raise self.fail("bad sequence id")
        return int(self.text[start:self.pos - 1], 36) + 1

    def encoding(self, local: bool = False) -> CppSignature:
        name, is_template = self.name()
        params: list[CppType] = []
        if is_template:  # a function template's mangled name carries its return type first
            self.type()
        while self.pos < len(self.text):
            if self.peek() == "." or local and self.peek() == "E":  # a clone suffix (.constprop.0), a local's end
                break
            params.append(self.type())
        if len(params) == 1 and params[0].kind == "builtin" and params[0].name == "void":
            params = []
        return CppSignature(name, tuple(params))

    def name(self) -> tuple[str, bool]:
        """(qualified name with template arguments, whether it ends in template arguments)."""
        if self.take("N"):
            while self.peek() in ("r", "V", "K"):
                self.pos += 1
            parts: list[str] = []
            is_template = False
            fresh = False  # whether the name so far is a new substitution candidate once it has a successor
            while not self.take("E"):
                if self.pos >= len(self.text):
                    raise self.fail("unterminated nested name")
                if fresh:
                    self.subs.append(CppType("class", "::".join(parts)))
                fresh, is_template = True, False
                if self.peek() == "I":
                    if not parts:
                        raise self.fail("template arguments without a name")
                    args = self.template_args_list()
                    self.template_args = args
                    parts[-1] += _args_text(args)
                    is_template = True
                elif self.take("St"):
                    parts.append("std")
                    fresh = False
                elif self.peek() == "S":
                    parts.append(str(self.substitution()))
                    fresh = False
                else:
                    parts.append(self.unqualified_name())
            return "::".join(parts), is_template
        if self.take("St"):
            base = "std::" + self.unqualified_name()
        else:
            base = self.unqualified_name()
        if self.peek() == "I":
            self.subs.append(CppType("class", base))
            args = self.template_args_list()
            self.template_args = args
            return base + _args_text(args), True
        return base, False

    def unqualified_name(self) -> str:
        if not self.peek().isdigit():
            raise self.fail("operators, constructors and unnamed types are not covered")
        n = self.number()
        ident = self.text[self.pos:self.pos + n]
        if len(ident) != n:
            raise self.fail("name runs past the end")
        self.pos += n
        return "(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident

    def template_args_list(self) -> list[CppType]:
        if not self.take("I"):
            raise self.fail("expected template arguments")
        args = []
        while not self.take("E"):
            if self.pos >= len(self.text):
                raise self.fail("unterminated template arguments")
            args.append(self.template_arg())
        return args

    def template_arg(self) -> CppType:
        if self.take("L"):
            t = self.type()
            negative = self.take("n")
            value = self.number()
            if not self.take("E"):
                raise self.fail("expected the end of a literal")
            text = str(-value if negative else value)
            if t.name == "bool":
                text = "true" if value else "false"
            elif t.name in _LITERAL_SUFFIX:
                text += _LITERAL_SUFFIX[t.name]
            elif t.name != "int":
                text = f"({t}){text}"
            return CppType("literal", text)
        if self.take("J"):  # an argument pack
            inner = []
            while not self.take("E"):
                inner.append(self.template_arg())
            return CppType("literal", ", ".join(str(t) for t in inner))
        return self.type()

    def substitution(self) -> CppType:
        if not self.take("S"):
            raise self.fail("expected a substitution")
        if self.peek() in STD_ABBREV and self.peek() != "":
            c = self.peek()
            self.pos += 1
            return CppType("class", STD_ABBREV[c])
        i = self.seq_id()
        if i >= len(self.subs):
            raise self.fail(f"substitution {i} of {len(self.subs)}")
        return self.subs[i]

    def type(self) -> CppType:
        c = self.peek()
        if not c:
            raise self.fail("expected a type")
        if c in BUILTIN:
            self.pos += 1
            return CppType("builtin", BUILTIN[c])
        if c == "D" and self.peek(2)[1:] in BUILTIN_D:
            self.pos += 2
            return CppType("builtin", BUILTIN_D[self.text[self.pos - 1]])
        if self.take("DF16_"):
            return CppType("builtin", "_Float16")
        wrappers = {"P": "pointer", "R": "lvalue-ref", "O": "rvalue-ref", "K": "const", "V": "volatile",
                    "r": "restrict"}
        if c in wrappers:
            self.pos += 1
            t = CppType(wrappers[c], inner=self.type())
            self.subs.append(t)
            return t
        if self.take("F"):
            ret = self.type()
            params = []
            while not self.take("E"):
                if self.pos >= len(self.text):
                    raise self.fail("unterminated function type")
                params.append(self.type())
            if len(params) == 1 and params[0].name == "void":
                params = []
            t = CppType("function", inner=ret, params=tuple(params))
            self.subs.append(t)
            return t
        if c == "T":
            self.pos += 1
            i = self.seq_id()
            if i >= len(self.template_args):
                raise self.fail(f"template parameter {i} of {len(self.template_args)}")
            t = self.template_args[i]
            self.subs.append(t)
            return t
        if c == "S":
            std = self.peek(2) == "St"
            if std:
                self.pos += 2
                named = CppType("class", "std::" + self.unqualified_name())
                self.subs.append(named)
            else:
                named = self.substitution()
            if self.peek() == "I":
                named = CppType("class", named.name + _args_text(self.template_args_list()))
                self.subs.append(named)
            return named
        if c == "N" or c.isdigit():
            outer = self.template_args
            name, _ = self.name()
            self.template_args = outer  # a class's template arguments are not the function's
            t = CppType("class", name)
            self.subs.append(t)
            return t
        raise self.fail(f"type code {c!r} is not covered")


def _args_text(args: list[CppType]) -> str:
    text = ", ".join(str(a) for a in args)
    return f"<{text}{' ' if text.endswith('>') else ''}>"
