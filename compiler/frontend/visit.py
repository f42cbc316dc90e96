"""The one traversal of the TC AST: children, walk, and a Mutator that rebuilds.

    children(expr)            the direct subexpressions, in source order
    walk(expr)                `expr` and every subexpression, pre-order
    Mutator().expr(e)         rebuild bottom-up; `mutate_<Class>` hooks change nodes
    Mutator().stmt(s)         the same over a statement: lhs, rhs, where, `<=>`
    substitute(expr, values)  every `Var(v)` with v in `values` replaced (simultaneously)

Every pass that rewrites expressions (normalisation of 0-d tensors, autodiff's
renaming and let inlining, gather's substitution of index variables) subclasses
`Mutator` and overrides the cases it changes; the rebuilding is written once, here.
The mutator returns the *same object* when no child changed (tests use `is`), so an
unchanged tree costs no allocation and keeps its spans.

Example::

    class Rename(Mutator):
        def mutate_Access(self, e: Access) -> Expr:
            e = self.generic(e)                      # the subscripts first
            return dataclasses.replace(e, name="B") if e.name == "A" else e

    Rename().expr(parse_expr("A(i) + C(A(j))"))     # B(i) + C(B(j))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from compiler.diagnostics import InternalError
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


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of `expr`, in source order."""
    if isinstance(expr, (Access, Call)):
        return expr.args
    if isinstance(expr, (Binary, Compare, Logical)):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, (Unary, Cast)):
        return (expr.operand,)
    if isinstance(expr, Select):
        return (expr.cond, expr.then, expr.otherwise)
    return ()


def walk(expr: Expr) -> Iterator[Expr]:
    """`expr` and all its subexpressions, in pre-order (source order for names).

    With an explicit stack: nested generators cost each node its depth (a 200-term
    product walked in time quadratic in its length) and a Python frame per level."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(reversed(children(e)))


def with_children(expr: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`expr` with its children replaced by `kids`; `expr` itself if all are the same."""
    old = children(expr)
    if len(kids) != len(old):
        raise InternalError(f"{type(expr).__name__} has {len(old)} children, got {len(kids)}")
    if all(a is b for a, b in zip(kids, old, strict=True)):
        return expr
    if isinstance(expr, (Access, Call)):
        return dataclasses.replace(expr, args=kids)
    if isinstance(expr, (Binary, Compare, Logical)):
        return dataclasses.replace(expr, lhs=kids[0], rhs=kids[1])
    if isinstance(expr, (Unary, Cast)):
        return dataclasses.replace(expr, operand=kids[0])
    if isinstance(expr, Select):
        return dataclasses.replace(expr, cond=kids[0], then=kids[1], otherwise=kids[2])
    raise InternalError(f"unknown expression {expr!r}")


_LEAVES = (Const, Var)
_INNER = (Access, Call, Binary, Compare, Logical, Unary, Cast, Select)


class Mutator:
    """Rebuilds TC expressions and statements bottom-up (see the module doc).

    `expr(e)` calls `mutate_<Class>(e)` when the subclass defines it, else
    `generic(e)`, which mutates the children and rebuilds `e` only if one changed.
    A hook that wants the children mutated first calls `self.generic(e)` itself."""

    def expr(self, e: Expr) -> Expr:
        hook: Callable[[Expr], Expr] | None = getattr(self, f"mutate_{type(e).__name__}", None)
        return hook(e) if hook is not None else self.generic(e)

    def generic(self, e: Expr) -> Expr:
        if isinstance(e, _LEAVES):
            return e
        if not isinstance(e, _INNER):
            raise InternalError(f"unknown expression {e!r}")
        return with_children(e, tuple(self.expr(c) for c in children(e)))

    def access(self, e: Access) -> Access:
        """An access that must stay one (a left-hand side, a `<=>` target)."""
        out = self.expr(e)
        if not isinstance(out, Access):
            raise InternalError(f"rewriting the access {e.name}(...) gave {type(out).__name__}")
        return out

    def clause(self, c: WhereClause) -> WhereClause:
        if isinstance(c, RangeConstraint):
            parts = (self.expr(c.expr), self.expr(c.lo), self.expr(c.hi))
            if all(a is b for a, b in zip(parts, (c.expr, c.lo, c.hi), strict=True)):
                return c
            return dataclasses.replace(c, expr=parts[0], lo=parts[1], hi=parts[2])
        if isinstance(c, Let):
            value = self.expr(c.value)
            return c if value is c.value else dataclasses.replace(c, value=value)
        if isinstance(c, Exists):
            expr = self.expr(c.expr)
            return c if expr is c.expr else dataclasses.replace(c, expr=expr)
        raise InternalError(f"unknown where clause {c!r}")

    def stmt(self, s: Stmt) -> Stmt:
        lhs, rhs = self.access(s.lhs), self.expr(s.rhs)
        where = tuple(self.clause(c) for c in s.where)
        equivalent = None if s.equivalent is None else self.access(s.equivalent)
        same = lhs is s.lhs and rhs is s.rhs and equivalent is s.equivalent
        if same and all(a is b for a, b in zip(where, s.where, strict=True)):
            return s
        return dataclasses.replace(s, lhs=lhs, rhs=rhs, where=where, equivalent=equivalent)

    def definition(self, d: Def) -> Def:
        stmts = tuple(self.stmt(s) for s in d.stmts)
        if all(a is b for a, b in zip(stmts, d.stmts, strict=True)):
            return d
        return dataclasses.replace(d, stmts=stmts)


class _Substitute(Mutator):
    def __init__(self, values: Mapping[str, Expr]) -> None:
        self.values = values

    def mutate_Var(self, e: Var) -> Expr:
        return self.values.get(e.name, e)


def substitute(expr: Expr, values: Mapping[str, Expr]) -> Expr:
    """`expr` with each `Var` named in `values` replaced by its value (simultaneously:
    the values are not substituted again); `expr` itself when nothing is replaced."""
    return _Substitute(values).expr(expr) if values else expr


__all__ = ["Mutator", "children", "substitute", "walk", "with_children"]
