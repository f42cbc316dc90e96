"""Binding NumPy arrays and sizes to a Function's parameters, with user-facing errors.

Shared by the loop-IR interpreter and every backend's runtime, so that both reject the
same calls with the same messages: a missing or unknown size or array, a wrong dtype, a
shape that disagrees with the buffer's shape expressions, a non-contiguous array, or a
read-only output.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from compiler.diagnostics import InternalError, ShapeError
from compiler.loops.ir import (
    Bin,
    BinOp,
    Const,
    Expr,
    FloorDiv,
    Function,
    Max,
    Min,
    Mod,
    Select,
    Unary,
    UnaryOp,
    VarRef,
)
from compiler.loops.printer import print_expr


def check_arguments(
    f: Function, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int]
) -> dict[str, int]:
    """Validate a call of `f`; return the sizes as plain ints. Raises ShapeError."""
    env = _check_sizes(f, sizes)
    names = {b.name for b in f.buffers}
    for extra in sorted(set(arrays) - names):
        raise ShapeError(
            f"{f.name} has no buffer named '{extra}'",
            hint=f"its buffers are {', '.join(sorted(names))}",
        )
    for b in f.buffers:
        if b.name not in arrays:
            raise ShapeError(f"missing array for buffer '{b.name}' of {f.name}")
        a = arrays[b.name]
        if not isinstance(a, np.ndarray):
            raise ShapeError(
                f"buffer '{b.name}' of {f.name} needs a NumPy array, got {type(a).__name__}"
            )
        if a.dtype != b.dtype.np:
            raise ShapeError(
                f"buffer '{b.name}' of {f.name} needs dtype {b.dtype.value}, got {a.dtype}",
                hint=f"convert it with .astype(numpy.{b.dtype.value})",
            )
        shape = tuple(eval_size_expr(d, env) for d in b.shape)
        if a.shape != shape:
            raise ShapeError(
                f"buffer '{b.name}' of {f.name} needs shape {shape}, got {a.shape}",
                hint="the shape follows from the sizes " + _sizes_text(env),
            )
        if not a.flags.c_contiguous:
            raise ShapeError(
                f"buffer '{b.name}' of {f.name} must be C-contiguous",
                hint="pass numpy.ascontiguousarray(...)",
            )
        if b.role.value == "out" and not a.flags.writeable:
            raise ShapeError(f"output buffer '{b.name}' of {f.name} is read-only")
    return env


def _check_sizes(f: Function, sizes: Mapping[str, int]) -> dict[str, int]:
    env: dict[str, int] = {}
    for extra in sorted(set(sizes) - set(f.size_params)):
        raise ShapeError(f"{f.name} has no size parameter '{extra}'")
    for name in f.size_params:
        if name not in sizes:
            raise ShapeError(f"missing value for size parameter '{name}' of {f.name}")
        value = sizes[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ShapeError(f"size parameter '{name}' must be an int, got {value!r}")
        if not -(2**63) <= int(value) < 2**63:
            raise ShapeError(f"size parameter '{name}' = {value} does not fit int64")
        env[name] = int(value)
    return env


def _sizes_text(env: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items()) or "(none)"


def eval_size_expr(e: Expr, env: Mapping[str, int]) -> int:
    """Evaluate an integer expression of size parameters (shapes, loop bounds)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, VarRef):
        return env[e.name]
    if isinstance(e, (Min, Max)):
        pick = min if isinstance(e, Min) else max
        return pick(eval_size_expr(e.a, env), eval_size_expr(e.b, env))
    if isinstance(e, (FloorDiv, Mod)):
        a, b = eval_size_expr(e.a, env), eval_size_expr(e.b, env)
        if b == 0:
            return 0
        return a // b if isinstance(e, FloorDiv) else a % b
    if isinstance(e, Bin) and e.op in _ARITH:
        return _ARITH[e.op](eval_size_expr(e.a, env), eval_size_expr(e.b, env))
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return -eval_size_expr(e.x, env)
    # a piecewise extent (`N >= 6 && M > N ? N : 5`: isl's `max(min(N, M), 5)`); its
    # conditions evaluate to 0 or 1
    if isinstance(e, Select):
        return eval_size_expr(e.a if eval_size_expr(e.cond, env) else e.b, env)
    if isinstance(e, Bin) and e.op in _TEST:
        return int(_TEST[e.op](eval_size_expr(e.a, env), eval_size_expr(e.b, env)))
    if isinstance(e, Unary) and e.op is UnaryOp.NOT:
        return int(not eval_size_expr(e.x, env))
    raise InternalError(f"not an expression of size parameters: {print_expr(e)}")


_ARITH = {
    BinOp.ADD: lambda a, b: a + b,
    BinOp.SUB: lambda a, b: a - b,
    BinOp.MUL: lambda a, b: a * b,
}
_TEST = {
    BinOp.AND: lambda a, b: bool(a) and bool(b),
    BinOp.OR: lambda a, b: bool(a) or bool(b),
    BinOp.EQ: lambda a, b: a == b,
    BinOp.NE: lambda a, b: a != b,
    BinOp.LT: lambda a, b: a < b,
    BinOp.LE: lambda a, b: a <= b,
    BinOp.GT: lambda a, b: a > b,
    BinOp.GE: lambda a, b: a >= b,
}
