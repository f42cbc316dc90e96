"""The one bridge between TC expressions and isl: conversions named by direction.

Only `compiler/poly/` imports islpy (`tests/test_layering.py` checks it). This
module owns every conversion between TC expressions and isl objects -- no other
module builds an isl object from a TC expression or turns one back into TC:

    StmtSpace(vars, params)          a named isl space: set dims = index variables,
                                     parameters = size names; `context` says sizes >= 1
    expr_to_aff(expr, space, lets)   TC expression -> isl.PwAff (quasi-affine: `/` and `%`
                                     by positive constants, min, max); raises NotAffine
    pwaff_to_expr(pw, params, ctx)   parameter-only isl.PwAff -> TC expression
    set_to_expr(params_set, ctx)     parameter-only isl.Set -> TC condition (for messages)
    forall(cond, domain, dims)       the points of the other dims for which `cond` holds
                                     for *every* value of `dims` allowed by `domain`

The other poly modules (`ranges`, `build`, `gather`, `invert`, `schedule`, `tiling`,
`cpu_model`, `astgen`) do import islpy, to *operate* on the sets and maps built here:
they intersect, project, compare and schedule them, and `astgen` walks isl's AST.
What may not leave `compiler/poly/` is any isl object or isl text: passes outside it
receive TC expressions, `RangedDef`s and loop IR only.

Integer division: TC's `/` on integers is Halide's, which rounds towards negative
infinity for a positive divisor, and its `%` is never negative; these are exactly isl's
`floor(e/d)` and `e mod d`, so bound expressions round-trip without loss.
Worked example: `dim_max` of `{ [i] : 0 <= 123 i < N }` is `-1 + floor((122 + N)/123)`,
and `pwaff_to_expr(that + 1)` is the TC expression `(N + 122) / 123`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import islpy as isl

from compiler.diagnostics import InternalError, RangeError
from compiler.frontend.ast import (
    Binary,
    BinOp,
    Call,
    CmpOp,
    Compare,
    Const,
    Expr,
    Logical,
    LogicOp,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.poly.floors import Floor, Lin, readable

_SET = isl.dim_type.set
_PARAM = isl.dim_type.param
_DIV = isl.dim_type.div
_IN = isl.dim_type.in_


class NotAffine(Exception):
    """An expression isl cannot represent (a tensor read, `i * j`, a float, ...)."""

    def __init__(self, expr: Expr) -> None:
        super().__init__(type(expr).__name__)
        self.expr = expr


class StmtSpace:
    """Named isl space of one statement: set dims `vars`, parameters `params`."""

    def __init__(self, variables: Sequence[str], params: Sequence[str]) -> None:
        self.vars = tuple(variables)
        self.params = tuple(params)
        self._vars: dict[object, isl.PwAff] = isl.make_zero_and_vars(
            list(self.vars), list(self.params)
        )
        zero = self._vars[0]
        ctx = zero.domain()
        # sizes are positive (bounds set directly: building each from affine expressions
        # took most of this constructor's 1.7 ms, called ~40 times a gradient). No upper
        # bound: int64's 2**63-1 only added a constraint isl carried through every
        # operation (a third of the gather pass), and nothing exact depends on it.
        one = isl.Val.int_from_si(ctx.get_ctx(), 1)
        for p in self.params:
            ctx = ctx.lower_bound_val(_PARAM, ctx.find_dim_by_name(_PARAM, p), one)
        self.universe: isl.Set = zero.domain()
        self.context: isl.Set = ctx  # every size >= 1

    def var(self, name: str) -> isl.PwAff:
        return self._vars[name]

    def const(self, value: int) -> isl.PwAff:
        return plus(self._vars[0], value)

    def pos(self, name: str) -> int:
        return self.vars.index(name)

    def has(self, name: str) -> bool:
        return name in self._vars


def param_names(s: isl.Set) -> tuple[str, ...]:
    """The names of the parameters (sizes) of `s`, in its order."""
    return tuple(s.get_dim_name(isl.dim_type.param, k) for k in range(s.dim(isl.dim_type.param)))


def plus(pa: isl.PwAff, value: int) -> isl.PwAff:
    """`pa + value`, added to each piece: islpy's `pa + int` first builds a piecewise
    constant over `pa`'s pieces (a sixth of a conv2d gradient's AD + gather time)."""
    return pa.add_constant_val(isl.Val.int_from_si(pa.get_ctx(), value))


def params_space(params: Sequence[str]) -> StmtSpace:
    """A space with no set dims: bound expressions live here."""
    return StmtSpace((), params)


# ------------------------------------------------------------ TC -> isl


def expr_to_aff(expr: Expr, space: StmtSpace, lets: Mapping[str, Expr] | None = None) -> isl.PwAff:
    """A quasi-affine TC integer expression as a PwAff over `space`.

    Let names are inlined from `lets`. Raises NotAffine for anything isl cannot
    represent exactly (tensor reads, products of variables, floats, casts, ...).
    """
    lets = lets or {}
    if isinstance(expr, Const):
        if not isinstance(expr.value, int):
            raise NotAffine(expr)
        return space.const(expr.value)
    if isinstance(expr, Var):
        if expr.name in lets:
            return expr_to_aff(lets[expr.name], space, lets)
        if space.has(expr.name):
            return space.var(expr.name)
        raise NotAffine(expr)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        return -expr_to_aff(expr.operand, space, lets)
    if isinstance(expr, Binary):
        return _binary_to_aff(expr, space, lets)
    if isinstance(expr, Call) and expr.fn in ("min", "max") and len(expr.args) == 2:
        a, b = (expr_to_aff(x, space, lets) for x in expr.args)
        return a.min(b) if expr.fn == "min" else a.max(b)
    if isinstance(expr, Select):
        where = condition_to_set(expr.cond, space, lets)
        then = expr_to_aff(expr.then, space, lets).intersect_domain(where)
        otherwise = expr_to_aff(expr.otherwise, space, lets)
        return then.union_add(otherwise.intersect_domain(where.complement()))
    raise NotAffine(expr)


def condition_to_set(
    cond: Expr, space: StmtSpace, lets: Mapping[str, Expr] | None = None
) -> isl.Set:
    """The points where an affine condition (`a < b && c == d`, `!(...)`) holds."""
    if isinstance(cond, Compare):
        a, b = expr_to_aff(cond.lhs, space, lets), expr_to_aff(cond.rhs, space, lets)
        if cond.op is CmpOp.NE:
            return a.lt_set(b) | a.gt_set(b)
        return {
            CmpOp.EQ: a.eq_set,
            CmpOp.LT: a.lt_set,
            CmpOp.LE: a.le_set,
            CmpOp.GT: a.gt_set,
            CmpOp.GE: a.ge_set,
        }[cond.op](b)
    if isinstance(cond, Logical):
        x, y = condition_to_set(cond.lhs, space, lets), condition_to_set(cond.rhs, space, lets)
        return x & y if cond.op is LogicOp.AND else x | y
    if isinstance(cond, Unary) and cond.op is UnaryOp.NOT:
        return condition_to_set(cond.operand, space, lets).complement()
    raise NotAffine(cond)


def _binary_to_aff(expr: Binary, space: StmtSpace, lets: Mapping[str, Expr]) -> isl.PwAff:
    lhs = expr_to_aff(expr.lhs, space, lets)
    if expr.op in (BinOp.ADD, BinOp.SUB):
        rhs = expr_to_aff(expr.rhs, space, lets)
        return lhs + rhs if expr.op is BinOp.ADD else lhs - rhs
    if expr.op is BinOp.MUL:
        rhs = expr_to_aff(expr.rhs, space, lets)
        if lhs.is_cst() or rhs.is_cst():
            return lhs * rhs
        raise NotAffine(expr)
    # `/` and `%` by a positive constant: Halide's (= isl's) floor division and modulo.
    divisor = _positive_constant(expr.rhs, space, lets)
    if divisor is None:
        raise NotAffine(expr)
    if expr.op is BinOp.DIV:
        return lhs.scale_down_val(isl.Val(divisor)).floor()
    return lhs.mod_val(isl.Val(divisor))


def _positive_constant(expr: Expr, space: StmtSpace, lets: Mapping[str, Expr]) -> int | None:
    try:
        pw = expr_to_aff(expr, space, lets)
    except NotAffine:
        return None
    if not pw.is_cst() or pw.n_piece() != 1:
        return None
    ((_, aff),) = pw.get_pieces()
    value = aff.get_constant_val()
    if not value.is_int() or value.to_python() <= 0:
        return None
    return int(value.to_python())


def condition_of(
    expr: Expr, lo: Expr, hi: Expr, space: StmtSpace, lets: Mapping[str, Expr] | None = None
) -> isl.Set:
    """The points where `lo <= expr < hi` (a where clause) as a set over `space`."""
    e = expr_to_aff(expr, space, lets)
    return expr_to_aff(lo, space, lets).le_set(e) & e.lt_set(expr_to_aff(hi, space, lets))


# ------------------------------------------------------------ isl -> TC


def _val(v: isl.Val) -> Fraction:
    # exact: `get_num_si` silently gives 0 for a numerator beyond a C long
    return Fraction(str(v))


_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)


def _const(value: int) -> Const:
    """An integer constant isl computed: int32 as TC's literals, int64 beyond that (as
    the parser types such literals); beyond int64 no size can reach it, a RangeError."""
    if value in _INT32:
        return Const(value, ScalarType.INT32)
    if value in _INT64:
        return Const(value, ScalarType.INT64)
    raise RangeError(
        f"range inference derived the constant {value}, which does not fit in 64 bits",
        hint="sizes and index values are 64-bit integers; use smaller constants",
    )


def _terms(aff: isl.Aff, params: Sequence[str]) -> tuple[list[tuple[Fraction, Expr]], Fraction]:
    """The (coefficient, atom) terms of a parameter-only aff and its constant, as a
    person writes them (`floors.readable`)."""
    return _rendered(readable(_lin(aff, params)), params)


def _lin(aff: isl.Aff, params: Sequence[str]) -> Lin:
    """A parameter-only aff as sizes and floor divisions (integer numerators)."""
    if any(not aff.get_coefficient_val(_IN, k).is_zero() for k in range(aff.dim(_IN))):
        raise InternalError(f"bound still depends on an index variable: {aff}")
    named = []
    for k in range(aff.dim(_PARAM)):
        c = _val(aff.get_coefficient_val(_PARAM, k))
        if c:
            named.append((aff.get_dim_name(_PARAM, k), c))
    floors = []
    for k in range(aff.dim(_DIV)):
        c = _val(aff.get_coefficient_val(_DIV, k))
        if c:
            inner = _lin(aff.get_div(k), params)
            den = functools.reduce(
                math.lcm,
                [a.denominator for _, a in inner.named]
                + [f.coeff.denominator for f in inner.floors]
                + [inner.const.denominator],
                1,
            )
            num = Lin(
                tuple((n, a * den) for n, a in inner.named),
                tuple(dataclasses.replace(f, coeff=f.coeff * den) for f in inner.floors),
                inner.const * den,
            )
            floors.append(Floor(c, readable(num), den))
    return Lin(tuple(named), tuple(floors), _val(aff.get_constant_val()))


def _rendered(lin: Lin, params: Sequence[str]) -> tuple[list[tuple[Fraction, Expr]], Fraction]:
    """`lin`'s terms in the sizes' order, then its floor divisions, and its constant."""
    order = {p: k for k, p in enumerate(params)}
    named = sorted(lin.named, key=lambda t: order.get(t[0], len(order)))
    terms: list[tuple[Fraction, Expr]] = [(c, Var(n)) for n, c in named if c]
    for f in lin.floors:
        if f.coeff:
            inner, const = _rendered(f.num, params)
            terms.append((f.coeff, Binary(BinOp.DIV, _sum(inner, const), _const(f.den))))
    return terms, lin.const


def _scaled(c: Fraction, atom: Expr) -> Expr:
    if c.denominator != 1:
        raise InternalError(f"non-integral coefficient {c} in a bound")
    n = abs(c.numerator)
    return atom if n == 1 else Binary(BinOp.MUL, _const(n), atom)


def _sum(terms: Sequence[tuple[Fraction, Expr]], const: Fraction) -> Expr:
    """`a + b - c + 3`: positive terms first, so `N - KH + 1` reads naturally."""
    if const.denominator != 1:
        raise InternalError(f"non-integral constant {const} in a bound")
    ordered = [t for t in terms if t[0] > 0] + [t for t in terms if t[0] < 0]
    result: Expr | None = None
    for c, atom in ordered:
        term = _scaled(c, atom)
        if result is None:
            result = term if c > 0 else Unary(UnaryOp.NEG, term)
        else:
            result = Binary(BinOp.ADD if c > 0 else BinOp.SUB, result, term)
    k = const.numerator
    if result is None:
        return _const(k)
    if k > 0:
        return Binary(BinOp.ADD, result, _const(k))
    if k < 0:
        return Binary(BinOp.SUB, result, _const(-k))
    return result


def aff_to_expr(aff: isl.Aff, params: Sequence[str]) -> Expr:
    """A parameter-only (quasi-)affine isl.Aff as a TC expression."""
    terms, const = _terms(aff, params)
    den = aff.get_denominator_val()
    if not den.is_one():
        raise InternalError(f"non-integral bound {aff}")
    return _sum(terms, const)


def pwaff_to_expr(pw: isl.PwAff, params: Sequence[str], context: isl.Set) -> Expr:
    """A parameter-only PwAff as a TC expression, exact wherever `pw` is defined.

    One piece gives its affine expression (extended beyond the piece's domain);
    several pieces that are the min (or max) of their expressions give `min(...)`
    (`max(...)`); anything else goes through isl's AST expression builder.
    """
    pw = pw.gist_params(context.params()).coalesce()
    affs: list[isl.Aff] = []
    for _, aff in pw.get_pieces():
        if not any(aff.plain_is_equal(a) for a in affs):
            affs.append(aff)
    if not affs:
        raise InternalError(f"empty bound {pw}")
    if len(affs) == 1:
        return aff_to_expr(affs[0], params)
    dom = pw.domain() & context.params()
    for fn, combine in (("min", isl.PwAff.min), ("max", isl.PwAff.max)):
        whole = functools.reduce(combine, [isl.PwAff.from_aff(a) for a in affs])
        if whole.intersect_domain(dom).is_equal(pw.intersect_domain(dom)):
            exprs = [aff_to_expr(a, params) for a in affs]
            return functools.reduce(lambda x, y: Call(fn, (x, y)), exprs)
    build = isl.AstBuild.from_context(context.params())
    return _ast_expr_to_expr(build.expr_from_pw_aff(pw))


_AST_BIN = {
    isl.ast_expr_op_type.add: BinOp.ADD,
    isl.ast_expr_op_type.sub: BinOp.SUB,
    isl.ast_expr_op_type.mul: BinOp.MUL,
    isl.ast_expr_op_type.div: BinOp.DIV,
    isl.ast_expr_op_type.fdiv_q: BinOp.DIV,
    isl.ast_expr_op_type.pdiv_q: BinOp.DIV,
    isl.ast_expr_op_type.pdiv_r: BinOp.MOD,
    isl.ast_expr_op_type.zdiv_r: BinOp.MOD,
}
_AST_CMP = {
    isl.ast_expr_op_type.eq: CmpOp.EQ,
    isl.ast_expr_op_type.le: CmpOp.LE,
    isl.ast_expr_op_type.lt: CmpOp.LT,
    isl.ast_expr_op_type.ge: CmpOp.GE,
    isl.ast_expr_op_type.gt: CmpOp.GT,
}
_AST_LOGIC = {
    isl.ast_expr_op_type.and_: LogicOp.AND,
    isl.ast_expr_op_type.and_then: LogicOp.AND,
    isl.ast_expr_op_type.or_: LogicOp.OR,
    isl.ast_expr_op_type.or_else: LogicOp.OR,
}


def _ast_expr_to_expr(e: isl.AstExpr) -> Expr:
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        return _const(int(e.get_val().to_python()))
    if kind == isl.ast_expr_type.id:
        return Var(e.get_id().get_name())
    op = e.get_op_type()
    args = [_ast_expr_to_expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
    if op == isl.ast_expr_op_type.minus:
        return Unary(UnaryOp.NEG, args[0])
    if op in (isl.ast_expr_op_type.min, isl.ast_expr_op_type.max):
        fn = "min" if op == isl.ast_expr_op_type.min else "max"
        return functools.reduce(lambda x, y: Call(fn, (x, y)), args)
    if op in (isl.ast_expr_op_type.select, isl.ast_expr_op_type.cond):
        return Select(args[0], args[1], args[2])
    if op in _AST_BIN:
        return Binary(_AST_BIN[op], args[0], args[1])
    if op in _AST_CMP:
        return Compare(_AST_CMP[op], args[0], args[1])
    if op in _AST_LOGIC:
        return Logical(_AST_LOGIC[op], args[0], args[1])
    raise InternalError(f"unexpected isl AST expression {e.to_C_str()}")


def set_to_expr(params_set: isl.Set, context: isl.Set, params: Sequence[str]) -> Expr:
    """A parameter-only set as a TC condition (`N + M <= NM + 1`), simplified by
    the context; `1 == 1` when it always holds."""
    s = params_set.gist_params(context.params()).coalesce()
    disjuncts: list[Expr] = []
    for bset in s.get_basic_sets():
        conjuncts = [_constraint_to_expr(c, params) for c in bset.get_constraints()]
        if not conjuncts:
            return Compare(CmpOp.EQ, _const(1), _const(1))
        disjuncts.append(functools.reduce(lambda x, y: Logical(LogicOp.AND, x, y), conjuncts))
    if not disjuncts:
        return Compare(CmpOp.EQ, _const(0), _const(1))
    return functools.reduce(lambda x, y: Logical(LogicOp.OR, x, y), disjuncts)


def _constraint_to_expr(c: isl.Constraint, params: Sequence[str]) -> Expr:
    """`aff >= 0` / `aff == 0` with negative terms moved to the right-hand side."""
    terms, const = _terms(c.get_aff(), params)
    pos = [(k, a) for k, a in terms if k > 0]
    neg = [(-k, a) for k, a in terms if k < 0]
    lhs_const = const if const > 0 else Fraction(0)
    rhs_const = -const if const < 0 else Fraction(0)
    lhs = _sum(pos, lhs_const)
    rhs = _sum(neg, rhs_const)
    op = CmpOp.EQ if c.is_equality() else CmpOp.GE
    if isinstance(lhs, Const) and op is CmpOp.GE:  # `3 >= N` reads better as `N <= 3`
        return Compare(CmpOp.LE, rhs, lhs)
    return Compare(op, lhs, rhs)


# ------------------------------------------------------------ set helpers


def forall(cond: isl.Set, domain: isl.Set, dims: Sequence[int]) -> isl.Set:
    """The points of the remaining dims where `cond` holds for every value of
    `dims` in `domain` (TC's "for all", not "exists"): the complement of the
    projection of the violating points. `dims` end up unconstrained."""
    bad = domain & cond.complement()
    for d in dims:
        bad = bad.eliminate(_SET, d, 1)
    return bad.complement()


def only_dim(s: isl.Set, pos: int) -> isl.Set:
    """`s` projected onto its set dim `pos` (a 1-d set with the same parameters)."""
    n = s.dim(_SET)
    return s.project_out(_SET, pos + 1, n - pos - 1).project_out(_SET, 0, pos)


def involves(s: isl.Set | isl.PwAff, pos: int) -> bool:
    return bool(s.involves_dims(_IN if isinstance(s, isl.PwAff) else _SET, pos, 1))


def forall_linear(
    d: isl.PwAff, extremes: Mapping[int, tuple[isl.PwAff, isl.PwAff]]
) -> isl.PwAff | None:
    """`d >= 0` for all values of the dims in `extremes` (each ranging over its own
    interval [first, last]), as `d' >= 0` without those dims; None unless `d` is
    affine in them. TC's substitution: each dim takes the end of its interval that
    makes `d` smallest (`i + k >= 0` for k in [0, K-1] becomes `i >= 0`). Exact when
    the intervals are non-empty, and it keeps nested floors (`(W - KW) / 2`) that a
    set projection would split into parity cases."""
    if d.n_piece() != 1:
        return None
    ((dom, aff),) = d.get_pieces()
    if not dom.plain_is_universe():
        return None
    for k in range(aff.dim(_DIV)):
        div = aff.get_div(k)
        if any(div.involves_dims(_IN, p, 1) for p in extremes):
            return None
    result = d
    for p, (first, last) in extremes.items():
        c = aff.get_coefficient_val(_IN, p)
        if c.is_zero():
            continue
        end = first if c.is_pos() else last
        var = isl.PwAff.var_on_domain(isl.LocalSpace.from_space(d.get_domain_space()), _SET, p)
        result = result + (end - var).scale_val(c)
    return result


def interval_of(line: isl.Set, params: Sequence[str]) -> tuple[Expr, Expr] | None:
    """`max(lower bounds):min(upper bounds) + 1` of a 1-d set that is one basic set,
    read off its constraints (TC's formula shape, `0:min(A_1, B_0)`), or None when
    the set is a union or its bounds involve existential variables."""
    bsets = line.coalesce().get_basic_sets()
    if len(bsets) != 1 or bsets[0].dim(_DIV):
        return None
    lows: list[Expr] = []
    highs: list[Expr] = []
    for c in bsets[0].get_constraints():
        a = c.get_coefficient_val(_SET, 0)
        if a.is_zero():
            continue
        bound = c.get_bound(_SET, 0)
        if c.is_equality() or a.is_pos():
            _add_unique(lows, aff_to_expr(bound.ceil(), params))
        if c.is_equality() or a.is_neg():
            _add_unique(highs, aff_to_expr(bound.floor() + 1, params))
    if not lows or not highs:
        return None
    lo = functools.reduce(lambda x, y: Call("max", (x, y)), lows)
    return lo, functools.reduce(lambda x, y: Call("min", (x, y)), highs)


def _add_unique(found: list[Expr], e: Expr) -> None:
    if e not in found:
        found.append(e)
