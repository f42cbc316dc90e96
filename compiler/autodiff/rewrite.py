"""Expression rewriting for autodiff: rename tensor reads, inline lets.

    rename_reads(expr, f)     every `Access(name, args)` -> `Access(f(name), args')`
    inline_lets(stmt)         `O(i) = x * x where x = A(i)` -> `O(i) = A(i) * A(i)`

Both are pure and return the same object when nothing changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Cast,
    Compare,
    Exists,
    Expr,
    Let,
    Logical,
    RangeConstraint,
    Select,
    Stmt,
    Unary,
    Var,
)


def map_expr(expr: Expr, leaf: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild `expr` bottom-up; `leaf(e)` may replace an `Access` or `Var` (None: keep)."""
    if isinstance(expr, Access):
        args = tuple(map_expr(a, leaf) for a in expr.args)
        node = expr if args == expr.args else dataclasses.replace(expr, args=args)
        return leaf(node) or node
    if isinstance(expr, Var):
        return leaf(expr) or expr
    if isinstance(expr, (Binary, Compare, Logical)):
        lhs, rhs = map_expr(expr.lhs, leaf), map_expr(expr.rhs, leaf)
        same = lhs is expr.lhs and rhs is expr.rhs
        return expr if same else dataclasses.replace(expr, lhs=lhs, rhs=rhs)
    if isinstance(expr, (Unary, Cast)):
        operand = map_expr(expr.operand, leaf)
        return expr if operand is expr.operand else dataclasses.replace(expr, operand=operand)
    if isinstance(expr, Call):
        args = tuple(map_expr(a, leaf) for a in expr.args)
        same = all(a is b for a, b in zip(args, expr.args, strict=True))
        return expr if same else dataclasses.replace(expr, args=args)
    if isinstance(expr, Select):
        parts = (
            map_expr(expr.cond, leaf),
            map_expr(expr.then, leaf),
            map_expr(expr.otherwise, leaf),
        )
        if all(a is b for a, b in zip(parts, (expr.cond, expr.then, expr.otherwise), strict=True)):
            return expr
        return dataclasses.replace(expr, cond=parts[0], then=parts[1], otherwise=parts[2])
    return expr


def rename_reads(expr: Expr, rename: Callable[[str], str]) -> Expr:
    """`expr` with every tensor read renamed by `rename`."""

    def leaf(e: Expr) -> Expr | None:
        if isinstance(e, Access) and rename(e.name) != e.name:
            return dataclasses.replace(e, name=rename(e.name))
        return None

    return map_expr(expr, leaf)


def substitute_vars(expr: Expr, values: Mapping[str, Expr]) -> Expr:
    """`expr` with each `Var` named in `values` replaced by its value."""
    if not values:
        return expr
    return map_expr(expr, lambda e: values.get(e.name) if isinstance(e, Var) else None)


def inline_lets(stmt: Stmt) -> Stmt:
    """The statement with its lets substituted into the right-hand side and the
    other clauses, and the `Let` clauses removed. Later lets may use earlier ones."""
    values: dict[str, Expr] = {}
    for clause in stmt.where:
        if isinstance(clause, Let):
            values[clause.name] = substitute_vars(clause.value, values)
    if not values:
        return stmt
    where: list[RangeConstraint | Exists] = []
    for clause in stmt.where:
        if isinstance(clause, RangeConstraint):
            where.append(clause)
        elif isinstance(clause, Exists):
            where.append(dataclasses.replace(clause, expr=substitute_vars(clause.expr, values)))
    lhs_args = tuple(substitute_vars(a, values) for a in stmt.lhs.args)
    return dataclasses.replace(
        stmt,
        lhs=dataclasses.replace(stmt.lhs, args=lhs_args),
        rhs=substitute_vars(stmt.rhs, values),
        where=tuple(where),
    )
