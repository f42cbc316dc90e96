"""Rewriting TC expressions by name: what `poly.gather` needs to restate a statement.

    substitute(expr, values)     every `Var(v)` with v in `values` replaced by its value
    simplify_mod(expr)           `f - d * (f / d)` -> `f % d` (how isl spells a modulo)

Both are pure and return the same object when nothing changes. Example: substituting
{h: y - kh} into `O_grad(n, m, h, w)` gives `O_grad(n, m, y - kh, w)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    Select,
    Unary,
    Var,
)
from compiler.frontend.diagnostics import InternalError

_Rewrite = Callable[[Expr], Expr]


def _rebuild(e: Expr, f: _Rewrite) -> Expr:
    """`e` with `f` applied to its children; `e` itself when no child changed."""
    if isinstance(e, (Access, Call)):
        args = tuple(f(a) for a in e.args)
        if all(a is b for a, b in zip(args, e.args, strict=True)):
            return e
        return dataclasses.replace(e, args=args)
    if isinstance(e, (Binary, Compare, Logical)):
        lhs, rhs = f(e.lhs), f(e.rhs)
        return e if lhs is e.lhs and rhs is e.rhs else dataclasses.replace(e, lhs=lhs, rhs=rhs)
    if isinstance(e, (Unary, Cast)):
        operand = f(e.operand)
        return e if operand is e.operand else dataclasses.replace(e, operand=operand)
    if isinstance(e, Select):
        parts = (f(e.cond), f(e.then), f(e.otherwise))
        if all(a is b for a, b in zip(parts, (e.cond, e.then, e.otherwise), strict=True)):
            return e
        return dataclasses.replace(e, cond=parts[0], then=parts[1], otherwise=parts[2])
    if isinstance(e, (Const, Var)):
        return e
    raise InternalError(f"substitute: unknown expression {e!r}")


def substitute(expr: Expr, values: Mapping[str, Expr]) -> Expr:
    """`expr` with each `Var` named in `values` replaced (simultaneously)."""

    def go(e: Expr) -> Expr:
        if isinstance(e, Var):
            return values.get(e.name, e)
        return _rebuild(e, go)

    return go(expr)


def simplify_mod(expr: Expr) -> Expr:
    """Rewrite `f - d * (f / d)` (and `f + -d * (f / d)` shapes isl prints) as `f % d`."""

    def go(e: Expr) -> Expr:
        e = _rebuild(e, go)
        if isinstance(e, Binary) and e.op is BinOp.SUB:
            mod = _as_mod(e.lhs, e.rhs)
            if mod is not None:
                return mod
        return e

    return go(expr)


def _as_mod(f: Expr, product: Expr) -> Expr | None:
    if not (isinstance(product, Binary) and product.op is BinOp.MUL):
        return None
    d, quotient = product.lhs, product.rhs
    if not (isinstance(d, Const) and isinstance(quotient, Binary) and quotient.op is BinOp.DIV):
        return None
    if quotient.rhs == d and quotient.lhs == f:
        return Binary(BinOp.MOD, f, d)
    return None
