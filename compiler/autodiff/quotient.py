"""The adjoint of a divisor outside a sum, read from the sum's result.

Requires: a forward statement `O(v) +=! N / D` (reads renamed to their versions) with
distinct plain variables `v` on the left and no `where` lets, whose divisor `D` uses
none of its reduction variables (only `v`).
Ensures:  `split_quotient(stmt)` is `(N / D, where_v)`: the caller backpropagates `N`
with seed `O_grad(v) / D` over the statement's ranges, and `D` with seed
`-O_grad(v) * O(v) / D` over the ranges of `v` alone (`where_v`), which is the same
derivative: `d/dD sum_r N / D = -sum_r N / D^2 = -O / D`. Else None.

Why: the literal adjoint of `D` sums `-O_grad * N / (D * D)` over every reduction
variable again, a pass as large as the forward's: attention's
`O(b, i, e) +=! P(b, i, j) * V(b, j, e) / l(b, i)` gave `l_grad(b, i)` a sum over `e`
and `j` (B * T * T * E terms, 1.0 of the gradient's 2.0 ms at B8 T128 E64, 2 threads);
from `O` it is a sum over `e` (B * T * E). PyTorch's autograd does the same for a
division: the denominator's gradient is `-grad * out / b`.
"""

from __future__ import annotations

from compiler.autodiff.products import lhs_where
from compiler.frontend.ast import AssignOp, Binary, BinOp, Let, RangeConstraint, Stmt, Var
from compiler.frontend.visit import walk


def split_quotient(stmt: Stmt) -> tuple[Binary, tuple[RangeConstraint, ...]] | None:
    """`(N / D, where_v)` for `O(v) +=! N / D` with `D` free of the reduction (module
    doc), or None."""
    if stmt.op is not AssignOp.PLUS_INIT or not isinstance(stmt.rhs, Binary):
        return None
    if stmt.rhs.op is not BinOp.DIV or any(isinstance(c, Let) for c in stmt.where):
        return None
    if not all(isinstance(a, Var) for a in stmt.lhs.args):
        return None
    lhs = [a.name for a in stmt.lhs.args]  # type: ignore[union-attr]
    if len(set(lhs)) != len(lhs):
        return None
    ranges = [c for c in stmt.where if isinstance(c, RangeConstraint)]
    bound = {c.expr.name for c in ranges if isinstance(c.expr, Var)}
    reduction = bound - set(lhs)
    if not reduction:
        return None
    used = {e.name for e in walk(stmt.rhs.rhs) if isinstance(e, Var)}
    if used & reduction:
        return None
    # the clauses over `v` alone, a clamp piece's condition on them too (`M - 1 - i in ...`)
    return stmt.rhs, lhs_where(stmt, tuple(ranges))


__all__ = ["split_quotient"]
