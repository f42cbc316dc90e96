"""Normalisation of a checked def: names of 0-d tensors become tensor reads.

Requires: a def that `frontend.check` accepted, and the names of its 0-d tensors.
Ensures:  every `Var` naming a 0-d tensor is an `Access(name, ())` with the same span,
          so later passes meet `Var`s only for index variables, sizes and lets.
          Nodes without such a name are returned as the same objects.

Example: with `float b`, `O(i) = A(i) * b` becomes `O(i) = A(i) * b()`.
"""

from __future__ import annotations

import dataclasses

from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Def,
    Exists,
    Expr,
    Let,
    Logical,
    RangeConstraint,
    Select,
    Stmt,
    Unary,
    Var,
    WhereClause,
)
from compiler.frontend.diagnostics import InternalError


def normalise_def(d: Def, zero_d: set[str]) -> Def:
    """`d` with every `Var` that names one of `zero_d` replaced by an `Access`."""
    if not zero_d:
        return d
    stmts = tuple(_stmt(s, zero_d) for s in d.stmts)
    return dataclasses.replace(d, stmts=stmts)


def _stmt(s: Stmt, names: set[str]) -> Stmt:
    lhs = _expr(s.lhs, names)
    equivalent = _expr(s.equivalent, names) if s.equivalent is not None else None
    if not isinstance(lhs, Access) or not (equivalent is None or isinstance(equivalent, Access)):
        raise InternalError("normalising an access must give an access")
    return dataclasses.replace(
        s,
        lhs=lhs,
        rhs=_expr(s.rhs, names),
        where=tuple(_clause(c, names) for c in s.where),
        equivalent=equivalent,
    )


def _clause(c: WhereClause, names: set[str]) -> WhereClause:
    if isinstance(c, RangeConstraint):
        return dataclasses.replace(
            c, expr=_expr(c.expr, names), lo=_expr(c.lo, names), hi=_expr(c.hi, names)
        )
    if isinstance(c, Let):
        return dataclasses.replace(c, value=_expr(c.value, names))
    return dataclasses.replace(c, expr=_expr(c.expr, names)) if isinstance(c, Exists) else c


def _expr(e: Expr, names: set[str]) -> Expr:
    if isinstance(e, Var):
        return Access(e.name, (), span=e.span) if e.name in names else e
    if isinstance(e, Const):
        return e
    if isinstance(e, (Access, Call)):
        return dataclasses.replace(e, args=tuple(_expr(a, names) for a in e.args))
    if isinstance(e, (Binary, Compare, Logical)):
        return dataclasses.replace(e, lhs=_expr(e.lhs, names), rhs=_expr(e.rhs, names))
    if isinstance(e, (Unary, Cast)):
        return dataclasses.replace(e, operand=_expr(e.operand, names))
    if isinstance(e, Select):
        return dataclasses.replace(
            e,
            cond=_expr(e.cond, names),
            then=_expr(e.then, names),
            otherwise=_expr(e.otherwise, names),
        )
    raise InternalError(f"unknown expression {e!r}")
