"""Normal forms of gradient expressions: folded index arithmetic, signs, like terms.

    fold_index(e)          -> Expr   an integer affine expression, folded (`H + (y - H)` -> `y`)
    tidy(e, type_of)       -> Expr   signs pulled out, like terms collected, zeros dropped

Both are pure and return `e` itself (the same object) when they change nothing, so a
def nothing applies to prints as before. Every rewrite keeps the value:

- `fold_index` treats an integer expression as a sum of integer multiples of atoms
  (variables, and any subexpression that is not `+`, `-` or a product with a literal:
  `/` and `%` are floor division and remainder, never real division, so they stay
  atoms, their operands folded inside). Integer sums are exact (wrapping arithmetic
  is a ring), so the folded form has the same value; it is kept only when it has
  fewer nodes than the original, with the terms in their first appearance's order.
- `tidy` rewrites `-(-a)` to `a`, `(-a) * b` and `a * (-b)` to `-(a * b)`, `(-a) / b`
  to `-(a / b)` for floats (not integers: `(-7) / 2` floors to -4, `-(7 / 2)` is -3),
  `a + -b` to `a - b`, `x * 1` to `x`, `x + 0` to `x`; and collects like terms of a sum:
  `e + e` -> `2 * e`, `e - e` -> nothing, `2 * e + e` -> `3 * e`. Sign changes and
  `x + x == 2 * x` are exact in IEEE arithmetic; regrouping a sum's terms changes a
  value by rounding only, so it is never made where bits matter: inside a
  comparison's operands, or with `exact` (a recomputed value that is compared).

Worked example (layernorm's two contributions of `(X - mean) * (X - mean)`)::

    var_v1_grad(n) * (X(n, d) - mean(n)) + var_v1_grad(n) * (X(n, d) - mean(n))
  ==>
    2 * (var_v1_grad(n) * (X(n, d) - mean(n)))
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Cast,
    Compare,
    Const,
    Expr,
    ScalarType,
    Unary,
    UnaryOp,
)
from compiler.frontend.visit import children, walk, with_children

TypeOf = Callable[[Expr], ScalarType]
"""The scalar type of an expression of the statement being simplified (an index's for
one whose type cannot be told)."""

_SUMS = (BinOp.ADD, BinOp.SUB)
_INT64 = (-(2**63), 2**63 - 1)


# ------------------------------------------------------------ index arithmetic


def fold_index(e: Expr) -> Expr:
    """`e`, an integer expression, with its affine part folded (see the module doc). A
    cast is an atom, never entered (its operand may be a float)."""
    if isinstance(e, Cast):
        return e
    if not _is_affine_node(e):
        return _map_children(e, fold_index) if children(e) else e
    coeffs: dict[Expr, int] = {}
    constant = _linear(e, 1, coeffs)
    if not all(_INT64[0] <= k <= _INT64[1] for k in (constant, *coeffs.values())):
        # a folded literal beyond int64 (`M * M` of a literal near 2^63) has no type:
        # keep the expression as written, which range inference reports
        return _map_children(e, fold_index) if children(e) else e
    folded = _rebuild(coeffs, constant)
    return folded if _size(folded) < _size(e) else _map_children(e, fold_index)


def _is_affine_node(e: Expr) -> bool:
    if isinstance(e, Binary):
        return e.op in _SUMS or (e.op is BinOp.MUL and _int_literal(e) is not None)
    return isinstance(e, Unary) and e.op is UnaryOp.NEG


def _int_literal(e: Binary) -> tuple[int, Expr] | None:
    """`(c, x)` for `c * x` or `x * c` with an integer literal `c`."""
    for c, x in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if isinstance(c, Const) and isinstance(c.value, int):
            return c.value, x
    return None


def _linear(e: Expr, scale: int, coeffs: dict[Expr, int]) -> int:
    """Adds `scale * e` to `coeffs` (atom -> multiple); returns its constant part."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return scale * e.value
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return _linear(e.operand, -scale, coeffs)
    if isinstance(e, Binary) and e.op in _SUMS:
        sign = 1 if e.op is BinOp.ADD else -1
        return _linear(e.lhs, scale, coeffs) + _linear(e.rhs, sign * scale, coeffs)
    if isinstance(e, Binary) and e.op is BinOp.MUL and (found := _int_literal(e)) is not None:
        return _linear(found[1], scale * found[0], coeffs)
    atom = fold_index(e)
    coeffs[atom] = coeffs.get(atom, 0) + scale
    return 0


def _rebuild(coeffs: dict[Expr, int], constant: int) -> Expr:
    """The sum of `coeffs` (in insertion order) and `constant`, subtractions for
    negative multiples (`y - 2 * kh + 1`)."""
    result = _signed_sum(coeffs)
    if result is None:
        return _int(constant)
    if constant:
        result = Binary(BinOp.ADD if constant > 0 else BinOp.SUB, result, _int(abs(constant)))
    return result


def _signed_sum(multiples: dict[Expr, int]) -> Expr | None:
    """`k1 * e1 + k2 * e2 ...` in insertion order, subtractions for negative multiples,
    zero multiples left out; None when nothing is left."""
    result: Expr | None = None
    for term, k in multiples.items():
        if k == 0:
            continue
        scaled = term if abs(k) == 1 else Binary(BinOp.MUL, _int(abs(k)), term)
        if result is None:
            result = scaled if k > 0 else Unary(UnaryOp.NEG, scaled)
        else:
            result = Binary(BinOp.ADD if k > 0 else BinOp.SUB, result, scaled)
    return result


