"""The one AST traversal (compiler.frontend.visit): the mutator returns the same
object when nothing changed, and rebuilds only the path to what did."""

from __future__ import annotations

import dataclasses

from compiler.frontend.ast import Access, Expr, Var
from compiler.frontend.normalise import normalise_def
from compiler.frontend.parser import parse
from compiler.frontend.visit import Mutator, children, substitute, walk

SRC = """def f(float(N) A, float(N) C, float b) -> (O) {
    O(i) +=! A(i) * b + (A(j) > 0 ? C(A(i) > 0 ? i : j) : -exp(A(j))) where j in 0:N, x = A(i)
}"""


class _RenameA(Mutator):
    def mutate_Access(self, e: Access) -> Expr:
        e = self.generic(e)  # type: ignore[assignment]
        return dataclasses.replace(e, name="B") if e.name == "A" else e


def _def():  # type: ignore[no-untyped-def]
    return parse(SRC).get()


def test_identity_mutator_returns_the_same_objects() -> None:
    d = _def()
    assert Mutator().definition(d) is d
    stmt = d.stmts[0]
    assert Mutator().stmt(stmt) is stmt
    assert Mutator().expr(stmt.rhs) is stmt.rhs


def test_mutator_rebuilds_only_what_changed() -> None:
    stmt = _def().stmts[0]
    renamed = _RenameA().stmt(stmt)
    assert renamed is not stmt
    assert all(e.name != "A" for e in walk(renamed.rhs) if isinstance(e, Access))
    assert renamed.lhs is stmt.lhs  # O(i): nothing to rename
    assert renamed.where[0] is stmt.where[0]  # `j in 0:N`
    assert renamed.where[1] is not stmt.where[1]  # `x = A(i)`
    assert sum(isinstance(e, Access) and e.name == "B" for e in walk(renamed.rhs)) == 4


def test_substitute_is_simultaneous_and_keeps_untouched_objects() -> None:
    rhs = _def().stmts[0].rhs
    assert substitute(rhs, {}) is rhs
    assert substitute(rhs, {"k": Var("i")}) is rhs
    swapped = substitute(rhs, {"i": Var("j"), "j": Var("i")})
    names = [e.name for e in walk(swapped) if isinstance(e, Var)]
    assert names == [{"i": "j", "j": "i"}.get(n, n) for n in (
        e.name for e in walk(rhs) if isinstance(e, Var))]  # fmt: skip


def test_children_are_in_source_order() -> None:
    rhs = _def().stmts[0].rhs
    assert len(children(rhs)) == 2
    assert [type(c).__name__ for c in children(rhs)] == ["Binary", "Select"]


def test_normalise_leaves_a_def_without_zero_d_reads_alone() -> None:
    d = _def()
    assert normalise_def(d, {"nothing"}) is d
    changed = normalise_def(d, {"b"})
    assert changed is not d
    assert any(isinstance(e, Access) and e.name == "b" for e in walk(changed.stmts[0].rhs))
