"""Products in AD: the partial of a product reduction with respect to one of its
terms, exact where terms are zero, and the shape checks of `*=` into an output's
previous contents. Used by `reverse` (gradients) and `forward` (tangents).

Requires: statements of a `RangedDef` (every variable ranged in `where`).
Ensures:  `exact_partial(x, count, nonzero, zeros)`: the product of the other terms of
`prod_r x_r`, given auxiliary reductions over the statement's left-hand side (`count`
zero terms, `nonzero` the product of the others, `zeros` the sum of the zero terms,
or None); `exact_product(count, nonzero, zeros)`: the whole product from the same
reductions; `terms(x)`: what those reductions sum or multiply; `reduced(stmt)`, `injective(stmt, sizes)`, `distinct_terms(stmt, sizes, inputs)` (whether an extremum's
tied terms can be one value), `at_least_one(count)`, `lhs_where(stmt, where)`,
`first_write(stmt, target)`.

Why `zeros`: its value is 0, but its derivative is the sum of the zero terms'
directions, so the partial stays exact to differentiate again (`Kernel.hvp`, forward
over reverse). With one zero term `z`, another term's partial is `nonzero / x_r * x_z`
(0, with derivative `nonzero / x_r * dx_z`); with two, `z` and `y`, `z`'s partial is
`nonzero * x_y` (`x_y` is `zeros - x_z`); with more every partial is 0 and so is its
derivative. Without `zeros` (a tangent, differentiated once) those branches are 0.
"""

from __future__ import annotations

from fractions import Fraction

from compiler.autodiff import algebra as al
from compiler.autodiff.emptiness import affine_cases
from compiler.diagnostics import TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Const,
    Expr,
    RangeConstraint,
    ScalarType,
    Select,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import Bound, CheckedDef
from compiler.frontend.scopes import walk


def terms(x: Expr) -> tuple[Expr, Expr, Expr]:
    """The right-hand sides of the auxiliary reductions over the terms `x` of a
    product: `count` (+=!, int: 1 at a zero term), `nonzero` (*=!: 1 at a zero term,
    else the term) and `zeros` (+=!: the zero terms, 0 elsewhere)."""
    is_zero = al.eq(x, al.const(0))
    return al.indicator(is_zero), Select(is_zero, al.const(1), x), Select(is_zero, x, al.const(0))


def exact_partial(x: Expr, count: Expr, nonzero: Expr, zeros: Expr | None = None) -> Expr:
    """The product of the terms other than `x` (module doc)."""
    others = al.div(nonzero, x)
    one = al.eq(count, al.const(1))
    two_zeros = one_zero = None
    if zeros is not None:  # the branches that keep the derivative (module doc)
        two_zeros = al.select(al.eq(count, al.const(2)), al.mul(nonzero, al.sub(zeros, x)), None)
        one_zero = al.select(one, al.mul(others, zeros), None)
    at_zero = al.select(one, nonzero, two_zeros)
    elsewhere = al.select(al.eq(count, al.const(0)), others, one_zero)
    return Select(al.eq(x, al.const(0)), at_zero or al.const(0), elsewhere or al.const(0))


def exact_product(count: Expr, nonzero: Expr, zeros: Expr | None = None) -> Expr:
    """The product of all the terms from the same reductions: `nonzero` without a zero
    term, else 0 (with one zero term and `zeros`, `nonzero * x_z`: 0 with the
    derivative `nonzero * dx_z`)."""
    one_zero = None
    if zeros is not None:
        one_zero = al.select(al.eq(count, al.const(1)), al.mul(nonzero, zeros), None)
    return al.select(al.eq(count, al.const(0)), nonzero, one_zero) or al.const(0)


def injective(stmt: Stmt, sizes: tuple[str, ...] | list[str]) -> bool:
    """Whether the left-hand side's subscripts, as a map of its variables, are one to
    one (an affine map of full column rank; `O(i + k)` is not: it is a reduction although
    every variable is on the left). False when unsure (a subscript that is not affine)."""
    names = sorted(
        {e.name for a in stmt.lhs.args for e in walk(a) if isinstance(e, Var)} - set(sizes)
    )
    rows = _affine_rows(stmt.lhs.args, names, sizes)
    return rows is not None and _rank(rows) == len(names)