def _int(value: int) -> Const:
    return Const(value, ScalarType.INT32 if -(2**31) <= value < 2**31 else ScalarType.INT64)


def _size(e: Expr) -> int:
    return sum(1 for _ in walk(e))


def _map_children(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    return with_children(e, tuple(f(c) for c in children(e)))


# ------------------------------------------------------------ signs and terms


def tidy(e: Expr, type_of: TypeOf, exact: bool = False) -> Expr:
    """`e` with signs pulled out, like terms collected and zeros dropped (bottom-up;
    see the module doc); an access's subscripts are folded by `fold_index`. A float
    subexpression keeps its type: where the rewrite leaves no operand of that type
    (`A(i) - A(i)` of a double `A` is `double(0)`, not the int32 literal `0`), it is
    cast back, so nothing above it is computed in another precision.

    With `exact`, and always inside a comparison's operands, only the rewrites that
    keep every bit are made (signs and units): a candidate `(a - b) + a` of a `max=`
    is compared with the result computed in that order, and `2 * a - b` rounds
    differently, so the tie would be missed (fuzz seed 71118)."""
    if isinstance(e, Access):
        return _map_children(e, fold_index)
    if not children(e):
        return e
    original = e
    inner = exact or isinstance(e, Compare)
    e = _map_children(e, lambda c: tidy(c, type_of, inner))
    e = _signs(e, lambda x: type_of(x).is_float)
    if not exact and isinstance(e, Binary) and e.op in _SUMS:
        e = _collect(e)
    if e is not original:
        want = type_of(original)
        if want.is_float and type_of(e) is not want:
            e = Cast(want, e)
    return e


def _neg(e: Expr) -> Expr:
    return e.operand if isinstance(e, Unary) and e.op is UnaryOp.NEG else Unary(UnaryOp.NEG, e)


def _is_neg(e: Expr) -> bool:
    return isinstance(e, Unary) and e.op is UnaryOp.NEG


def _signs(e: Expr, is_float: Callable[[Expr], bool]) -> Expr:
    """One node's sign rules and units (`-(-a)`, `(-a) * b`, `a + -b`, `x * 1`, `x + 0`)."""
    if isinstance(e, Unary) and e.op is UnaryOp.NEG and _is_neg(e.operand):
        return e.operand.operand  # type: ignore[attr-defined]
    if not isinstance(e, Binary):
        return e
    a, b = e.lhs, e.rhs
    if e.op is BinOp.MUL or (e.op is BinOp.DIV and is_float(e)):
        if _unit(b, 1, a, is_float):
            return a
        if e.op is BinOp.MUL and _unit(a, 1, b, is_float):
            return b
        if _is_neg(a) or _is_neg(b):
            inner = Binary(e.op, _neg(a) if _is_neg(a) else a, _neg(b) if _is_neg(b) else b)
            return inner if _is_neg(a) and _is_neg(b) else Unary(UnaryOp.NEG, inner)
        return e
    if e.op in _SUMS:
        if _unit(b, 0, a, is_float):
            return a
        if _unit(a, 0, b, is_float):
            return b if e.op is BinOp.ADD else _neg(b)
        if _is_neg(b):
            op = BinOp.SUB if e.op is BinOp.ADD else BinOp.ADD
            return Binary(op, a, b.operand)  # type: ignore[attr-defined]
        if _is_neg(a) and e.op is BinOp.ADD:
            return Binary(BinOp.SUB, b, a.operand)  # type: ignore[attr-defined]
    return e


def _unit(e: Expr, value: int, other: Expr, is_float: Callable[[Expr], bool]) -> bool:
    """Whether `e` is the literal `value` and dropping it keeps `other`'s type (a float
    literal makes an integer `other` a float: `i * 1.0` stays)."""
    if not (isinstance(e, Const) and e.value == value):
        return False
    return isinstance(e.value, int) or is_float(other)


def _collect(e: Expr) -> Expr:
    """A sum with its like terms collected, or `e` itself when no two terms are alike
    and none is zero: `a * b + c + a * b` -> `2 * (a * b) + c`."""
    terms: list[tuple[int, Expr]] = []
    _summands(e, 1, terms)
    totals: dict[Expr, int] = {}
    for k, term in terms:
        totals[term] = totals.get(term, 0) + k
    if len(totals) == len(terms) and all(k != 0 for k in totals.values()):
        return e
    result = _signed_sum(totals)
    return result if result is not None else _int(0)


def _summands(e: Expr, sign: int, out: list[tuple[int, Expr]]) -> None:
    """The terms of a sum as (multiple, term): `a - 2 * b` -> [(1, a), (-2, b)]."""
    if isinstance(e, Binary) and e.op in _SUMS:
        _summands(e.lhs, sign, out)
        _summands(e.rhs, sign if e.op is BinOp.ADD else -sign, out)
    elif _is_neg(e):
        _summands(e.operand, -sign, out)  # type: ignore[attr-defined]
    elif isinstance(e, Binary) and e.op is BinOp.MUL and _numeric(e.lhs) is not None:
        out.append((sign * _numeric(e.lhs), e.rhs))  # type: ignore[operator]
    else:
        out.append((sign, e))


def _numeric(e: Expr) -> int | None:
    """An integer literal's value (float literals' multiples are never combined: their
    sum would be rounded to a new literal)."""
    if isinstance(e, Const) and isinstance(e.value, int) and e.dtype is not ScalarType.BOOL:
        return e.value
    return None


__all__ = ["TypeOf", "fold_index", "tidy"]
