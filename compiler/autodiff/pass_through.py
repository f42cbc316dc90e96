"""The adjoint of an output's previous version: what a statement that updates part of
an output, or combines with its previous contents, passes back (`autodiff.reverse`).

Requires: the `_Reverse` derivation this mixes into (its versions `v`, `products` of
          the `*=` seeds, and `_emit`, `_need`, `_need_reads`, `_tmp`, `_grad_tensor`).
Ensures:  `_pass_through(index, stmt, target, k, adjoint)` emits the contributions of
          version k's adjoint to version k - 1's, for the elements statement `index`
          keeps (`=` over part of the output), multiplies (`*=`), takes the extremum
          with (`max=`, `min=`) or adds to (`+=`).

Worked example: `O(i) = A(i) where i in 2:N` after `O(i) = B(i)` keeps O_v1 at i < 2:
`O_v1_grad(i) +=! 2 <= i && i < N ? 0 : O_grad(i) where i in 0:N`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from compiler.autodiff import algebra as al
from compiler.autodiff.products import exact_product, lhs_where, reduced
from compiler.autodiff.versions import Versions, full_box, plain_vars
from compiler.diagnostics import TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    CmpOp,
    Compare,
    Const,
    Expr,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
)


class PassThrough:
    """The previous version's adjoint, mixed into `reverse._Reverse`."""

    v: Versions
    products: dict[tuple[str, int], tuple[Access, Access, Access]]

    if TYPE_CHECKING:

        def _emit(self, lhs: Access, value: Expr, where: tuple) -> None: ...
        def _need(self, tensor: str, version: int) -> None: ...
        def _need_reads(self, expr: Expr, index: int) -> None: ...
        def _grad_tensor(self, tensor: str, version: int) -> str | None: ...
        def _tmp(
            self, target: str, stmt: Stmt, op: AssignOp, rhs: Expr, count: bool = False
        ) -> Access: ...

    def _pass_through(self, index: int, stmt: Stmt, target: str, k: int, adjoint: str) -> None:
        """The adjoint of the previous version, for the elements this statement keeps."""
        if self.v.covers(index):
            return
        grad = self._grad_tensor(target, k - 1)
        if grad is None:
            return
        if stmt.op is AssignOp.ASSIGN:
            self._masked_pass_through(stmt, target, adjoint, grad)
            return
        if stmt.op is AssignOp.TIMES:  # `*=`: times the product (`_times_seed`)
            self._times_pass_through(index, stmt, target, k, adjoint, grad)
            return
        if stmt.op.base in (AssignOp.MAX, AssignOp.MIN):
            self._extremum_pass_through(index, stmt, target, k, adjoint, grad)
            return
        idx, where = full_box(self.v, target)
        self._emit(Access(grad, idx), Access(adjoint, idx), where)

    def _extremum_pass_through(
        self, index: int, stmt: Stmt, target: str, k: int, adjoint: str, grad: str
    ) -> None:
        """`max=` / `min=` into the previous version: where the statement writes, the
        previous value keeps the adjoint if it is still the extremum; elsewhere it is
        the value. The previous version is read only where the statement writes (an
        earlier write may cover only that part: `O(i) = A(i) where i in 2:N`).

        Without a reduction the test compares the previous value with the right-hand
        side (`prev <= rhs` for `min=`), both computed here: the previous version may be
        recomputed in another order than the forward's (a clamp's pieces of a sum), so
        its bits need not equal the forward's result. A reduction compares with its
        terms' extremum, an auxiliary reduction here (fuzz seed 23479: a recomputed
        sum then `max= D(k)`); a scatter's left-hand side with the result."""
        self._need(target, k - 1)
        plain = plain_vars(stmt.lhs)
        if plain is None:
            idx, where = full_box(self.v, target)
        else:
            idx, where = stmt.lhs.args, lhs_where(stmt, stmt.where)
        previous = Access(self.v.name(target, k - 1), idx)
        if plain is not None:
            op = CmpOp.LE if stmt.op.base is AssignOp.MIN else CmpOp.GE
            rhs = stmt.rhs
            if reduced(stmt):
                rhs = self._tmp(target, stmt, stmt.op.with_init, rhs)
            same: Expr = Compare(op, previous, rhs)
            self._need_reads(stmt.rhs, index)
        else:
            self._need(target, k)
            same = al.eq(previous, Access(self.v.name(target, k), idx))
        value = al.mul(Access(adjoint, idx), al.indicator(same)) or Access(adjoint, idx)
        self._emit(Access(grad, idx), value, where)
        inside = dataclasses.replace(stmt, where=where)
        # a condition on the written elements (a clamp's piece: `1 - i in 1:...`) is partial
        if plain is not None and not self.v.covers_box(inside, reducing=False):
            self._masked_pass_through(inside, target, adjoint, grad)

    def _times_pass_through(
        self, index: int, stmt: Stmt, target: str, k: int, adjoint: str, grad: str
    ) -> None:
        """`O_(k-1)_grad += O_k_grad * prod_r x_r` over the output (`_times_seed`): when
        the statement reduces, the product from the seed's reductions."""
        factor: Expr = stmt.rhs
        where = stmt.where
        if reduced(stmt):
            factor = exact_product(*self.products[(target, k)])
            where = lhs_where(stmt, stmt.where)
        value = al.mul(Access(adjoint, stmt.lhs.args), factor) or Access(adjoint, stmt.lhs.args)
        self._need_reads(value, index)
        self._emit(Access(grad, stmt.lhs.args), value, where)
        # a condition on the written elements (a clamp's piece: `0 - (i - 1) in 1:...`):
        # elements the statement does not multiply keep the adjoint, as for max= / min=
        inside = dataclasses.replace(stmt, where=where)
        if plain_vars(stmt.lhs) is not None and not self.v.covers_box(inside, reducing=False):
            self._masked_pass_through(inside, target, adjoint, grad)

    def _masked_pass_through(self, stmt: Stmt, target: str, adjoint: str, grad: str) -> None:
        names = [a.name for a in stmt.lhs.args if isinstance(a, Var)]
        if len(names) != len(stmt.lhs.args) or len(set(names)) != len(names):
            raise TCError(
                f"cannot differentiate a partial overwrite of '{target}' whose left-hand "
                "side is not plain index variables: not supported yet",
                stmt.span,
            )
        written: Expr | None = None
        for clause in stmt.where:
            if isinstance(clause, RangeConstraint):
                inside = al.conj(
                    Compare(CmpOp.LE, clause.lo, clause.expr),
                    Compare(CmpOp.LT, clause.expr, clause.hi),
                )
                written = al.conj(written, inside)
        idx = tuple(Var(n) for n in names)
        where = tuple(
            RangeConstraint(v, Const(0, ScalarType.INT32), d)
            for v, d in zip(idx, self.v.dims(target), strict=True)
        )
        kept = al.select(written, None, Access(adjoint, idx)) if written else Access(adjoint, idx)
        self._emit(Access(grad, idx), kept or Access(adjoint, idx), where)


__all__ = ["PassThrough"]
