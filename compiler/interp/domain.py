"""Iteration domains of the reference evaluator: which grid a statement runs on.

Part of `compiler.interp`. A statement's variables (index variables, then
reduction variables) each get one grid axis. Their `where v in lo:hi` bounds may
use outer variables, so the axes are ordered so that every bound only uses earlier
axes; the *box* of a variable is then the smallest interval that holds
`[lo, hi)` for every value of the earlier variables' boxes. The statement runs on
the box and masks out the points that violate a range constraint, which is what
makes non-rectangular domains and affine constraints (`h - kh in 0:HO`) exact.

Boxes are split into chunks of at most a given number of points (`chunk_boxes`),
outer axes first, so a large reduction never materialises its whole grid.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    RangeConstraint,
    ScalarType,
    Select,
    Unary,
    Var,
)
from compiler.frontend.checked import StmtFacts
from compiler.interp.expr import Grid, Value, evaluate_expr

Box = tuple[tuple[int, int], ...]
"""Per grid axis, a half-open interval [start, stop) of variable values."""


@dataclass(frozen=True, slots=True)
class Domain:
    """The grid of one statement: `order[k]` is the variable of axis `k`."""

    order: tuple[str, ...]
    axis: Mapping[str, int]
    box: Box


def build_domain(
    facts: StmtFacts,
    sizes: Mapping[str, Value],
    tensors: Mapping[str, np.ndarray],
    types: Mapping[str, ScalarType],
) -> Domain | None:
    """The statement's grid, or None if some variable's range is empty."""
    bounds = _variable_bounds(facts)
    order = _dependency_order(facts.all_vars, bounds)
    axis = {name: k for k, name in enumerate(order)}
    box: list[tuple[int, int]] = []
    for name in order:
        partial = Domain(order[: len(box)], axis, tuple(box))
        grid = Grid(tensors, types, grid_names(partial, tuple(box), sizes, ndim=len(order)))
        lo, hi = bounds[name]
        start = int(np.min(evaluate_expr(lo, grid, np.True_).array))
        stop = int(np.max(evaluate_expr(hi, grid, np.True_).array))
        if stop <= start:
            return None
        box.append((start, stop))
    return Domain(order, axis, tuple(box))


def grid_names(
    domain: Domain, box: Box, sizes: Mapping[str, Value], ndim: int | None = None
) -> dict[str, Value]:
    """Sizes plus one int32 `arange` per variable of `box`, along its own axis."""
    ndim = len(domain.order) if ndim is None else ndim
    names = dict(sizes)
    for k, (start, stop) in enumerate(box):
        shape = [1] * ndim
        shape[k] = stop - start
        values = np.arange(start, stop, dtype=np.int32).reshape(shape)
        names[domain.order[k]] = Value(values, ScalarType.INT32)
    return names


def chunk_boxes(box: Box, budget: int) -> Iterator[Box]:
    """Split `box` into boxes of at most `budget` points (or single outer points
    when one point of the outer axes already holds more), outer axes first."""
    total = int(np.prod([stop - start for start, stop in box], dtype=np.int64))
    if total <= budget or not box:
        yield box
        return
    (start, stop), rest = box[0], box[1:]
    inner = total // (stop - start)
    if inner <= budget:
        step = max(1, budget // inner)
        for lo in range(start, stop, step):
            yield ((lo, min(lo + step, stop)),) + rest
        return
    for value in range(start, stop):
        for sub in chunk_boxes(rest, budget):
            yield ((value, value + 1),) + sub


def _variable_bounds(facts: StmtFacts) -> dict[str, tuple[Expr, Expr]]:
    bounds: dict[str, tuple[Expr, Expr]] = {}
    for clause in facts.stmt.where:
        if isinstance(clause, RangeConstraint) and isinstance(clause.expr, Var):
            name = clause.expr.name
            if name in facts.all_vars and name not in bounds:
                bounds[name] = (clause.lo, clause.hi)
    missing = [v for v in facts.all_vars if v not in bounds]
    if missing:
        raise InternalError(
            f"interp needs a ranged def: no `where {missing[0]} in lo:hi` clause in the "
            f"statement writing '{facts.stmt.lhs.name}' (run poly.ranges.infer_ranges first)"
        )
    return bounds


def _dependency_order(
    variables: tuple[str, ...], bounds: Mapping[str, tuple[Expr, Expr]]
) -> tuple[str, ...]:
    """The variables, in their own order except that each comes after the
    variables its bounds use (a stable topological sort)."""
    deps = {
        v: (variables_used(bounds[v][0]) | variables_used(bounds[v][1])) & set(variables) - {v}
        for v in variables
    }
    order: list[str] = []
    while len(order) < len(variables):
        ready = [v for v in variables if v not in order and deps[v] <= set(order)]
        if not ready:
            cycle = ", ".join(v for v in variables if v not in order)
            raise InternalError(f"interp: the ranges of {cycle} depend on each other")
        order.append(ready[0])
    return tuple(order)


def variables_used(expr: Expr) -> set[str]:
    """The `Var` names in `expr`."""
    return {e.name for e in _walk(expr) if isinstance(e, Var)}


def tensors_read(expr: Expr) -> set[str]:
    """The tensors that `expr` reads."""
    return {e.name for e in _walk(expr) if isinstance(e, Access)}


def _walk(expr: Expr) -> Iterator[Expr]:
    yield expr
    children: tuple[Expr, ...]
    if isinstance(expr, (Access, Call)):
        children = expr.args
    elif isinstance(expr, (Binary, Compare, Logical)):
        children = (expr.lhs, expr.rhs)
    elif isinstance(expr, (Unary, Cast)):
        children = (expr.operand,)
    elif isinstance(expr, Select):
        children = (expr.cond, expr.then, expr.otherwise)
    elif isinstance(expr, (Const, Var)):
        children = ()
    else:
        raise InternalError(f"interp: unknown expression {expr!r}")
    for child in children:
        yield from _walk(child)