def distinct_terms(
    stmt: Stmt, sizes: tuple[str, ...] | list[str], inputs: frozenset[str] | set[str]
) -> bool:
    """Whether two points of `stmt` that write one element have distinct terms, so
    that two of an element's terms are one value only by a tie of distinct values.

    The term must be one read of a float input (independent values, unlike an
    intermediate's elements or an index tensor's), plus or minus what is the same at
    every point of the element, negated or scaled by a nonzero literal: `I(n, c, 2 *
    h + kh, 2 * w + kw)`, `S(i, k) - M(i)`. The left-hand side's subscripts and that
    read's together are an affine map (no min, max or division) of full column rank in
    the statement's variables. False when unsure. Not so for `A(min(i + k, N - 1))`
    (the edge element at several `k`), a term without the summed variable (`O(i) max=!
    A(i) where k in 0:3`), `B(idx(k))` (fuzz seed 50080: `idx` may repeat a value), or
    a term whose read a ternary may skip or a factor may zero (seed 50381: `c ? 2.0 :
    A(k3, k4)` is one value at every `k4` where `c` holds)."""
    reads = [e for e in walk(stmt.rhs) if isinstance(e, Access)]
    parts = [*stmt.lhs.args, *(a for r in reads for a in r.args)]
    parts += [p for c in stmt.where if isinstance(c, RangeConstraint) for p in (c.expr, c.lo, c.hi)]
    names = sorted({e.name for p in parts for e in walk(p) if isinstance(e, Var)} - set(sizes))
    lhs = _affine_rows(stmt.lhs.args, names, sizes)
    if lhs is None:
        return False
    if _rank(lhs) == len(names):  # one point per element
        return True
    plain = {a.name for a in stmt.lhs.args if isinstance(a, Var)}
    fixed = set(sizes) | (plain if len(plain) == len(stmt.lhs.args) else set())
    read = _witness(stmt.rhs, fixed)
    if read is None or read.name not in inputs:
        return False
    rows = _affine_rows(read.args, names, sizes)
    return rows is not None and _rank(lhs + rows) == len(names)


# builtins that are nowhere locally constant (zero only on a set of measure zero)
_SMOOTH = frozenset(
    "exp expf exp2 expm1 log logf log2 log10 log1p sqrt rsqrt cbrt sin cos tan sinh cosh"
    " tanh asinh atan sigmoid erf".split()
)


def distinct_tensors(
    stmts: tuple[Stmt, ...], sizes: tuple[str, ...] | list[str], inputs: frozenset[str]
) -> frozenset[str]:
    """Intermediates whose elements are distinct functions of the float `inputs`, so a
    later extremum over them ties only at a tie of distinct values
    (`distinct_terms`): written by one statement, `=` or `+=!`, with plain distinct
    left-hand-side variables and a right-hand side built from the inputs' reads,
    nonzero literals, `+ - * /` and builtins nowhere locally constant; and two of its
    elements read different elements of some input (the reads' subscripts that use
    only left-hand-side variables, together of full rank: attention's `scores(b, t,
    s) +=! Q(b, t, d) * K(b, s, d)` tells `t` by Q and `s` by K)."""
    writes: dict[str, int] = {}
    for stmt in stmts:
        writes[stmt.lhs.name] = writes.get(stmt.lhs.name, 0) + 1
    found: set[str] = set()
    for stmt in stmts:
        lhs = [a.name for a in stmt.lhs.args if isinstance(a, Var)]
        if (
            writes[stmt.lhs.name] != 1
            or stmt.op not in (AssignOp.ASSIGN, AssignOp.PLUS_INIT)
            or len(lhs) != len(stmt.lhs.args)
            or len(set(lhs)) != len(lhs)
            or set(lhs) & set(sizes)
            or not _analytic(stmt.rhs, inputs | found)
        ):
            continue
        rows: list[list[Fraction]] = []
        for read in (e for e in walk(stmt.rhs) if isinstance(e, Access)):
            for arg in read.args:
                used = {v.name for v in walk(arg) if isinstance(v, Var)} - set(sizes)
                if used <= set(lhs):
                    row = _affine_rows((arg,), lhs, sizes)
                    rows += row or []
        if _rank(rows) == len(lhs):
            found.add(stmt.lhs.name)
    return frozenset(found)


def independent(checked: CheckedDef) -> frozenset[str]:
    """The tensors of `checked` whose distinct elements are distinct values for
    `distinct_terms`: the float inputs and `distinct_tensors` of them."""
    floats = frozenset(t.name for t in checked.inputs if t.dtype.is_float)
    return floats | distinct_tensors(checked.definition.stmts, checked.size_params, floats)


def _analytic(e: Expr, inputs: frozenset[str] | set[str]) -> bool:
    """Whether `e` is built from reads of `inputs`, nonzero literals, `+ - * /`,
    negation and `_SMOOTH` builtins: nowhere locally constant, so it is zero, or equal
    to another such expression of other elements, only on a set of measure zero."""
    if isinstance(e, Access):
        return e.name in inputs
    if isinstance(e, Const):
        return e.value != 0
    if isinstance(e, Unary):
        return e.op is UnaryOp.NEG and _analytic(e.operand, inputs)
    if isinstance(e, Binary):
        ops = (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV)
        return e.op in ops and _analytic(e.lhs, inputs) and _analytic(e.rhs, inputs)
    if isinstance(e, Call):
        return e.fn in _SMOOTH and all(_analytic(a, inputs) for a in e.args)
    return False


