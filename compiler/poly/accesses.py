"""Which tensor elements a statement reads, as TC's range inference sees them.

`reads_of(stmt, known_outputs)` lists every `Access` the statement evaluates: those of
the right-hand side and of `exists` clauses, with let bindings inlined where they are
used (as TC inlines them, so an unused let reads nothing), reads nested inside
subscripts (`B(i)` in `A(B(i))`), and, for a reduction (`+=`, `+=!`, ...) of an output
that an earlier statement wrote, the implicit read of the left-hand side: TC's
update `O(i) = O(i) + rhs` reads the current value.

Example: `O(i) += A(i, x) where x = j + 1` (O written before) reads
`A(i, x)` with lets {x: j + 1} and, implicitly, `O(i)`.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass

from compiler.frontend.ast import Access, Exists, Expr, Let, Logical, LogicOp, Select, Stmt, Var
from compiler.frontend.scopes import children


@dataclass(frozen=True, slots=True)
class Read:
    """One tensor read; `implicit` marks a reduction's read of its own output.
    `guards`: (condition, value) pairs that hold whenever the read is evaluated."""

    access: Access
    implicit: bool = False
    guards: tuple[tuple[Expr, bool], ...] = ()


def lets_of(stmt: Stmt) -> dict[str, Expr]:
    return {c.name: c.value for c in stmt.where if isinstance(c, Let)}


_Guards = tuple[tuple[Expr, bool], ...]


def _accesses(
    e: Expr, lets: dict[str, Expr], seen_lets: set[str], guards: _Guards = ()
) -> Iterator[tuple[Access, _Guards]]:
    if isinstance(e, Access):
        yield e, guards
    elif isinstance(e, Var) and e.name in lets and e.name not in seen_lets:
        seen_lets.add(e.name)
        yield from _accesses(lets[e.name], lets, seen_lets, guards)
    if isinstance(e, Select):
        yield from _accesses(e.cond, lets, seen_lets, guards)
        yield from _accesses(e.then, lets, seen_lets, (*guards, (e.cond, True)))
        yield from _accesses(e.otherwise, lets, seen_lets, (*guards, (e.cond, False)))
        return
    if isinstance(e, Logical):  # lazy: `b` of `a && b` runs only where a, of `a || b` where !a
        yield from _accesses(e.lhs, lets, seen_lets, guards)
        guard = (e.lhs, e.op is LogicOp.AND)
        yield from _accesses(e.rhs, lets, seen_lets, (*guards, guard))
        return
    for child in children(e):
        yield from _accesses(child, lets, seen_lets, guards)


def reads_of(stmt: Stmt, known_outputs: Container[str] = ()) -> tuple[Read, ...]:
    """Every read of `stmt`, in textual order, each distinct access once."""
    lets = lets_of(stmt)
    seen_lets: set[str] = set()
    found: list[Read] = []
    if stmt.op.is_reduction and stmt.lhs.name in known_outputs:
        found.append(Read(stmt.lhs, implicit=True))
    exprs = [stmt.rhs] + [c.expr for c in stmt.where if isinstance(c, Exists)]
    for expr in exprs:
        for access, guards in _accesses(expr, lets, seen_lets):
            if all(r.access != access or r.implicit or r.guards != guards for r in found):
                found.append(Read(access, guards=guards))
    return tuple(found)
