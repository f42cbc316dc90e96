"""Vectorised evaluation of TC expressions over a grid of index points.

Part of the reference evaluator (`compiler.interp`, whose docstring states the
semantics). A `Grid` holds the values of a statement's index variables as NumPy
arrays that broadcast against each other (variable `k` varies along axis `k`), the
size parameters and lets, and the tensors. `evaluate_expr(expr, grid, active)`
returns a `Value`: an array broadcastable to the grid, with its TC scalar type.

`active` is a boolean array (broadcastable to the grid) of the points where the
expression is really evaluated. Tensor reads are bounds-checked at active points
only; at inactive points indices are clamped, so a read that a ternary or `&&`
guards never touches memory out of range. Division by zero at an inactive point
is likewise harmless.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from compiler.diagnostics import InternalError, ShapeError
from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Call,
    Cast,
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
from compiler.frontend.printer import print_expr
from compiler.frontend.types import call_type, promote, unary_type
from compiler.frontend.visit import walk
from compiler.interp.builtins import builtin

NP_DTYPE: dict[ScalarType, type[np.generic]] = {
    ScalarType.BOOL: np.bool_,
    ScalarType.INT8: np.int8,
    ScalarType.INT16: np.int16,
    ScalarType.INT32: np.int32,
    ScalarType.INT64: np.int64,
    ScalarType.UINT8: np.uint8,
    ScalarType.UINT16: np.uint16,
    ScalarType.UINT32: np.uint32,
    ScalarType.UINT64: np.uint64,
    ScalarType.FLOAT16: np.float16,
    ScalarType.FLOAT32: np.float32,
    ScalarType.FLOAT64: np.float64,
}


@dataclass(frozen=True, slots=True)
class Value:
    """An array (broadcastable to the grid) and the TC type of its elements."""

    array: np.ndarray
    dtype: ScalarType

    def to(self, dtype: ScalarType) -> Value:
        """This value converted to `dtype` (TC's implicit conversion, a C cast)."""
        if dtype is self.dtype:
            return self
        with np.errstate(all="ignore"):
            return Value(self.array.astype(NP_DTYPE[dtype]), dtype)


@dataclass(slots=True)
class Grid:
    """The evaluation environment of one statement (or one chunk of it)."""

    tensors: Mapping[str, np.ndarray]
    tensor_types: Mapping[str, ScalarType]
    names: dict[str, Value] = field(default_factory=dict)  # sizes, index vars, lets


def evaluate_expr(expr: Expr, grid: Grid, active: np.ndarray) -> Value:
    """The value of `expr` at every grid point; only `active` points are checked."""
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) are TC's results
        return _eval(expr, grid, active)


def _eval(expr: Expr, grid: Grid, active: np.ndarray) -> Value:
    if isinstance(expr, Const):
        return Value(np.asarray(expr.value, dtype=NP_DTYPE[expr.dtype]), expr.dtype)
    if isinstance(expr, Var):
        if expr.name not in grid.names:
            raise InternalError(f"interp: no value for name '{expr.name}'")
        return grid.names[expr.name]
    if isinstance(expr, Access):
        return _read(expr, grid, active)
    if isinstance(expr, Binary):
        return _binary(expr, grid, active)
    if isinstance(expr, Unary):
        operand = _eval(expr.operand, grid, active)
        if expr.op is UnaryOp.NOT:
            return Value(np.logical_not(operand.array), unary_type(expr.op, operand.dtype))
        return Value(np.negative(operand.array), operand.dtype)
    if isinstance(expr, Compare):
        return _compare(expr, grid, active)
    if isinstance(expr, Logical):
        return _logical(expr, grid, active)
    if isinstance(expr, Select):
        return _select(expr, grid, active)
    if isinstance(expr, Cast):
        return _eval(expr.operand, grid, active).to(expr.dtype)
    if isinstance(expr, Call):
        return _call(expr, grid, active)
    raise InternalError(f"interp: unknown expression {expr!r}")


# ------------------------------------------------------------------ tensor reads


def _read(expr: Access, grid: Grid, active: np.ndarray) -> Value:
    tensor = grid.tensors.get(expr.name)
    if tensor is None:
        raise InternalError(f"interp: no tensor named '{expr.name}'")
    dtype = grid.tensor_types[expr.name]
    if not expr.args:
        return Value(np.asarray(tensor[()]), dtype)
    indices = [_eval(arg, grid, active).array.astype(np.int64) for arg in expr.args]
    indices = list(np.broadcast_arrays(*indices, active))[:-1]
    where = np.broadcast_to(active, indices[0].shape)
    safe: list[np.ndarray] = []
    for dim, (index, extent) in enumerate(zip(indices, tensor.shape, strict=True)):
        bad = where & ((index < 0) | (index >= extent))
        if bad.any():
            raise _out_of_range(expr, dim, int(index[bad].flat[0]), extent)
        safe.append(np.clip(index, 0, max(extent - 1, 0)))
    if tensor.size == 0:
        return Value(np.zeros(indices[0].shape, dtype=tensor.dtype), dtype)
    return Value(tensor[tuple(safe)], dtype)


