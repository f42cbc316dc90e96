"""The reference evaluator: run a ranged TC def on NumPy arrays.

Slow and obviously correct: this is the oracle that every backend is tested
against, so it favours clarity over speed.

    evaluate(ranged, inputs, sizes, outputs=None) -> {output name: array}

Requires: a `RangedDef` (every index and reduction variable of every statement has
a `where v in lo:hi` clause), one array per input with the declared dtype and
shape, a value for every size parameter.

Semantics (what TC means, as tcc implements it):

- Statements run in textual order. Each runs over its *domain*: every combination
  of its index and reduction variables that satisfies all of its range constraints
  `lo <= e < hi` (bounds may use size parameters and outer index variables, so
  domains may be non-rectangular; a constraint on an affine expression such as
  `where h - kh in 0:HO` is a mask). `exists` clauses only constrain range
  inference and are ignored here.
- `op!` first sets the *whole* output to the operator's identity: 0 for `+`,
  1 for `*`, +inf / -inf for float `min` / `max`, the integer type's max / min
  for integer `min` / `max`. `op` without `!` combines into the output's current
  contents: what earlier statements wrote, or the caller's `outputs`, or zeros.
- `=` stores the value at every domain point (a point written twice keeps one of
  the values: TC leaves this undefined). A reduction combines the values of all
  domain points that map to the same output element, with np.add / multiply /
  minimum / maximum; left-hand sides that are not a permutation of the index
  variables (`I_grad(h + kh)`, `O(i, i)`) scatter with `ufunc.at`.
- All reads of a statement see the tensors as they were before it started (an
  in-place `O(i) = O(i) + B(i)` reads the old O).
- Lets are evaluated in order, then the right-hand side, each in its TC type
  (`compiler.frontend.types`: int32 + float32 is float32, builtins are float
  functions, ...); the value is converted to the output's type before it is
  combined, as TC's generated code does.
- `c ? a : b` evaluates each branch only where it is chosen, and `&&` / `||`
  short-circuit: a guarded out-of-range read never happens. A read out of range
  at a domain point raises `ShapeError` naming the tensor and the index value.
- Integer `/` and `%` are Euclidean (TC lowers to Halide), `x / 0 == x % 0 == 0`;
  float `%` is `a - b * floor(a / b)`.

Ensures: the returned arrays are fresh; the caller's inputs and outputs are not
modified.

Example::

    def mm(float(M,K) A, float(K,N) B) -> (C) {
        C(m, n) +=! A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
    }

runs as one grid with axes (m, n, k): C[m, n] = sum over k of A[m, k] * B[k, n].
Large domains are evaluated in chunks along their outer variables, so memory stays
bounded (about `CHUNK_POINTS` grid points at a time).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from compiler.diagnostics import InternalError, ShapeError, TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Let,
    RangeConstraint,
    ScalarType,
    Var,
)
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.interp.domain import Box, Domain, build_domain, chunk_boxes, grid_names, tensors_read
from compiler.interp.expr import NP_DTYPE, Grid, Value, evaluate_expr
from compiler.shapes import output_shapes

CHUNK_POINTS = 1 << 22
"""The most grid points evaluated at once (bounds the evaluator's memory)."""

_UFUNC: dict[AssignOp, np.ufunc] = {
    AssignOp.PLUS: np.add,
    AssignOp.TIMES: np.multiply,
    AssignOp.MIN: np.minimum,
    AssignOp.MAX: np.maximum,
}


def evaluate(
    ranged: RangedDef,
    inputs: Mapping[str, np.ndarray],
    sizes: Mapping[str, int],
    outputs: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Run `ranged` on `inputs`; return every output, by name (see the module doc)."""
    checked = ranged.checked
    types = {t.name: t.dtype for t in checked.tensors}
    size_values = _size_values(checked.size_params, sizes)
    tensors: dict[str, np.ndarray] = {}
    for info in checked.inputs:
        if info.name not in inputs:
            raise TCError(f"no value given for input '{info.name}' of def '{checked.name}'")
        tensors[info.name] = np.asarray(inputs[info.name]).astype(NP_DTYPE[info.dtype])
    given_all = outputs is not None and all(t.name in outputs for t in checked.outputs)
    shapes = {} if given_all else output_shapes(ranged, sizes)
    for info in checked.outputs:
        given = None if outputs is None else outputs.get(info.name)
        if given is not None:
            tensors[info.name] = np.array(given, dtype=NP_DTYPE[info.dtype], copy=True)
        else:
            tensors[info.name] = np.zeros(shapes[info.name], dtype=NP_DTYPE[info.dtype])
    # The ranges live in `definition` (poly.ranges rewrites the statements there);
    # `stmts` gives each statement's variable roles.
    for stmt, facts in zip(checked.definition.stmts, checked.stmts, strict=True):
        _run_statement(dataclasses.replace(facts, stmt=stmt), tensors, types, size_values)
    return {info.name: tensors[info.name] for info in checked.outputs}


def identity(op: AssignOp, dtype: ScalarType) -> np.generic:
    """The identity of reduction `op` in `dtype` (what `op!` initialises to)."""
    np_type = NP_DTYPE[dtype]
    base = op.base
    if base is AssignOp.PLUS:
        return np_type(0)
    if base is AssignOp.TIMES:
        return np_type(1)
    if dtype.is_float:
        return np_type(math.inf if base is AssignOp.MIN else -math.inf)
    if dtype is ScalarType.BOOL:
        return np_type(base is AssignOp.MIN)
    info = np.iinfo(np_type)
    return np_type(info.max if base is AssignOp.MIN else info.min)


def _size_values(params: Sequence[str], sizes: Mapping[str, int]) -> dict[str, Value]:
    values = {}
    for name in params:
        if name not in sizes:
            raise TCError(f"no value given for size parameter '{name}'")
        values[name] = Value(np.asarray(int(sizes[name]), dtype=np.int32), ScalarType.INT32)
    return values


# ------------------------------------------------------------------ statements


def _run_statement(
    facts: StmtFacts,
    tensors: dict[str, np.ndarray],
    types: Mapping[str, ScalarType],
    sizes: Mapping[str, Value],
) -> None:
    stmt = facts.stmt
    target = stmt.lhs.name
    if target not in tensors:
        raise InternalError(f"interp: statement writes unknown tensor '{target}'")
    out = tensors[target]
    if stmt.op.init:
        out.fill(identity(stmt.op, types[target]))
    reads = dict(tensors)
    if target in _reads_of(facts):
        reads[target] = out.copy()  # reads see the tensor as it was before the statement
    domain = build_domain(facts, sizes, reads, types)
    if domain is None:
        return  # an empty domain writes nothing
    for box in chunk_boxes(domain.box, CHUNK_POINTS):
        grid = Grid(reads, types, grid_names(domain, box, sizes))
        _run_chunk(facts, domain, box, grid, out, types[target])


def _reads_of(facts: StmtFacts) -> set[str]:
    names = tensors_read(facts.stmt.rhs)
    for clause in facts.stmt.where:
        if isinstance(clause, Let):
            names |= tensors_read(clause.value)
    return names


def _run_chunk(
    facts: StmtFacts,
    domain: Domain,
    box: Box,
    grid: Grid,
    out: np.ndarray,
    out_type: ScalarType,
) -> None:
    mask = np.bool_(True)
    for clause in facts.stmt.where:
        if isinstance(clause, RangeConstraint):
            value = evaluate_expr(clause.expr, grid, np.True_).array
            lo = evaluate_expr(clause.lo, grid, np.True_).array
            hi = evaluate_expr(clause.hi, grid, np.True_).array
            mask = mask & (lo <= value) & (value < hi)
    shape = np.broadcast_shapes(*(v.array.shape for v in grid.names.values()), np.shape(mask))
    mask = np.broadcast_to(mask, shape)
    if not mask.any():
        return
    for clause in facts.stmt.where:
        if isinstance(clause, Let):
            grid.names[clause.name] = evaluate_expr(clause.value, grid, mask)
    value = evaluate_expr(facts.stmt.rhs, grid, mask).to(out_type).array
    value = np.broadcast_to(value, shape)
    lhs = facts.stmt.lhs
    if _is_permutation(lhs, facts, domain, out.shape) and not (
        facts.stmt.op is AssignOp.ASSIGN and facts.reduction_vars
    ):
        _write_box(facts, domain, box, out, value, mask)
    else:
        _write_scatter(lhs, facts.stmt.op, grid, out, value, mask)


def _is_permutation(lhs: Access, facts: StmtFacts, domain: Domain, shape: tuple[int, ...]) -> bool:
    """True when the left-hand side is the index variables, each once, in some
    order, and the domain's box lies inside the output: then the writes of a chunk
    form a (transposed) slice of the output."""
    names = [arg.name for arg in lhs.args if isinstance(arg, Var)]
    if len(names) != len(lhs.args) or sorted(names) != sorted(facts.index_vars):
        return False
    for name, extent in zip(names, shape, strict=True):
        start, stop = domain.box[domain.axis[name]]
        if start < 0 or stop > extent:
            return False
    return True


def _write_box(
    facts: StmtFacts,
    domain: Domain,
    box: Box,
    out: np.ndarray,
    value: np.ndarray,
    mask: np.ndarray,
) -> None:
    lhs_vars = [arg.name for arg in facts.stmt.lhs.args if isinstance(arg, Var)]
    ranges = [box[domain.axis[name]] for name in lhs_vars]
    view = out[tuple(slice(start, stop) for start, stop in ranges) + (Ellipsis,)]
    order = np.argsort([domain.axis[name] for name in lhs_vars])
    view = view.transpose(order) if len(order) else view  # now in grid axis order
    reduction_axes = tuple(domain.axis[name] for name in facts.reduction_vars)
    op = facts.stmt.op
    if op is AssignOp.ASSIGN:
        np.copyto(view, value, where=mask)
        return
    ufunc = _UFUNC[op.base]
    neutral = identity(op, _scalar_type(out.dtype))
    filled = np.where(mask, value, neutral)
    reduced = (
        ufunc.reduce(filled, axis=reduction_axes, dtype=out.dtype) if reduction_axes else filled
    )
    view[...] = ufunc(view, reduced)


def _write_scatter(
    lhs: Access, op: AssignOp, grid: Grid, out: np.ndarray, value: np.ndarray, mask: np.ndarray
) -> None:
    points = tuple(
        np.broadcast_to(evaluate_expr(arg, grid, mask).array.astype(np.int64), mask.shape)[mask]
        for arg in lhs.args
    )
    for dim, (index, extent) in enumerate(zip(points, out.shape, strict=True)):
        bad = (index < 0) | (index >= extent)
        if bad.any():
            raise ShapeError(
                f"write out of range: index {int(index[bad][0])} for dimension {dim} of "
                f"'{lhs.name}' (size {extent})",
                lhs.span,
                hint="the output is too small for the statement's domain; check the where "
                "clauses, or the shape of the output passed with out=",
            )
    selected = value[mask]
    if op is AssignOp.ASSIGN:
        out[points + (Ellipsis,)] = selected
    else:
        _UFUNC[op.base].at(out, points, selected)


def _scalar_type(dtype: np.dtype) -> ScalarType:
    for scalar, np_type in NP_DTYPE.items():
        if np.dtype(np_type) == dtype:
            return scalar
    raise InternalError(f"interp: no TC type for NumPy dtype {dtype}")


__all__ = ["CHUNK_POINTS", "evaluate", "identity"]
