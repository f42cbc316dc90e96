"""Reuse of the forward in a gradient: a costly expression that a forward output already
holds is read from that output instead of being computed again.

Requires: the gradient's statements (reads renamed to the versions they see) and the
          forward's `Saved` outputs: a tensor written once, by `T(v1, ..., vk) = e`
          with distinct plain variables on the left, ranges `vj in lo:hi` of sizes
          only, and `e` reading no index variable but v1..vk.
Ensures:  `reuse_forward(stmts, saved)` returns the statements with every
          subexpression equal to `e[v1 := w1, ..., vk := wk]` replaced by
          `T(w1, ..., wk)`, where each wj is a variable of the gradient statement
          ranging exactly over `lo:hi` of vj (so every read of T is in bounds and T
          holds that value there). Only costly `e` (a call such as `exp`, or a
          division) are reused: reading cheap arithmetic back costs more than it saves.

Worked example (softmax: `shifted(n, d) = exp(X(n, d) - rowmax(n))`)::

    X_grad(n, d) +=! shifted_grad_acc(n, d) * exp(X(n, d) - rowmax(n)) where n in 0:N, d in 0:D
  ==>
    X_grad(n, d) +=! shifted_grad_acc(n, d) * shifted(n, d) where n in 0:N, d in 0:D
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Expr,
    RangeConstraint,
    Stmt,
    Var,
)
from compiler.frontend.visit import Mutator, substitute, walk


@dataclasses.dataclass(frozen=True)
class Saved:
    """A forward output `tensor(vars) = rhs` over `ranges` (one (lo, hi) per var)."""

    tensor: str
    vars: tuple[str, ...]
    rhs: Expr
    ranges: tuple[tuple[Expr, Expr], ...]


def saved_outputs(
    stmts: Sequence[Stmt], outputs: Iterable[str], sizes: Iterable[str]
) -> list[Saved]:
    """The forward statements (reads already versioned) that qualify as `Saved`."""
    counts: dict[str, int] = {}
    for s in stmts:
        counts[s.lhs.name] = counts.get(s.lhs.name, 0) + 1
    size_names, out = set(sizes), []
    for s in stmts:
        name = s.lhs.name
        if name not in outputs or counts[name] != 1 or s.op is not AssignOp.ASSIGN:
            continue
        found = _saved(s, size_names)
        if found is not None and _costly(found.rhs):
            out.append(found)
    return out


def _saved(s: Stmt, sizes: set[str]) -> Saved | None:
    names = tuple(a.name for a in s.lhs.args if isinstance(a, Var))
    if len(names) != len(s.lhs.args) or len(set(names)) != len(names):
        return None
    ranges: dict[str, tuple[Expr, Expr]] = {}
    for clause in s.where:
        if not isinstance(clause, RangeConstraint) or not isinstance(clause.expr, Var):
            return None
        bound_vars = {e.name for b in (clause.lo, clause.hi) for e in walk(b) if isinstance(e, Var)}
        if not bound_vars <= sizes:
            return None
        ranges[clause.expr.name] = (clause.lo, clause.hi)
    if set(ranges) != set(names):
        return None
    used = {e.name for e in walk(s.rhs) if isinstance(e, Var)}
    if not used <= sizes | set(names) or any(
        isinstance(e, Access) and e.name == s.lhs.name for e in walk(s.rhs)
    ):
        return None
    return Saved(s.lhs.name, names, s.rhs, tuple(ranges[n] for n in names))


def _costly(e: Expr) -> bool:
    return any(
        isinstance(x, Call)
        and x.fn not in ("min", "max")
        or isinstance(x, Binary)
        and x.op is BinOp.DIV
        for x in walk(e)
    )


def reuse_forward(stmts: Sequence[Stmt], saved: Sequence[Saved]) -> list[Stmt]:
    """The statements with the saved outputs' expressions read back (see above)."""
    if not saved:
        return list(stmts)
    return [_Reuse(s, saved).stmt(s) for s in stmts]


class _Reuse(Mutator):
    def __init__(self, stmt: Stmt, saved: Sequence[Saved]) -> None:
        self.saved = saved
        self.ranges = {
            c.expr.name: (c.lo, c.hi)
            for c in stmt.where
            if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
        }

    def stmt(self, s: Stmt) -> Stmt:  # only the right-hand side
        rhs = self.expr(s.rhs)
        return s if rhs is s.rhs else dataclasses.replace(s, rhs=rhs)

    def expr(self, e: Expr) -> Expr:
        for saved in self.saved:
            read = self._match(saved, e)
            if read is not None:
                return read
        return self.generic(e)

    def _match(self, saved: Saved, e: Expr) -> Access | None:
        pattern = list(walk(saved.rhs))
        found = list(walk(e))
        if len(pattern) != len(found):
            return None
        binding: dict[str, Expr] = {}
        for p, f in zip(pattern, found, strict=True):
            if type(p) is not type(f):
                return None
            if isinstance(p, Var) and p.name in saved.vars:
                if binding.setdefault(p.name, f) != f:
                    return None
        if set(binding) != set(saved.vars) or substitute(saved.rhs, binding) != e:
            return None
        for name, bounds in zip(saved.vars, saved.ranges, strict=True):
            var = binding[name]
            if not isinstance(var, Var) or self.ranges.get(var.name) != bounds:
                return None
        return Access(saved.tensor, tuple(binding[n] for n in saved.vars))


__all__ = ["Saved", "reuse_forward", "saved_outputs"]
