"""What one statement's writes give its output, for range inference (`poly.ranges`).

Requires: a statement's inference (`ranges._StmtInference`) after its rounds: every
          variable solved, `domain` its iteration domain.
Ensures:  `record_output(inference, domain)` sets the output's bounds per dimension in
          the def's state (`known`: what later statements' reads of it are checked
          against; `images`: every write's range, whose hull is the output's shape).
          A dimension's bound is the inferred range of a plain variable, a `where`
          clause on the subscript, or else the min and max of the subscript's image. A
          data-dependent subscript (`E_grad(idx(i), d) += ...`) may write anywhere in
          the output's declared extent. A subscript negative for every size is an
          error; negative for some sizes, a warning (a ShapeError at call time).

Worked example: `O(i) = I(i + 5)` infers i in -5:N - 5; O's bound is `-5:N - 5`,
negative for every size: "index `i` of output 'O' is negative for every size".
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import islpy as isl

from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Const,
    Expr,
    RangeConstraint,
    ScalarType,
    Var,
)
from compiler.frontend.checked import Bound
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import walk
from compiler.poly.isl_bridge import (
    NotAffine,
    expr_to_aff,
    params_space,
    pwaff_to_expr,
    set_to_expr,
)

if TYPE_CHECKING:
    from compiler.poly.ranges import _StmtInference


def record_output(inf: _StmtInference, domain: isl.Set) -> None:
    """The output's bounds and write images from this statement (module doc)."""
    lhs = inf.stmt.lhs
    images = tuple(_image(inf, arg, domain) for arg in lhs.args)
    bounds = []
    for dim, (arg, image) in enumerate(zip(lhs.args, images, strict=True)):
        bounds.append(_lhs_bound(inf, arg, image))
        _check_non_negative(inf, lhs, dim, image)
    earlier = inf.state.images.setdefault(lhs.name, [])
    inf.state.known[lhs.name] = _extent(inf.state.params, earlier, images, tuple(bounds))
    earlier.append(images)


def _extent(
    params: tuple[str, ...],
    earlier: list[tuple[isl.Set, ...]],
    images: tuple[isl.Set, ...],
    bounds: tuple[Bound, ...],
) -> tuple[Bound, ...]:
    """The output's extent once this statement has written `images`: per dimension,
    the hull of every write so far. A later read of the output may touch any element
    of it (one written by an earlier statement, or left at its initial value inside
    the hull), not only what the latest, possibly partial, write covers."""
    if not earlier:
        return bounds
    return hull([*earlier, images], params)


def hull(images: list[tuple[isl.Set, ...]], params: tuple[str, ...]) -> tuple[Bound, ...]:
    """Per dimension, the smallest range `lo:hi` holding every write's image."""
    ctx = params_space(params).context
    result = []
    for dims in zip(*images, strict=True):
        union = functools.reduce(isl.Set.union, dims)
        lo = pwaff_to_expr(union.dim_min(0), params, ctx)
        hi = pwaff_to_expr(union.dim_max(0) + 1, params, ctx)
        result.append(Bound(lo, hi))
    return tuple(result)


def within_declared(
    bounds: tuple[Bound, ...],
    images: list[tuple[isl.Set, ...]],
    declared: tuple[Expr, ...] | None,
    params: tuple[str, ...],
    context: isl.Set,
) -> tuple[Bound, ...]:
    """`bounds`, with `hi` lowered to the declared extent where every write provably
    lies inside it for every size in `context`, though `hi` does not: a gathered
    scatter's `where y in 2:N + 3` is a hull that inner ranges empty for small sizes
    (a gradient's recomputed `O_v1` declared `2 * N - 1`, fuzz seed 22920). The
    images are exact also for `op!`, which fills the whole output with its identity
    first. An output without a declared shape keeps `bounds`."""
    if not bounds or declared is None:
        return bounds
    space = params_space(params)
    sizes = context.params()
    result = []
    for bound, extent, dims in zip(bounds, declared, zip(*images, strict=True), strict=True):
        try:
            want = expr_to_aff(extent, space)
            hi = expr_to_aff(bound.hi, space)
        except NotAffine:
            result.append(bound)
            continue
        if hi.gt_set(want).intersect_params(sizes).is_empty():
            result.append(bound)
            continue
        last = functools.reduce(isl.Set.union, dims).dim_max(0)
        on_sizes = want.project_domain_on_params().align_params(last.get_space())
        fits = last.align_params(on_sizes.get_space()).ge_set(on_sizes)
        fits = fits.intersect_params(sizes).is_empty()
        result.append(Bound(bound.lo, extent) if fits else bound)
    return tuple(result)


