"""Expression rewriting for autodiff: rename tensor reads, inline lets.

    rename_reads(expr, f)     every `Access(name, args)` -> `Access(f(name), args')`
    inline_lets(stmt)         `O(i) = x * x where x = A(i)` -> `O(i) = A(i) * A(i)`

Both are `compiler.frontend.visit.Mutator`s: pure, and they return the same object
when nothing changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.frontend.ast import Access, Expr, Let, Stmt
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
