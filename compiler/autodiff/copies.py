"""Copy propagation in a gradient def: an adjoint that is only a copy of another
tensor is not made; its readers read the original.

Requires: a gradient `Def` from `reverse` (statements in execution order; the first
          `keep` outputs are the caller's input gradients).
Ensures:  `propagate_copies(d, keep)` returns `d` without each statement
          `T(i0, ..., ik) +=! S(i0, ..., ik) where i0 in 0:d0, ..., ik in 0:dk`
          (or `=`) that writes T over its whole declared shape `(d0, ..., dk)`, when
          - T is an output of `d` beyond the first `keep` (an intermediate adjoint),
          - no other statement writes T,
          - S has T's dtype and declared shape, and no later statement writes S;
          every read of T then reads S, and T leaves the outputs. The values of the
          remaining outputs are unchanged. `d` is not modified.

Worked example (conv2d, whose output `O` is written, then updated in place by
`O = O + B(m)`: the adjoint of the first version is the caller's `O_grad` itself)::

    O_v1_grad(n, m, h, w) +=! O_grad(n, m, h, w) where n in 0:N, ..., w in 0:W - KW + 1
    I_grad(n, c, h + kh, w + kw) +=! O_v1_grad(n, m, h, w) * W1(m, c, kh, kw) ...
  ==>
    I_grad(n, c, h + kh, w + kw) +=! O_grad(n, m, h, w) * W1(m, c, kh, kw) ...

A copy is needed only where its source changes afterwards or its target receives
other contributions (an output really overwritten); those stay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.autodiff.rewrite import rename_reads
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Const,
    Def,
    Exists,
    Expr,
    Let,
    Param,
    RangeConstraint,
    Stmt,
    Var,
    WhereClause,
)


def propagate_copies(d: Def, keep: int) -> Def:
    """`d` with its whole-tensor copies into intermediate adjoints removed (see above)."""
    while True:
        found = _find_copy(d, keep)
        if found is None:
            return d
        index, target, source = found
        d = _drop_copy(d, index, target, source)


def _find_copy(d: Def, keep: int) -> tuple[int, str, str] | None:
    declared = {p.name: p for p in (*d.params, *d.outputs)}
    removable = {p.name for p in d.outputs[keep:]}
    writes: dict[str, list[int]] = {}
    for i, s in enumerate(d.stmts):
        writes.setdefault(s.lhs.name, []).append(i)
    for i, s in enumerate(d.stmts):
        target = s.lhs.name
        if target not in removable or writes[target] != [i]:
            continue
        if s.op not in (AssignOp.PLUS_INIT, AssignOp.ASSIGN) or not isinstance(s.rhs, Access):
            continue
        source = s.rhs.name
        if source == target or any(w > i for w in writes.get(source, ())):
            continue
        t, src = declared.get(target), declared.get(source)
        if t is None or src is None or not _same_shape(t, src):
            continue
        if s.rhs.args == s.lhs.args and _whole(s, t):
            return i, target, source
    return None


def _same_shape(a: Param, b: Param) -> bool:
    return a.dtype is not None and a.dtype == b.dtype and a.dims is not None and a.dims == b.dims


def _whole(s: Stmt, t: Param) -> bool:
    """Whether `s` writes every element of `t`: distinct plain variables on the left,
    each ranging over `0:<dim>`, and no other clause."""
    names = [a.name for a in s.lhs.args if isinstance(a, Var)]
    if len(names) != len(s.lhs.args) or len(set(names)) != len(names):
        return False
    ranges: dict[str, tuple[Expr, Expr]] = {}
    for clause in s.where:
        if not isinstance(clause, RangeConstraint) or not isinstance(clause.expr, Var):
            return False
        ranges[clause.expr.name] = (clause.lo, clause.hi)
    if set(ranges) != set(names):
        return False
    for name, dim in zip(names, t.dims or (), strict=True):
        lo, hi = ranges[name]
        if not (isinstance(lo, Const) and lo.value == 0 and hi == dim):
            return False
    return True


def _drop_copy(d: Def, index: int, target: str, source: str) -> Def:
    def rename(name: str) -> str:
        return source if name == target else name

    stmts = []
    for i, s in enumerate(d.stmts):
        if i == index:
            continue
        lhs = dataclasses.replace(s.lhs, args=tuple(rename_reads(a, rename) for a in s.lhs.args))
        where = tuple(_rename_clause(c, rename) for c in s.where)
        stmts.append(dataclasses.replace(s, lhs=lhs, rhs=rename_reads(s.rhs, rename), where=where))
    outputs = tuple(p for p in d.outputs if p.name != target)
    return dataclasses.replace(d, outputs=outputs, stmts=tuple(stmts))


def _rename_clause(clause: WhereClause, rename: Callable[[str], str]) -> WhereClause:
    if isinstance(clause, RangeConstraint):
        parts = (rename_reads(e, rename) for e in (clause.expr, clause.lo, clause.hi))
        expr, lo, hi = parts
        return dataclasses.replace(clause, expr=expr, lo=lo, hi=hi)
    if isinstance(clause, Let):
        return dataclasses.replace(clause, value=rename_reads(clause.value, rename))
    if isinstance(clause, Exists):
        return dataclasses.replace(clause, expr=rename_reads(clause.expr, rename))
    return clause


__all__ = ["propagate_copies"]