def _out_of_range(expr: Access, dim: int, value: int, extent: int) -> ShapeError:
    return ShapeError(
        f"index {value} out of range for dimension {dim} of '{expr.name}' "
        f"(size {extent}) in the read {expr.name}(...)",
        expr.span,
        hint=out_of_range_hint(expr, dim),
    )


def out_of_range_hint(expr: Access, dim: int) -> str:
    """What to fix when a read leaves its tensor (every target's wording): the index
    tensor's values when the subscript reads one, else the sizes or the guard."""
    arg = expr.args[dim] if dim < len(expr.args) else None
    if arg is None or any(isinstance(e, Access) for e in walk(arg)):
        return (
            "an index read from a tensor must lie in [0, size); check the index tensor's "
            "values, or guard the read with a ternary"
        )
    return (
        f"the subscript `{print_expr(arg)}` depends on sizes and index variables only: with "
        f"these sizes it leaves '{expr.name}' where the def evaluates it (range inference "
        "warned about this read); narrow the where clause, or guard the read with a ternary "
        "that keeps it in bounds"
    )


# ------------------------------------------------------------------ arithmetic


def _binary(expr: Binary, grid: Grid, active: np.ndarray) -> Value:
    lhs = _eval(expr.lhs, grid, active)
    rhs = _eval(expr.rhs, grid, active)
    dtype = promote(lhs.dtype, rhs.dtype)
    a, b = lhs.to(dtype).array, rhs.to(dtype).array
    if expr.op is BinOp.ADD:
        out = a + b
    elif expr.op is BinOp.SUB:
        out = a - b
    elif expr.op is BinOp.MUL:
        out = a * b
    elif dtype.is_float:
        # Halide's float `%` is a - b * floor(a / b): the result has b's sign.
        out = a / b if expr.op is BinOp.DIV else a - b * np.floor(a / b)
    else:
        out = _euclid(a, b, expr.op)
    return Value(np.asarray(out).astype(NP_DTYPE[dtype], copy=False), dtype)


def _euclid(a: np.ndarray, b: np.ndarray, op: BinOp) -> np.ndarray:
    """Integer `/` and `%` as TC defines them: TC lowers to Halide, whose integer
    division is Euclidean -- (a/b)*b + a%b == a and 0 <= a%b < |b| (Halide's
    src/Divmod.h, "Halide division and modulo satisfy the Euclidean definition";
    for b > 0 this is floor division). Halide defines x/0 == x%0 == 0."""
    zero = b == 0
    divisor = np.where(zero, np.ones_like(b), b)
    magnitude = np.abs(divisor) if np.issubdtype(divisor.dtype, np.signedinteger) else divisor
    remainder = np.mod(a, magnitude)  # floor mod by |b|: always in [0, |b|)
    if op is BinOp.MOD:
        result = remainder
    else:
        result = (a - remainder) // divisor  # exact: a - r is a multiple of b
    return np.where(zero, np.zeros_like(result), result)


def _compare(expr: Compare, grid: Grid, active: np.ndarray) -> Value:
    lhs = _eval(expr.lhs, grid, active)
    rhs = _eval(expr.rhs, grid, active)
    dtype = promote(lhs.dtype, rhs.dtype)
    a, b = lhs.to(dtype).array, rhs.to(dtype).array
    ops = {
        CmpOp.EQ: np.equal,
        CmpOp.NE: np.not_equal,
        CmpOp.LT: np.less,
        CmpOp.LE: np.less_equal,
        CmpOp.GT: np.greater,
        CmpOp.GE: np.greater_equal,
    }
    return Value(ops[expr.op](a, b), ScalarType.BOOL)


def _truth(value: Value) -> np.ndarray:
    return value.array.astype(np.bool_)


def _logical(expr: Logical, grid: Grid, active: np.ndarray) -> Value:
    """`&&` and `||` short-circuit: the right operand is evaluated only where the
    left one does not decide, so `i > 0 && A(i - 1) > 0` never reads A(-1)."""
    lhs = _truth(_eval(expr.lhs, grid, active))
    if expr.op is LogicOp.AND:
        rhs = _truth(_eval(expr.rhs, grid, active & lhs))
        return Value(lhs & rhs, ScalarType.BOOL)
    rhs = _truth(_eval(expr.rhs, grid, active & ~lhs))
    return Value(lhs | rhs, ScalarType.BOOL)


def _select(expr: Select, grid: Grid, active: np.ndarray) -> Value:
    """Each branch is evaluated only where it is chosen."""
    cond = _truth(_eval(expr.cond, grid, active))
    then = _eval(expr.then, grid, active & cond)
    otherwise = _eval(expr.otherwise, grid, active & ~cond)
    dtype = promote(then.dtype, otherwise.dtype)
    return Value(np.where(cond, then.to(dtype).array, otherwise.to(dtype).array), dtype)


def _call(expr: Call, grid: Grid, active: np.ndarray) -> Value:
    fn = builtin(expr.fn, expr.span)
    args = [_eval(arg, grid, active) for arg in expr.args]
    dtype = call_type(expr.fn, [a.dtype for a in args])
    arrays = np.broadcast_arrays(*(a.to(dtype).array for a in args))
    out = fn(*(np.asarray(x) for x in arrays))
    return Value(np.asarray(out).astype(NP_DTYPE[dtype], copy=False), dtype)
