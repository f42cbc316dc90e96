"""Whether a statement's domain is empty for every size, decided without isl.

    runs_never(where, sizes) -> bool

The clamp split (`compiler.autodiff.clamps`) writes one piece per choice of a clamp;
where a choice is never taken (`A(min(i, N - 1)) where i in 0:N` never reads
`A(N - 1)` through the second argument) its piece must be dropped, or range
inference rejects the gradient's statement that runs for no sizes. `autodiff`
imports only `frontend` (see STYLE.md, architecture), so this is a small
Fourier-Motzkin elimination over the where clauses' affine constraints, every
variable an integer and every size >= 1:

    i in 0:N, i - (N - 1) in 1:...   ->   i >= 0, N - 1 - i >= 0, i - N >= 0, N - 1 >= 0
    eliminate i: N - 1 - N >= 0  ->  -1 >= 0: empty

It is conservative: a clause that is not affine is left out (the set only grows),
and past `_LIMIT` constraints it answers "not known to be empty" (False).
"""

from __future__ import annotations

from fractions import Fraction
from math import floor, gcd

from compiler.frontend.ast import (
    Binary,
    BinOp,
    Call,
    Const,
    Expr,
    RangeConstraint,
    Unary,
    UnaryOp,
    Var,
)

_LIMIT = 400  # constraints kept during one elimination: beyond, give up
Linear = dict[str, Fraction]  # variable -> coefficient, "" -> constant; means >= 0


def runs_never(where: tuple, sizes: tuple[str, ...] | list[str]) -> bool:
    """Whether no integer point satisfies the affine range constraints of `where`
    for any sizes (each >= 1). False when unsure."""
    rows: list[Linear] = [{s: Fraction(1), "": Fraction(-1)} for s in sizes]
    for clause in where:
        if isinstance(clause, RangeConstraint):
            rows.extend(_range_rows(clause))
    return _infeasible(rows)


def _range_rows(c: RangeConstraint) -> list[Linear]:
    """`e in lo:hi`: e - lo >= 0 and hi - 1 - e >= 0 for each affine part (a `max`
    lower bound or a `min` upper bound is each of its arguments)."""
    e = _linear(c.expr)
    if e is None:
        return []
    rows = []
    for lo in _parts(c.lo, "max"):
        rows.append(_combine(e, 1, lo, -1))
    for hi in _parts(c.hi, "min"):
        row = _combine(hi, 1, e, -1)
        row[""] = row.get("", Fraction(0)) - 1
        rows.append(row)
    return rows


def _parts(bound: Expr, fn: str) -> list[Linear]:
    if isinstance(bound, Call) and bound.fn == fn:
        return [p for a in bound.args for p in _parts(a, fn)]
    linear = _linear(bound)
    return [] if linear is None else [linear]


def _linear(e: Expr) -> Linear | None:
    if isinstance(e, Const):
        return {"": Fraction(e.value)} if isinstance(e.value, int) else None
    if isinstance(e, Var):
        return {e.name: Fraction(1)}
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        inner = _linear(e.operand)
        return None if inner is None else _combine({}, 1, inner, -1)
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        lhs, rhs = _linear(e.lhs), _linear(e.rhs)
        if lhs is None or rhs is None:
            return None
        return _combine(lhs, 1, rhs, 1 if e.op is BinOp.ADD else -1)
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        lhs, rhs = _linear(e.lhs), _linear(e.rhs)
        if lhs is None or rhs is None:
            return None
        if set(lhs) <= {""}:
            return _combine({}, 1, rhs, lhs.get("", Fraction(0)))
        if set(rhs) <= {""}:
            return _combine({}, 1, lhs, rhs.get("", Fraction(0)))
    return None


def _combine(a: Linear, ka: Fraction | int, b: Linear, kb: Fraction | int) -> Linear:
    out = {k: v * ka for k, v in a.items()}
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + v * kb
    return {k: v for k, v in out.items() if v != 0}


def _tighten(row: Linear) -> Linear:
    """Integer rounding: `2x - 1 >= 0` holds for integers exactly when `x - 1 >= 0`."""
    coeffs = [v for k, v in row.items() if k != ""]
    if not coeffs or any(v.denominator != 1 for v in row.values()):
        return row
    g = 0
    for v in coeffs:
        g = gcd(g, int(v))
    out = {k: v / g for k, v in row.items() if k != ""}
    out[""] = Fraction(floor(row.get("", Fraction(0)) / g))
    return out


def _infeasible(rows: list[Linear]) -> bool:
    rows = [_tighten(r) for r in rows]
    while True:
        if any(set(r) <= {""} and r.get("", 0) < 0 for r in rows):
            return True
        names = sorted({k for r in rows for k in r if k != ""})
        if not names:
            return False
        # the variable whose elimination makes the fewest new constraints first
        var = min(names, key=lambda n: _products(rows, n))
        keep = [r for r in rows if var not in r]
        pos = [r for r in rows if r.get(var, 0) > 0]
        neg = [r for r in rows if r.get(var, 0) < 0]
        for p in pos:
            for n in neg:
                keep.append(_tighten(_combine(p, -n[var], n, p[var])))
        if len(keep) > _LIMIT:
            return False
        rows = keep


def _products(rows: list[Linear], var: str) -> int:
    pos = sum(1 for r in rows if r.get(var, 0) > 0)
    neg = sum(1 for r in rows if r.get(var, 0) < 0)
    return pos * neg - pos - neg


__all__ = ["runs_never"]
