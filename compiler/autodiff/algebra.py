"""Smart constructors for gradient expressions, with symbolic zeros.

Reverse-mode AD builds products of adjoints and partial derivatives; most factors
are 1, -1 or zero. These constructors fold them so the generated TC reads like
hand-written TC (`O_grad(i) * B(k)`, not `(O_grad(i) * 1) * B(k) + 0`).

A *symbolic zero* is `None`: "no contribution". Every constructor accepts and
returns `Expr | None`; `None` propagates through products and vanishes in sums.
Only exact identities are applied (`x * 1`, `1 * x`, `0 + x`, `-(-x)`); nothing
that could change a floating-point result (no reassociation).
"""

from __future__ import annotations

from compiler.frontend.ast import (
    Binary,
    BinOp,
    CmpOp,
    Compare,
    Const,
    Expr,
    Logical,
    LogicOp,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
)

MaybeExpr = Expr | None
"""An expression, or None for a symbolic zero."""


def const(value: float | int) -> Const:
    """A literal: int32 for Python ints, float32 (TC's literal type) for floats."""
    if isinstance(value, int):  # int64 beyond int32, as the parser types literals
        return Const(value, ScalarType.INT32 if -(2**31) <= value < 2**31 else ScalarType.INT64)
    return Const(float(value), ScalarType.FLOAT32)


def is_const(e: MaybeExpr, value: float) -> bool:
    return isinstance(e, Const) and e.value == value


def mul(a: MaybeExpr, b: MaybeExpr) -> MaybeExpr:
    """`a * b` with zeros and ones folded."""
    if a is None or b is None or is_const(a, 0) or is_const(b, 0):
        return None
    if is_const(b, 1):
        return a
    if is_const(a, 1):
        return b
    if is_const(b, -1):
        return neg(a)
    if is_const(a, -1):
        return neg(b)
    return Binary(BinOp.MUL, a, b)


def div(a: MaybeExpr, b: Expr) -> MaybeExpr:
    """`a / b`; zero when `a` is."""
    if a is None or is_const(a, 0):
        return None
    if is_const(b, 1):
        return a
    return Binary(BinOp.DIV, a, b)


def add(a: MaybeExpr, b: MaybeExpr) -> MaybeExpr:
    """`a + b`; a zero operand vanishes."""
    if a is None or is_const(a, 0):
        return b
    if b is None or is_const(b, 0):
        return a
    if isinstance(b, Unary) and b.op is UnaryOp.NEG:
        return Binary(BinOp.SUB, a, b.operand)
    return Binary(BinOp.ADD, a, b)


def sub(a: MaybeExpr, b: MaybeExpr) -> MaybeExpr:
    """`a - b`."""
    if b is None or is_const(b, 0):
        return a
    if a is None or is_const(a, 0):
        return neg(b)
    return Binary(BinOp.SUB, a, b)


def neg(a: MaybeExpr) -> MaybeExpr:
    """`-a`; `-(-x)` is `x`."""
    if a is None:
        return None
    if isinstance(a, Unary) and a.op is UnaryOp.NEG:
        return a.operand
    if isinstance(a, Const) and a.value != 0:
        return Const(-a.value, a.dtype)
    return Unary(UnaryOp.NEG, a)


def select(cond: Expr, then: MaybeExpr, otherwise: MaybeExpr) -> MaybeExpr:
    """`cond ? then : otherwise`, with a zero branch written as the literal 0."""
    if then is None and otherwise is None:
        return None
    return Select(
        cond, const(0) if then is None else then, const(0) if otherwise is None else otherwise
    )


def indicator(cond: Expr) -> Expr:
    """`cond ? 1 : 0`: 1 where `cond` holds."""
    return Select(cond, const(1), const(0))


def eq(a: Expr, b: Expr) -> Expr:
    return Compare(CmpOp.EQ, a, b)


def conj(a: Expr | None, b: Expr) -> Expr:
    """`a && b` (just `b` when `a` is None)."""
    return b if a is None else Logical(LogicOp.AND, a, b)


def square(a: Expr) -> Expr:
    return Binary(BinOp.MUL, a, a)
