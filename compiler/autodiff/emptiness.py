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

A `min`/`max` anywhere in a clause (`i in 0:max(N, 2) - 1`) is split into its
cases, each a conjunction of affine constraints; the domain is empty when every
case is. A floor division or modulo by a positive constant c (`i in 0:(N - 3) / 3 + 1`)
is a fresh integer q with `c*q <= N - 3 <= c*q + c - 1`. It is conservative: a clause
that is not affine, or one whose cases would take the conjunctions past `_CASES`, is
left out (the set only grows; a clause of many cases then does not hide what the
others decide), and past `_LIMIT` constraints it answers "not known to be empty"
(False).
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
_CASES = 64  # conjunctions a min/max case split may make: beyond, give up
Linear = dict[str, Fraction]  # variable -> coefficient, "" -> constant; means >= 0


def runs_never(where: tuple, sizes: tuple[str, ...] | list[str]) -> bool:
    """Whether no integer point satisfies the affine range constraints of `where`
    for any sizes (each >= 1). False when unsure."""
    rows: list[Linear] = [{s: Fraction(1), "": Fraction(-1)} for s in sizes]
    cases: list[list[Linear]] = [rows]
    clauses = [_range_rows(c) for c in where if isinstance(c, RangeConstraint)]
    # the clauses of fewest cases first; one that would make more than `_CASES` is
    # left out (the set only grows)
    for extra_rows in sorted(clauses, key=len):
        if len(cases) * len(extra_rows) > _CASES:
            continue
        cases = [case + extra for case in cases for extra in extra_rows]
    return all(_infeasible(case) for case in cases)


def _range_rows(c: RangeConstraint) -> list[list[Linear]]:
    """`e in lo:hi`: e - lo >= 0 and hi - 1 - e >= 0, one conjunction per case of
    the `min`/`max` in e, lo and hi (`max(a, b)` is a where a - b >= 0, else b where
    b - a - 1 >= 0). A part that is not affine is left out (the set only grows)."""
    out = []
    for e_conds, e in affine_cases(c.expr) or [([], None)]:
        for lo_conds, lo in affine_cases(c.lo) or [([], None)]:
            for hi_conds, hi in affine_cases(c.hi) or [([], None)]:
                rows = e_conds + lo_conds + hi_conds
                if e is not None and lo is not None:
                    rows.append(_combine(e, 1, lo, -1))
                if e is not None and hi is not None:
                    row = _combine(hi, 1, e, -1)
                    row[""] = row.get("", Fraction(0)) - 1
                    rows.append(row)
                out.append(rows)
    return out


Case = tuple[list[Linear], Linear]  # (conditions, each >= 0; the value where they hold)


def affine_cases(e: Expr) -> list[Case] | None:
    """`e` as affine values, each under affine conditions that together cover every
    point; None when some part is not affine."""
    if isinstance(e, Const):
        return [([], {"": Fraction(e.value)})] if isinstance(e.value, int) else None
    if isinstance(e, Var):
        return [([], {e.name: Fraction(1)})]
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        inner = affine_cases(e.operand)
        return None if inner is None else [(c, _combine({}, 1, v, -1)) for c, v in inner]
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        lhs, rhs = affine_cases(e.args[0]), affine_cases(e.args[1])
        if lhs is None or rhs is None or len(lhs) * len(rhs) * 2 > _CASES:
            return None
        sign = 1 if e.fn == "max" else -1  # max: a where a - b >= 0; min: where b - a >= 0
        out: list[Case] = []
        for ca, a in lhs:
            for cb, b in rhs:
                takes_a = _combine(a, sign, b, -sign)
                takes_b = _combine(b, sign, a, -sign)
                takes_b[""] = takes_b.get("", Fraction(0)) - 1
                out.append(([*ca, *cb, takes_a], a))
                out.append(([*ca, *cb, takes_b], b))
        return out
    if isinstance(e, Binary) and e.op in (BinOp.DIV, BinOp.MOD):
        return _floor_cases(e)
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
        lhs, rhs = affine_cases(e.lhs), affine_cases(e.rhs)
        if lhs is None or rhs is None or len(lhs) * len(rhs) > _CASES:
            return None
        out = []
        for ca, a in lhs:
            for cb, b in rhs:
                if e.op is not BinOp.MUL:
                    out.append(([*ca, *cb], _combine(a, 1, b, 1 if e.op is BinOp.ADD else -1)))
                elif set(a) <= {""}:
                    out.append(([*ca, *cb], _combine({}, 1, b, a.get("", Fraction(0)))))
                elif set(b) <= {""}:
                    out.append(([*ca, *cb], _combine({}, 1, a, b.get("", Fraction(0)))))
                else:
                    return None
        return out
    return None


def _floor_cases(e: Binary) -> list[Case] | None:
    """`a / c` and `a % c` for an integer constant c >= 1 (floor division, isl's and
    Halide's): a fresh integer q with `a - c*q >= 0` and `c*q + c - 1 - a >= 0`; the
    quotient is q, the remainder `a - c*q`. q is named by `a` and c, so one floor of one
    value is one variable within a case. None when the divisor is not such a constant."""
    divisor = e.rhs
    if not (isinstance(divisor, Const) and isinstance(divisor.value, int) and divisor.value >= 1):
        return None
    c = divisor.value
    inner = affine_cases(e.lhs)
    if inner is None:
        return None
    out: list[Case] = []
    for conds, a in inner:
        q = {_quotient_name(a, c): Fraction(1)}
        lower = _combine(a, 1, q, -c)  # a - c*q >= 0
        upper = _combine(q, c, a, -1)  # c*q + c - 1 - a >= 0
        upper[""] = upper.get("", Fraction(0)) + c - 1
        value = q if e.op is BinOp.DIV else lower
        out.append(([*conds, lower, upper], value))
    return out


def _quotient_name(a: Linear, c: int) -> str:
    """A key no index variable or size can have (it holds spaces and a slash)."""
    terms = " ".join(f"{v}*{k or '1'}" for k, v in sorted(a.items()))
    return f"floor({terms} / {c})"


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


__all__ = ["affine_cases", "runs_never"]
