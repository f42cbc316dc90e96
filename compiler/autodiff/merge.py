"""Merging of gradient contributions: two `+=` statements into the same element over the
same domain become one statement (one pass over the domain instead of two).

Requires: a gradient `Def` from `reverse` (statements in execution order).
Ensures:  `merge_contributions(d)` returns `d` where a statement
          `T(a) += e2 where W` is folded into an earlier `T(a) +=[!] e1 where W` (the
          same left-hand side and the same where clauses, so the same domain and
          reduction variables) as `T(a) +=[!] e1 + e2 where W`, when neither reads T
          and no statement between them reads or writes T or writes what the later
          one reads (so moving it up changes nothing it sees). Sums are regrouped
          (`(x + e1) + e2` becomes `x + (e1 + e2)`, per element): the same value up
          to rounding. `d` is not modified.

Worked example (layernorm: `(X - mean) * (X - mean)` gives X two contributions)::

    X_grad(n, d) += var_v1_grad(n) * (X(n, d) - mean(n)) where n in 0:N, d in 0:D
    mean_grad_acc(n) += -(var_v1_grad(n) * (X(n, d) - mean(n))) where n in 0:N, d in 0:D
    X_grad(n, d) += var_v1_grad(n) * (X(n, d) - mean(n)) where n in 0:N, d in 0:D
  ==>
    X_grad(n, d) += var_v1_grad(n) * (X(n, d) - mean(n)) + var_v1_grad(n) * (X(n, d) - mean(n)) ...
    mean_grad_acc(n) += -(var_v1_grad(n) * (X(n, d) - mean(n))) where n in 0:N, d in 0:D
"""

from __future__ import annotations

import dataclasses

from compiler.frontend.ast import Access, AssignOp, Binary, BinOp, Def, Stmt
from compiler.frontend.scopes import where_exprs
from compiler.frontend.visit import walk


def merge_contributions(d: Def) -> Def:
    """`d` with its mergeable `+=` contributions folded together (see above)."""
    stmts = list(d.stmts)
    changed = False
    j = 1
    while j < len(stmts):
        i = _partner(stmts, j)
        if i is None:
            j += 1
            continue
        first, later = stmts[i], stmts[j]
        rhs = Binary(BinOp.ADD, first.rhs, later.rhs)
        stmts[i] = dataclasses.replace(first, rhs=rhs)
        del stmts[j]
        changed = True
    return dataclasses.replace(d, stmts=tuple(stmts)) if changed else d


def _partner(stmts: list[Stmt], j: int) -> int | None:
    """The earlier statement that statement `j` can be folded into, or None."""
    later = stmts[j]
    target = later.lhs.name
    if later.op is not AssignOp.PLUS or target in _reads(later):
        return None
    later_reads = _reads(later)
    for i in range(j - 1, -1, -1):
        s = stmts[i]
        if s.lhs.name == target:
            mergeable = (
                s.op in (AssignOp.PLUS, AssignOp.PLUS_INIT)
                and s.lhs == later.lhs
                and s.where == later.where
                and target not in _reads(s)
            )
            return i if mergeable else None
        if target in _reads(s) or s.lhs.name in later_reads:
            return None
    return None


def _reads(s: Stmt) -> set[str]:
    roots = (s.rhs, *s.lhs.args, *where_exprs(s))
    return {e.name for root in roots for e in walk(root) if isinstance(e, Access)}


__all__ = ["merge_contributions"]
