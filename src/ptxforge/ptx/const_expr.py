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
    """Not a constant expression (message says why); `.index` is the offending token's position."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


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


def evaluate(tokens: list[str | int], max_nesting: int = 100) -> int:
    """The value of a token list (ints, operators, parentheses).

    Operator precedence parsing with explicit stacks, so that no input reaches Python's recursion limit;
    open parentheses and pending unary operators together may nest `max_nesting` deep.
    """
    values: list[int] = []
    ops: list[tuple[str, int]] = []  # (operator or "(", precedence); unary operators get _UNARY
    nesting = 0
    expect_operand = True
    for index, t in enumerate(tokens):
        if expect_operand:
            if isinstance(t, int):
                values.append(t)
                expect_operand = False
                continue
            if t not in _UNARY_OPS and t != "(":
                raise ConstExprError(f"expected a number in a constant expression, found {t!r}", index)
            nesting += 1
            if nesting > max_nesting:
                raise ConstExprError(f"constant expression nested deeper than {max_nesting} levels (parentheses "
                                     f"and unary operators)", index)
            ops.append((str(t), _UNARY if t != "(" else -1))
        elif t == ")":
            while ops and ops[-1][0] != "(":
                nesting -= _reduce(ops, values)
            if not ops:
                raise ConstExprError("unexpected ')' in a constant expression", index)
            ops.pop()
            nesting -= 1
        elif t in _PRECEDENCE:
            prec = _PRECEDENCE[str(t)]
            while ops and ops[-1][1] >= prec:
                nesting -= _reduce(ops, values)
            ops.append((str(t), prec))
            expect_operand = True
        else:
            raise ConstExprError(f"unexpected {t!r} in a constant expression", index)
    if expect_operand:
        raise ConstExprError("expected a number in a constant expression, found the end", len(tokens))
    while ops:
        if ops[-1][0] == "(":
            raise ConstExprError("expected ')' in a constant expression", len(tokens))
        _reduce(ops, values)
    return values[0]


_PRECEDENCE = {op: i for i, level in enumerate(_LEVELS) for op in level}
_UNARY = len(_LEVELS)  # binds tighter than every binary operator
_UNARY_OPS = frozenset(("-", "~", "!", "+"))


def _reduce(ops: list[tuple[str, int]], values: list[int]) -> int:
    """Apply the operator on top of `ops` to the values on top of `values`; 1 if it was unary."""
    op, prec = ops.pop()
    if prec == _UNARY:
        v = values.pop()
        values.append(_wrap({"-": -v, "~": ~v, "!": int(not v), "+": v}[op]))
        return 1
    b = values.pop()
    a = values.pop()
    values.append(_wrap(_apply(op, a, b)))
    return 0
