"""Routing of adjoints through one expression, for `autodiff.reverse`.

Requires: a float expression of a forward statement (reads renamed to their versions),
its seed (the adjoint of its value; None: zero) and the type environment.
Ensures:  `backprop(expr, seed, guards, types)` yields `(read, seed * d expr / d read,
guards)` for every float tensor read in `expr`, with the derivatives of
`autodiff.rules`; the guards are the conditions of the `c ? a : b` branches the read
sits in (differentiated where taken).
"""

from __future__ import annotations

from collections.abc import Iterator

from compiler.autodiff.algebra import MaybeExpr
from compiler.autodiff.rules import CAST, UNSUPPORTED, vjp
from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Call,
    Cast,
    Const,
    Expr,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.types import INDEX_TYPE, expr_type
from compiler.frontend.visit import walk

Guard = tuple[Expr, bool]
Contribution = tuple[Access, Expr, tuple[Guard, ...]]


class IndexDefault(dict):
    """A type environment in which unknown names are index variables (int32)."""

    def __missing__(self, key: str) -> ScalarType:
        return INDEX_TYPE

    def __contains__(self, key: object) -> bool:
        return True


def backprop(
    expr: Expr, seed: MaybeExpr, guards: tuple[Guard, ...], types: dict[str, ScalarType]
) -> Iterator[Contribution]:
    """Every (read, seed * d expr / d read, guards) of a float tensor read in `expr`.
    The derivatives come from `rules.vjp`; this walk only routes adjoints (and the
    guards of `c ? a : b`, whose branches are differentiated where taken)."""
    if seed is None or not _is_float(expr, types):
        return
    if isinstance(expr, Access):
        yield expr, seed, guards
        return
    if isinstance(expr, Select):
        yield from backprop(expr.then, seed, (*guards, (expr.cond, True)), types)
        yield from backprop(expr.otherwise, seed, (*guards, (expr.cond, False)), types)
        return
    if isinstance(expr, (Const, Var)):
        return  # literals, index variables, sizes: no gradient
    op, args = _operator(expr)
    if isinstance(expr, Call) and not any(_is_float(a, types) and has_read(a) for a in args):
        return
    if isinstance(op, str) and op in UNSUPPORTED:
        raise TCError(f"cannot differentiate '{op}': {UNSUPPORTED[op]}", expr.span)
    seeds = vjp(op, args, seed)
    if seeds is None:
        raise TCError(f"no derivative rule for builtin '{op}'", expr.span)
    for arg, arg_seed in zip(args, seeds, strict=True):
        yield from backprop(arg, arg_seed, guards, types)


def _operator(expr: Expr) -> tuple[BinOp | UnaryOp | str, tuple[Expr, ...]]:
    """The key of `expr`'s rule in `rules` and its operands."""
    if isinstance(expr, Binary):
        return expr.op, (expr.lhs, expr.rhs)
    if isinstance(expr, Unary):
        return expr.op, (expr.operand,)
    if isinstance(expr, Cast):
        return CAST, (expr.operand,)
    if isinstance(expr, Call):
        return expr.fn, expr.args
    raise InternalError(f"autodiff: no rule for a float {type(expr).__name__}")


def _is_float(expr: Expr, types: dict[str, ScalarType]) -> bool:
    return expr_type(expr, IndexDefault(types)).is_float


def has_read(expr: Expr) -> bool:
    return any(isinstance(e, Access) for e in walk(expr))


__all__ = ["Contribution", "Guard", "IndexDefault", "backprop", "has_read"]
