"""Expression rewriting for autodiff: rename tensor reads, inline lets.

    rename_reads(expr, f)     every `Access(name, args)` -> `Access(f(name), args')`
    inline_lets(stmt)         `O(i) = x * x where x = A(i)` -> `O(i) = A(i) * A(i)`
    locate(stmt, span)        every node without a span gets `span`

All are `compiler.frontend.visit.Mutator`s: pure, and they return the same object
when nothing changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.frontend.ast import Access, Expr, Let, Stmt, WhereClause
from compiler.frontend.source import NO_SPAN, Span
from compiler.frontend.visit import Mutator, substitute


class _RenameReads(Mutator):
    def __init__(self, rename: Callable[[str], str]) -> None:
        self.rename = rename

    def mutate_Access(self, e: Access) -> Expr:
        e = self.generic(e)  # type: ignore[assignment]
        name = self.rename(e.name)
        return e if name == e.name else dataclasses.replace(e, name=name)


def rename_reads(expr: Expr, rename: Callable[[str], str]) -> Expr:
    """`expr` with every tensor read renamed by `rename`."""
    return _RenameReads(rename).expr(expr)


class _InlineLets(Mutator):
    """Substitutes the lets' values into every part of a statement."""

    def __init__(self, values: dict[str, Expr]) -> None:
        self.values = values

    def expr(self, e: Expr) -> Expr:
        return substitute(e, self.values)


def inline_lets(stmt: Stmt) -> Stmt:
    """The statement with its lets substituted into the right-hand side and the
    other clauses, and the `Let` clauses removed. Later lets may use earlier ones."""
    values: dict[str, Expr] = {}
    for clause in stmt.where:
        if isinstance(clause, Let):
            values[clause.name] = substitute(clause.value, values)
    if not values:
        return stmt
    kept = tuple(c for c in stmt.where if not isinstance(c, Let))
    return _InlineLets(values).stmt(dataclasses.replace(stmt, where=kept))


class _Locate(Mutator):
    def __init__(self, span: Span) -> None:
        self.span = span

    def expr(self, e: Expr) -> Expr:
        e = self.generic(e)
        return dataclasses.replace(e, span=self.span) if e.span == NO_SPAN else e

    def clause(self, c: WhereClause) -> WhereClause:
        c = super().clause(c)
        return dataclasses.replace(c, span=self.span) if c.span == NO_SPAN else c

    def stmt(self, s: Stmt) -> Stmt:
        s = super().stmt(s)
        return dataclasses.replace(s, span=self.span) if s.span == NO_SPAN else s


def locate(stmt: Stmt, span: Span) -> Stmt:
    """`stmt` with `span` on every node that has none: a generated statement then
    points at the source statement it comes from (nodes copied from the source keep
    their own spans)."""
    return stmt if span == NO_SPAN else _Locate(span).stmt(stmt)
