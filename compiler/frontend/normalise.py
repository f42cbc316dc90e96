"""Normalisation of a checked def: names of 0-d tensors become tensor reads.

Requires: a def that `frontend.check` accepted, and the names of its 0-d tensors.
Ensures:  every `Var` naming a 0-d tensor is an `Access(name, ())` with the same span,
          so later passes meet `Var`s only for index variables, sizes and lets.
          Nodes without such a name are returned as the same objects.

Example: with `float b`, `O(i) = A(i) * b` becomes `O(i) = A(i) * b()`.
"""

from __future__ import annotations

from compiler.frontend.ast import Access, Def, Expr, Var
from compiler.frontend.visit import Mutator


class _ZeroDReads(Mutator):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def mutate_Var(self, e: Var) -> Expr:
        return Access(e.name, (), span=e.span) if e.name in self.names else e


def normalise_def(d: Def, zero_d: set[str]) -> Def:
    """`d` with every `Var` that names one of `zero_d` replaced by an `Access`."""
    if not zero_d:
        return d
    return _ZeroDReads(zero_d).definition(d)
