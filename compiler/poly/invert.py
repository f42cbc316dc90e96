"""Index inversion with isl: reschedule a statement by the elements it writes.

Part of `poly.gather` (scatter -> gather). Given a statement's iteration domain
`D = { S[v...] }` and its quasi-affine write map `S[v...] -> X[e...]`, this module

1. chooses *inner* variables (`choose_inner`): the schedule `[e..., inner...]` must be
   injective on `D`, so every domain point gets exactly one (outer, inner) point. As in
   NOTES.md: walk candidates (reduction variables first, then variables with small
   ranges); keep a candidate unless the current prefix already determines it
   (`prefix^-1 . (S -> [v])` single-valued); stop when the prefix is injective. At
   each step the candidate whose addition leaves the fewest existential variables
   (divisibility facts) in the image wins, ties going to the order of preference, so
   `2*h + kh` keeps `h` inside (`kh = y - 2*h`) and needs no guard. The chosen
   variables then nest in the order of preference. Before that search the gather
   pass asks `unit_inner`, which decides from the subscripts' integer coefficients
   alone: one variable with coefficient +-1 eliminated per subscript (unimodular, at
   most one inner variable per subscript), the others inner; it needs no isl work
   and its image needs no divisibility constraint;
2. inverts the schedule (`invert`): the image `T = { [y..., z...] }` of `D`, split into
   disjoint convex pieces, and per piece the original variables as quasi-affine
   functions of `y` and `z`, every outer and inner variable's exact range as TC
   expressions of the sizes and the *earlier* variables, and the divisibility
   constraints the ranges cannot say (`(y - kh) % 2 in 0:1`).

isl does every step; conversions back to TC go through `isl_bridge.pwaff_to_expr`
by turning the earlier variables into parameters.

Worked example: `I_grad(n, c, h + kh, w + kw) += ...` over `n, c, h, kh, w, kw, m`
with `h in 0:H - KH + 1`: inner variables `m, kh, kw`; with outer names `n, c, y, x`
the one piece says `h = y - kh`, `w = x - kw`, `y in 0:H`,
`kh in max(0, y + KH - H):min(KH, y + 1)`, and no guard.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import islpy as isl

from compiler.diagnostics import InternalError
from compiler.frontend.ast import Binary, BinOp, Const, Expr, ScalarType, Var
from compiler.frontend.visit import Mutator
from compiler.poly.isl_bridge import StmtSpace, aff_to_expr, condition_of, plus, pwaff_to_expr

_SET = isl.dim_type.set
_PARAM = isl.dim_type.param
_IN = isl.dim_type.in_
_OUT = isl.dim_type.out
_DIV = isl.dim_type.div


class Inexpressible(InternalError):
    """The ranges and guards TC can write would not state a piece exactly (its image
    has existential variables without a floor expression)."""


@dataclass(frozen=True, slots=True)
class Range:
    """`expr in lo:hi` as TC expressions (a where clause)."""

    expr: Expr
    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Piece:
    """One convex piece of the rescheduled domain.

    `ranges`: one per outer, then inner variable, in schedule order; each bound uses
    only sizes and earlier variables. `guards`: further constraints (divisibility).
    `values`: every original variable as an expression of the new variables."""

    ranges: tuple[Range, ...]
    guards: tuple[Range, ...]
    values: tuple[tuple[str, Expr], ...]

    def value_of(self, name: str) -> Expr:
        return dict(self.values)[name]


# ------------------------------------------------------------ choosing inner variables


def _project(domain: isl.Set, pos: int) -> isl.Map:
    """`S[v...] -> [v_pos]` on `domain`."""
    n = domain.dim(_SET)
    ident = isl.Map.identity(domain.get_space().map_from_set())
    proj = ident.project_out(_OUT, pos + 1, n - pos - 1).project_out(_OUT, 0, pos)
    return proj.reset_tuple_id(_OUT).intersect_domain(domain)


def _n_divs(s: isl.Set) -> int:
    return sum(b.dim(_DIV) for b in s.coalesce().get_basic_sets())


def choose_inner(domain: isl.Set, write: isl.Map, candidates: Sequence[int]) -> tuple[int, ...]:
    """Positions of the inner variables, in loop order (see the module doc).

    `write` is `S[v...] -> [e...]` (anonymous range); `candidates` are variable
    positions in order of preference."""
    prefix = write.intersect_domain(domain)
    chosen: list[int] = []
    remaining = list(candidates)
    while not prefix.is_injective():
        options = []
        for rank, pos in enumerate(remaining):
            proj = _project(domain, pos)
            if prefix.reverse().apply_range(proj).is_single_valued():
                continue
            extended = prefix.flat_range_product(proj)
            options.append((_n_divs(extended.range()), rank, pos, extended))
        if not options:
            raise InternalError(f"no variable makes the schedule injective: {prefix}")
        _, _, pos, prefix = min(options, key=lambda o: (o[0], o[1]))
        chosen.append(pos)
        remaining.remove(pos)
    # the set decides injectivity and guards; loops follow the order of preference
    return tuple(sorted(chosen, key=list(candidates).index))


# ------------------------------------------------------------ unit-coefficient elimination

# assignments of eliminated variables that `unit_inner` tries at most (a statement has
# a few subscripts with one to three unit-coefficient variables each)
_MAX_ASSIGNMENTS = 4096


def unit_inner(rows: Sequence[Sequence[int]], candidates: Sequence[int]) -> tuple[int, ...] | None:
    """The inner variables (positions, in loop order) when each subscript can be solved
    for a variable of its own with coefficient +-1; None when some cannot.

    `rows[j][v]` is the coefficient of variable `v` in subscript `j` (a subscript
    without variables, all zeros, needs none); `candidates` are the variable positions
    in order of preference as inner variables. One variable is eliminated per
    subscript with variables, each with a unit coefficient in its subscript, all
    distinct, and their square coefficient matrix unimodular (determinant +-1): then
    the eliminated variables are affine functions with integer coefficients of the
    subscripts and the inner variables (`y = 2 * h + kh` gives `kh = y - 2 * h`), so
    the schedule `[subscripts..., inner...]` is injective and its image needs no
    divisibility constraint. Each subscript must keep at most one inner variable
    (`_one_window_each`), so every range is one floor division (`h in max(0, (y - KH) / 2 + 1):...`; with two,
    `2 * h + 3 * w + kh`, isl's exact bounds on `h` say which `h` some integer `w`
    completes: a case split that takes it seconds). Among the valid choices, the one
    that eliminates the least preferred variables wins (`h + kh` eliminates `h`,
    keeping the window `kh` inside, as `choose_inner` does)."""
    rank = {pos: k for k, pos in enumerate(candidates)}
    options = []
    for row in rows:
        if not any(row):
            continue
        units = [v for v, c in enumerate(row) if abs(c) == 1 and v in rank]
        if not units:
            return None
        options.append(sorted(units, key=lambda v: -rank[v]))
    if not options or len(options) > len(candidates):
        return None
    used = [list(r) for r in rows if any(r)]
    for count, pivots in enumerate(itertools.product(*options)):
        if count >= _MAX_ASSIGNMENTS:
            return None
        if len(set(pivots)) != len(pivots) or not _unimodular(used, pivots):
            continue
        if _one_window_each(used, pivots):
            return tuple(p for p in candidates if p not in pivots)
    return None


def _one_window_each(rows: Sequence[Sequence[int]], pivots: Sequence[int]) -> bool:
    """Whether each subscript keeps at most one inner variable, and an inner variable
    with a coefficient other than +-1 is in one subscript only (`O(i - 2 * l, k - 2 *
    l)` would tie the ranges of both outer variables to the parity of `l`)."""
    inner = [[v for v, c in enumerate(r) if c and v not in pivots] for r in rows]
    if any(len(vs) > 1 for vs in inner):
        return False
    for v in {v for vs in inner for v in vs}:
        uses = [r[v] for r in rows if r[v]]
        if len(uses) > 1 and any(abs(c) != 1 for c in uses):
            return False
    return True


def _unimodular(rows: Sequence[Sequence[int]], columns: Sequence[int]) -> bool:
    """Whether the square submatrix `rows` x `columns` has determinant +-1."""
    m = [[Fraction(r[c]) for c in columns] for r in rows]
    det = Fraction(1)
    for k in range(len(m)):
        pivot = next((i for i in range(k, len(m)) if m[i][k] != 0), None)
        if pivot is None:
            return False
        if pivot != k:
            m[k], m[pivot] = m[pivot], m[k]
            det = -det
        det *= m[k][k]
        for i in range(k + 1, len(m)):
            factor = m[i][k] / m[k][k]
            m[i] = [a - factor * b for a, b in zip(m[i], m[k], strict=True)]
    return abs(det) == 1


# ------------------------------------------------------------ the inverse


def schedule_of(write: isl.Map, domain: isl.Set, inner: Sequence[int]) -> isl.Map:
    """`S[v...] -> [e..., v_inner...]` on `domain`."""
    sched = write.intersect_domain(domain)
    for pos in inner:
        sched = sched.flat_range_product(_project(domain, pos))
    return sched


def invert(
    schedule: isl.Map,
    var_names: Sequence[str],
    new_names: Sequence[str],
    params: Sequence[str],
) -> tuple[Piece, ...]:
    """The pieces of the schedule's image, each with its ranges, guards and the
    original variables (`var_names`, the domain's dims) as functions of the new ones
    (`new_names`, the schedule's output dims)."""
    image = _named(schedule.range(), new_names)
    inverse = schedule.reverse()
    for k, name in enumerate(new_names):
        inverse = inverse.set_dim_name(_IN, k, name)
    context = StmtSpace((), params).context.params()
    pieces = []
    for bset in image.coalesce().make_disjoint().get_basic_sets():
        piece = isl.Set.from_basic_set(bset)
        pieces.append(_piece(piece, inverse.intersect_domain(piece), var_names, params, context))
    if not pieces:
        raise InternalError("the statement's domain is empty for every size")
    return tuple(pieces)


def _named(s: isl.Set, names: Sequence[str]) -> isl.Set:
    s = s.reset_tuple_id()
    for k, name in enumerate(names):
        s = s.set_dim_name(_SET, k, name)
    return s


def _piece(
    piece: isl.Set,
    inverse: isl.Map,
    var_names: Sequence[str],
    params: Sequence[str],
    context: isl.Set,
) -> Piece:
    names = [piece.get_dim_name(_SET, k) for k in range(piece.dim(_SET))]
    ranges = tuple(_range_of(piece, k, names, params, context) for k in range(len(names)))
    guards = _guards(piece, ranges, names, params, context)
    function = isl.PwMultiAff.from_map(inverse)
    whole = _as_params(piece, len(names)).params() & context
    values = []
    for k, var in enumerate(var_names):
        pw = function.get_pw_aff(k)
        values.append((var, _pwaff_expr(pw, len(names), names, params, whole)))
    return Piece(ranges, guards, tuple(values))


def _as_params(s: isl.Set | isl.PwAff, n: int) -> isl.Set | isl.PwAff:
    """Turn the first `n` set (input) dims into parameters, keeping their names."""
    if isinstance(s, isl.PwAff):
        moved = s.move_dims(_PARAM, s.dim(_PARAM), _IN, 0, n)
        return moved.project_domain_on_params() if moved.dim(_IN) == 0 else moved
    return s.move_dims(_PARAM, s.dim(_PARAM), _SET, 0, n)


def _expr_params(names: Sequence[str], params: Sequence[str], n: int) -> list[str]:
    """Parameter order for printing: the earlier variables first (`y - kh`), sizes after."""
    return list(names[:n]) + list(params)


def _to_expr(pw: isl.PwAff, names: Sequence[str], context: isl.Set) -> Expr:
    """A PwAff over parameters `names` as TC, exact on `context`.

    The gist by `context` may leave a rational form that is an integer only there
    (`y0 / 3` where 3 divides y0); its floor is equal on `context` and TC can write it,
    so the conversion sees the floored function and a context without those facts."""
    pw = pw.gist_params(context.align_params(pw.get_space())).coalesce().floor()
    universe = isl.Set.universe(pw.domain().params().get_space())
    return _nicer(pwaff_to_expr(pw, names, universe))


def _pwaff_expr(
    pw: isl.PwAff, n: int, names: Sequence[str], params: Sequence[str], context: isl.Set
) -> Expr:
    return _to_expr(_as_params(pw, n), _expr_params(names, params, n), context)


def _range_of(
    piece: isl.Set, k: int, names: Sequence[str], params: Sequence[str], context: isl.Set
) -> Range:
    """The exact range of dim `k` of `piece` given the dims before it."""
    n = piece.dim(_SET)
    line = _as_params(piece.project_out(_SET, k + 1, n - k - 1), k)
    where = line.params() & context
    order = _expr_params(names, params, k)
    lo = _to_expr(line.dim_min(0), order, where)
    hi = _to_expr(plus(line.dim_max(0), 1), order, where)
    return Range(Var(names[k]), lo, hi)


def _guards(
    piece: isl.Set,
    ranges: Sequence[Range],
    names: Sequence[str],
    params: Sequence[str],
    context: isl.Set,
) -> tuple[Range, ...]:
    """Constraints of `piece` that its ranges do not imply (divisibility, mostly)."""
    space = StmtSpace(names, params)
    box = space.context
    for r in ranges:
        box = box & condition_of(r.expr, r.lo, r.hi, space)
    piece = piece.align_params(box.get_space()) & space.context
    if (box.intersect_params(context) - piece).is_empty():
        return ()
    try:
        bsets = piece.gist(box).coalesce().get_basic_sets()
    except isl.Error:  # isl's gist fails an assertion on some boxes (pieces with
        bsets = []  # different floors, `n_div`): the piece's own constraints instead
    if len(bsets) == 1:
        constraints = bsets[0].get_constraints()
    else:
        # gist may split; then every constraint of the (convex) piece that the box
        # does not imply: box & those constraints == piece, as the piece lies in the box
        (whole,) = piece.get_basic_sets()
        constraints = [c for c in whole.get_constraints() if not box.is_subset(_holds(c))]
    guards = tuple(_constraint_range(c, names, params) for c in constraints)
    # what the TC text says must be exactly the piece: never a silently wrong gather
    said = box
    for g in guards:
        said = said & condition_of(g.expr, g.lo, g.hi, space)
    if not said.intersect_params(context).is_equal(piece.intersect_params(context)):
        raise Inexpressible(f"cannot state the gather domain {piece} exactly in TC")
    return guards


def _holds(c: isl.Constraint) -> isl.Set:
    return isl.Set.from_basic_set(isl.BasicSet.universe(c.get_space()).add_constraint(c))


def _constraint_range(c: isl.Constraint, names: Sequence[str], params: Sequence[str]) -> Range:
    """`aff == 0` as `aff in 0:1`, or `f % d in 0:1` when aff is +-(f - d * floor(f / d));
    `aff >= 0` as `aff in 0:aff + 1`."""
    order = _expr_params(names, params, len(names))

    def expr_of(aff: isl.Aff) -> Expr:
        ((_, moved),) = _as_params(isl.PwAff.from_aff(aff), len(names)).get_pieces()
        return _nicer(aff_to_expr(moved, order))

    aff = c.get_aff()
    zero, one = _int(0), _int(1)
    if c.is_equality():
        mod = _as_modulo(aff)
        if mod is not None:
            f, d = mod
            return Range(Binary(BinOp.MOD, expr_of(f), _int(d)), zero, one)
        return Range(expr_of(aff), zero, one)
    expr = expr_of(aff)
    return Range(expr, zero, Binary(BinOp.ADD, expr, one))


def _as_modulo(aff: isl.Aff) -> tuple[isl.Aff, int] | None:
    """(f, d) when `aff` is `f mod d` or its negation, with f affine (no divs)."""
    for k in range(aff.dim(_DIV)):
        q = aff.get_div(k)
        d = q.get_denominator_val()
        f = q.scale_val(d)
        if any(not f.get_coefficient_val(_DIV, j).is_zero() for j in range(f.dim(_DIV))):
            continue
        modulo = isl.PwAff.from_aff(f.mod_val(d))
        whole = isl.PwAff.from_aff(aff)
        if whole.is_equal(modulo) or whole.neg().is_equal(modulo):
            return f, int(d.to_python())
    return None


def _int(v: int) -> Const:
    return Const(v, ScalarType.INT32 if -(2**31) <= v < 2**31 else ScalarType.INT64)


def _nicer(e: Expr) -> Expr:
    """`f - d * (f / d)` -> `f % d`, bottom-up (isl writes a modulo that way)."""
    return _SimplifyMod().expr(e)


class _SimplifyMod(Mutator):
    def mutate_Binary(self, e: Binary) -> Expr:
        e = self.generic(e)  # type: ignore[assignment]
        if isinstance(e, Binary) and e.op is BinOp.SUB:
            return _as_mod(e.lhs, e.rhs) or e
        return e


def _as_mod(f: Expr, product: Expr) -> Expr | None:
    if not (isinstance(product, Binary) and product.op is BinOp.MUL):
        return None
    d, quotient = product.lhs, product.rhs
    if not (isinstance(d, Const) and isinstance(quotient, Binary) and quotient.op is BinOp.DIV):
        return None
    if quotient.rhs == d and quotient.lhs == f:
        return Binary(BinOp.MOD, f, d)
    return None


def var_values(piece: Piece) -> Mapping[str, Expr]:
    return dict(piece.values)