def _image(inf: _StmtInference, arg: Expr, domain: isl.Set) -> isl.Set:
    """The values the subscript `arg` takes on `domain` (a 1-d parameter set)."""
    if any(isinstance(e, Access) for e in walk(arg)):
        return _indirect_image(inf, arg, domain)
    pw = inf.aff(arg, "the left-hand side subscript").intersect_domain(domain)
    return isl.Map.from_pw_aff(pw).range().coalesce()


def _indirect_image(inf: _StmtInference, arg: Expr, domain: isl.Set) -> isl.Set:
    """[tcc] A data-dependent scatter-add subscript (`E_grad(idx(i), d) += ...`) may
    write anywhere in the output's declared extent: {0, extent - 1} bounds it."""
    lhs = inf.stmt.lhs
    dims = inf.state.checked.tensor(lhs.name).dims
    if dims is None:
        raise inf.error(
            f"output '{lhs.name}' is written at a data-dependent index `{print_expr(arg)}`,"
            " so its shape cannot be inferred",
            arg.span,
            f"declare the shape of '{lhs.name}' in the def's outputs",
        )
    extent = dims[list(lhs.args).index(arg)]
    ends = (Const(0, ScalarType.INT32), Binary(BinOp.SUB, extent, Const(1, ScalarType.INT32)))
    images = [
        isl.Map.from_pw_aff(expr_to_aff(e, inf.space).intersect_domain(domain)).range()
        for e in ends
    ]
    return (images[0] | images[1]).coalesce()


def _lhs_bound(inf: _StmtInference, arg: Expr, image: isl.Set) -> Bound:
    if isinstance(arg, Var) and arg.name in inf.bounds:
        return inf.bounds[arg.name]
    for clause in inf.stmt.where:
        if isinstance(clause, RangeConstraint) and clause.expr == arg:
            if not any(isinstance(e, Var) and e.name in inf.space.vars for e in _all(clause)):
                return Bound(clause.lo, clause.hi)
    ctx = params_space(inf.state.params).context
    lo = pwaff_to_expr(image.dim_min(0), inf.state.params, ctx)
    hi = pwaff_to_expr(image.dim_max(0) + 1, inf.state.params, ctx)
    return Bound(lo, hi)


def _check_non_negative(inf: _StmtInference, lhs: Access, dim: int, image: isl.Set) -> None:
    below_zero = isl.Set.universe(image.get_space()).upper_bound_val(
        isl.dim_type.set, 0, isl.Val(-1)
    )
    negative = image & below_zero
    if negative.is_empty():
        return
    runs = image.params()
    neg_params = negative.params()
    arg = lhs.args[dim]
    hint = "shift the index, e.g. write `O(i)` reading `I(i + 5)` instead of `O(i - 5)`"
    if (runs - neg_params).is_empty():
        raise inf.error(
            f"index `{print_expr(arg)}` of output '{lhs.name}' is negative for every "
            "size: an output cannot be stored at a negative index",
            arg.span,
            hint,
        )
    ok = set_to_expr(runs - neg_params, runs, inf.state.params)
    inf.warn(
        f"index `{print_expr(arg)}` of output '{lhs.name}' is negative unless "
        f"`{print_expr(ok)}`; calls with other sizes fail",
        arg.span,
        hint,
    )


def _all(clause: RangeConstraint) -> list[Expr]:
    return [n for e in (clause.lo, clause.hi) for n in walk(e)]


__all__ = ["hull", "record_output", "within_declared"]
