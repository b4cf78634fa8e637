"""Integer constant expressions as instruction operands (`WARP_SZ-1`, `4*2`, `(1<<5)|3`), as ptxas folds them:
C's operators and precedence on 64-bit integers (unary - ~ !, then * / %, + -, << >>, < <= > >=, == !=, &, ^,
|, &&, ||), division truncating toward zero. `WARP_SZ` is 32."""

from __future__ import annotations

from ptxforge.errors import Error

# binary operators by precedence, loosest first
_LEVELS = (("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="), ("<<", ">>"),
           ("+", "-"), ("*", "/", "%"))
OPERATOR_CHARS = frozenset("+-*/%&|^<>=!")


class ConstExprError(Error, ValueError):
    """Not a constant expression (message says why)."""


def _wrap(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise ConstExprError("division by zero in a constant expression")
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q if op == "/" else a - q * b
    if op in ("<<", ">>"):
        if not 0 <= b < 64:
            raise ConstExprError(f"shift by {b} in a constant expression")
        return a << b if op == "<<" else a >> b
    return {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b,
            "<": int(a < b), "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b), "==": int(a == b),
            "!=": int(a != b), "&&": int(bool(a and b)), "||": int(bool(a or b))}[op]


def evaluate(tokens: list[str | int]) -> int:
    """The value of a token list (ints, operators, parentheses)."""
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def unary() -> int:
        nonlocal pos
        t = peek()
        if t in ("-", "~", "!", "+"):
            pos += 1
            v = unary()
            return {"-": -v, "~": ~v, "!": int(not v), "+": v}[t]
        if t == "(":
            pos += 1
            v = level(0)
            if peek() != ")":
                raise ConstExprError("expected ')' in a constant expression")
            pos += 1
            return v
        if isinstance(t, int):
            pos += 1
            return t
        raise ConstExprError(f"expected a number in a constant expression, found {t!r}")

    def level(i: int) -> int:
        nonlocal pos
        if i == len(_LEVELS):
            return unary()
        v = level(i + 1)
        while peek() in _LEVELS[i]:
            op = tokens[pos]
            pos += 1
            v = _wrap(_apply(str(op), v, level(i + 1)))
        return v

    v = level(0)
    if pos != len(tokens):
        raise ConstExprError(f"unexpected {tokens[pos]!r} in a constant expression")
    return _wrap(v)
