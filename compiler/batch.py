"""The batched def: a def with a leading batch dimension (what `vmap` of a def is).

    batch_def(ranged, batched) -> Def

Requires: a `RangedDef` (every statement has explicit `where` ranges; 0-d tensors are
          `Access(name, ())`), and one flag per input: whether it has a batch dimension.
Ensures:  a `Def` of the same name taking a new size parameter (the batch size, a
          fresh name) and a fresh index variable, in which every batched input and
          every output has that size as its first dimension, every statement writes
          `O(b, ...)` and reads `A(b, ...)` for batched inputs and outputs (unbatched
          inputs are read as before, shared by every batch element), and every
          statement ranges over `b in 0:B`. Batch element `b` of each output is the
          def applied to batch element `b` of the batched inputs and to the unbatched
          inputs; the def's own index ranges, reductions and preconditions are
          unchanged. The def is returned unchecked: the caller checks and ranges it
          like any def.

Example::

    def mv(float(M, K) A, float(K) x) -> (y) { y(m) +=! A(m, k) * x(k) }
    # batched x:
    def mv(float(M, K) A, float(B, K) x) -> (y) {
        y(b, m) +=! A(m, k) * x(b, k) where b in 0:B, m in 0:M, k in 0:K }
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    Const,
    Def,
    Expr,
    Param,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
)
from compiler.frontend.checked import RangedDef
from compiler.frontend.scopes import name_supply
from compiler.frontend.visit import Mutator


def batch_def(ranged: RangedDef, batched: Sequence[bool]) -> Def:
    """`ranged`'s def with a leading batch dimension (module doc)."""
    definition = ranged.checked.definition
    if len(batched) != len(definition.params):
        raise InternalError(f"batch_def: {len(batched)} flags for {len(definition.params)} inputs")
    names = name_supply(definition)
    size = names.fresh("B")
    index = names.fresh("b")
    extended = {p.name for p, flag in zip(definition.params, batched, strict=True) if flag}
    extended |= {o.name for o in definition.outputs}
    params = tuple(
        _batched_param(p, size) if flag else p
        for p, flag in zip(definition.params, batched, strict=True)
    )
    outputs = tuple(
        _batched_param(o, size) if o.dims is not None else o for o in definition.outputs
    )
    reads = _Prepend(extended, Var(index))
    bound = RangeConstraint(Var(index), Const(0, ScalarType.INT32), Var(size))
    stmts = tuple(_batched_stmt(s, reads, bound) for s in definition.stmts)
    return dataclasses.replace(definition, params=params, outputs=outputs, stmts=stmts)


def _batched_param(param: Param, size: str) -> Param:
    """`param` with the batch size as its first dimension (a 0-d tensor becomes 1-d)."""
    return dataclasses.replace(param, dims=(Var(size), *(param.dims or ())))


def _batched_stmt(stmt: Stmt, reads: _Prepend, bound: RangeConstraint) -> Stmt:
    """`stmt` writing and reading batch element `b` (its left-hand side is an output,
    so it gets the batch index too), over `b in 0:B` first."""
    rewritten = reads.stmt(stmt)
    return dataclasses.replace(rewritten, where=(bound, *rewritten.where))


class _Prepend(Mutator):
    """Accesses of the batched tensors get the batch index as their first subscript."""

    def __init__(self, names: set[str], index: Expr) -> None:
        super().__init__()
        self.names = names
        self.index = index

    def mutate_Access(self, e: Access) -> Expr:
        e = self.generic(e)
        if e.name in self.names:
            return dataclasses.replace(e, args=(self.index, *e.args))
        return e