def _witness(e: Expr, fixed: set[str]) -> Access | None:
    """The read a term is, up to adding what uses only `fixed` names (the same at
    every point of an element), negating, and scaling by a nonzero literal."""
    if isinstance(e, Access):
        return e
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return _witness(e.operand, fixed)
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        for side, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            if {v.name for v in walk(other) if isinstance(v, Var)} <= fixed:
                return _witness(side, fixed)
        return None
    if isinstance(e, Binary) and e.op in (BinOp.MUL, BinOp.DIV):
        if isinstance(e.rhs, Const) and e.rhs.value != 0:
            return _witness(e.lhs, fixed)
        if e.op is BinOp.MUL and isinstance(e.lhs, Const) and e.lhs.value != 0:
            return _witness(e.rhs, fixed)
    return None


def _affine_rows(
    args: tuple[Expr, ...], names: list[str], sizes: tuple[str, ...] | list[str]
) -> list[list[Fraction]] | None:
    """The coefficients of `names` in each of `args`; None where one is not affine in
    them and the sizes alone (a min, a max, a floor division's quotient)."""
    rows = []
    for arg in args:
        cases = affine_cases(arg)
        if cases is None or len(cases) != 1 or cases[0][0]:
            return None
        linear = cases[0][1]
        if any(k != "" and k not in names and k not in sizes for k in linear):
            return None
        rows.append([linear.get(n, Fraction(0)) for n in names])
    return rows


def at_least_one(count: Expr) -> Expr:
    """`max(count, 1)`, the divisor of a tie count: a recomputed candidate whose bits
    differ from the forward's result leaves none counted, and then no share (not 0/0)."""
    return Call("max", (count, Const(1, ScalarType.INT32)))


def _rank(rows: list[list[Fraction]]) -> int:
    rows = [list(r) for r in rows]
    rank = 0
    for col in range(len(rows[0]) if rows else 0):
        pivot = next((r for r in range(rank, len(rows)) if rows[r][col] != 0), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for r in range(len(rows)):
            if r != rank and rows[r][col] != 0:
                k = rows[r][col] / rows[rank][col]
                rows[r] = [x - k * y for x, y in zip(rows[r], rows[rank], strict=True)]
        rank += 1
    return rank


def reduced(stmt: Stmt) -> bool:
    """Whether `stmt` ranges over a variable its left-hand side does not name."""
    return len(lhs_where(stmt, stmt.where)) != len(stmt.where)


def lhs_where(stmt: Stmt, where: tuple, bounds: tuple[Bound, ...] | None = None) -> tuple:
    """The clauses of `where` over the left-hand side's variables only (the range
    constraints of the reduction's variables dropped). The index variables are the
    left-hand side's and those a clause ranges (`k in 0:M`); any other name is a size,
    so a clamp piece's condition on the written elements (`M - 1 - i in 0:M - i`) is
    kept. A left-hand-side variable whose own range is dropped (it names a reduction
    variable: `i in 0:k + 1`) gets its dimension's range in `bounds`, the output's
    written bounds (`RangedDef.bounds_of`): a superset of the elements the statement
    writes, inside the output."""
    names = {e.name for a in stmt.lhs.args for e in walk(a) if isinstance(e, Var)}
    index = names | {
        c.expr.name for c in where if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
    }

    def over_lhs(c: RangeConstraint) -> bool:
        used = {e.name for part in (c.expr, c.lo, c.hi) for e in walk(part) if isinstance(e, Var)}
        return used & index <= names

    kept = tuple(c for c in where if not isinstance(c, RangeConstraint) or over_lhs(c))
    if bounds is None:
        return kept
    ranged = {
        c.expr.name for c in kept if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
    }
    boxed = []
    for a, b in zip(stmt.lhs.args, bounds, strict=True):
        if isinstance(a, Var) and a.name not in ranged:
            ranged.add(a.name)
            boxed.append(RangeConstraint(Var(a.name), b.lo, b.hi))
    return (*kept, *boxed)


def first_write(stmt: Stmt, target: str) -> TCError:
    """The error for a reduction without '!' (`*=`, `max=`) as the first write of
    `target`."""
    op = stmt.op.value
    return TCError(
        f"cannot differentiate `{op}` without '!' as the first write of '{target}': "
        "its previous contents are not a value of the def",
        stmt.span,
        hint=f"use `{op}!`, or write the previous value with `=` first",
    )


__all__ = [
    "at_least_one",
    "distinct_tensors",
    "distinct_terms",
    "independent",
    "exact_partial",
    "exact_product",
    "first_write",
    "injective",
    "lhs_where",
    "reduced",
    "terms",
]
