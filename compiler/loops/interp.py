"""The loop IR's executable definition: a scalar NumPy interpreter.

`run_function(f, arrays, sizes)` runs `f` one scalar at a time, writing outputs into the
given arrays in place, exactly as compiled code would. It is slow and obviously
faithful to the semantics stated in `compiler.loops.ir`: integers wrap (computed with
Python ints and wrapped to the dtype), integer division by zero is 0, `Select` evaluates
only the chosen side, floats compute in their own dtype (NumPy scalars), math builtins
are rounded float64 reference values. An access addresses its buffer's element at the
row-major flat offset of its subscripts (as `cpu.llvm_emit` does), so a subscript
may run past its dimension into the next ones (`loops.collapse` writes `X[..., 0,
h * W + w]`); a negative subscript, or a read or write outside the buffer, raises
InternalError, so lowered programs can be tested for staying in bounds.

Example: for `C[i] = A[i] + 1.0f` over `i < N`, `run_function(f, {"A": a, "C": c},
{"N": 3})` leaves `c == a + 1`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from compiler.diagnostics import InternalError
from compiler.loops import mathref
from compiler.loops.arguments import check_arguments
from compiler.loops.ir import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    FloorDiv,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    Max,
    Min,
    Mod,
    Select,
    Stmt,
    Store,
    Unary,
    UnaryOp,
    VarRef,
)

Value = Any  # a NumPy scalar of the expression's dtype


class _State:
    def __init__(self, buffers: dict[str, np.ndarray], env: dict[str, Value]) -> None:
        self.buffers = buffers
        self.env = env


def run_function(
    f: Function, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Run `f` on `arrays` (outputs written in place); returns the arrays by name."""
    env_sizes = check_arguments(f, arrays, sizes)
    state = _State(dict(arrays), {k: np.int64(v) for k, v in env_sizes.items()})
    with np.errstate(all="ignore"):
        _exec(f.body, state)
    return dict(arrays)


def eval_expr(
    e: Expr, env: dict[str, Value], buffers: dict[str, np.ndarray] | None = None
) -> Value:
    """Evaluate one expression with variables `env` (and buffers, if it loads)."""
    with np.errstate(all="ignore"):
        return _eval(e, _State(buffers or {}, env))


def wrap(value: int, dtype: DType) -> Value:
    """An integer wrapped (two's complement) to `dtype`, as a NumPy scalar."""
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return dtype.np.type(value)


def _exec(s: Stmt, st: _State) -> None:
    handler = _STMTS.get(type(s))
    if handler is None:
        raise InternalError(f"interpreter: unknown statement {type(s).__name__}")
    handler(s, st)


def _exec_for(s: For, st: _State) -> None:
    lo, hi = int(_eval(s.lo, st)), int(_eval(s.hi, st))
    for v in range(lo, hi, s.step):
        st.env[s.var] = np.int64(v)
        _exec(s.body, st)
    st.env.pop(s.var, None)


def _exec_if(s: If, st: _State) -> None:
    if _eval(s.cond, st):
        _exec(s.then, st)
    elif s.otherwise is not None:
        _exec(s.otherwise, st)


def _exec_block(s: Block, st: _State) -> None:
    for child in s.stmts:
        _exec(child, st)


def _exec_store(s: Store, st: _State) -> None:
    where = _index(s.buffer.name, s.index, st)
    st.buffers[s.buffer.name][where] = _eval(s.value, st)


def _exec_scoped(var: str, value: Value, body: Stmt, st: _State) -> None:
    st.env[var] = value
    _exec(body, st)
    del st.env[var]


def _exec_alloc(s: Alloc, st: _State) -> None:
    shape = tuple(int(_eval(d, st)) for d in s.buffer.shape)
    st.buffers[s.buffer.name] = np.zeros(shape, dtype=s.buffer.dtype.np)
    _exec(s.body, st)
    del st.buffers[s.buffer.name]


_STMTS: dict[type, Callable[[Any, _State], None]] = {
    For: _exec_for,
    If: _exec_if,
    Block: _exec_block,
    Store: _exec_store,
    Let: lambda s, st: _exec_scoped(s.var, _eval(s.value, st), s.body, st),
    Local: lambda s, st: _exec_scoped(s.var, _eval(s.init, st), s.body, st),
    Assign: lambda s, st: st.env.__setitem__(s.var, _eval(s.value, st)),
    Alloc: _exec_alloc,
}


def _index(name: str, index: tuple[Expr, ...], st: _State) -> tuple[int, ...]:
    where = tuple(int(_eval(i, st)) for i in index)
    shape = st.buffers[name].shape
    if all(0 <= w < n for w, n in zip(where, shape, strict=True)):
        return where
    flat = 0
    for w, n in zip(where, shape, strict=True):
        flat = flat * n + w
    if any(w < 0 for w in where) or not 0 <= flat < int(np.prod(shape)):
        raise InternalError(f"interpreter: {name}{list(where)} is out of bounds of shape {shape}")
    return tuple(int(x) for x in np.unravel_index(flat, shape))


def _eval(e: Expr, st: _State) -> Value:
    handler = _EXPRS.get(type(e))
    if handler is None:
        raise InternalError(f"interpreter: unknown expression {type(e).__name__}")
    return handler(e, st)


def _const(e: Const) -> Value:
    if e.dtype.is_int:
        return wrap(int(e.value), e.dtype)
    return e.dtype.np.type(e.value)


def _bin(e: Bin, st: _State) -> Value:
    a, b = _eval(e.a, st), _eval(e.b, st)
    op, dtype = e.op, e.a.dtype
    if op.is_compare:
        return np.bool_(_COMPARE[op](a, b))
    if op.is_logical:
        return np.bool_(bool(a) and bool(b)) if op is BinOp.AND else np.bool_(bool(a) or bool(b))
    if dtype.is_int:
        return wrap(_int_arith(op, int(a), int(b)), dtype)
    if op is BinOp.MOD:
        return np.fmod(a, b)
    return _FLOAT[op](a, b)


def _int_arith(op: BinOp, a: int, b: int) -> int:
    if op is BinOp.ADD:
        return a + b
    if op is BinOp.SUB:
        return a - b
    if op is BinOp.MUL:
        return a * b
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    q = -q if (a < 0) != (b < 0) else q
    return q if op is BinOp.DIV else a - b * q


_COMPARE = {
    BinOp.EQ: lambda a, b: a == b,
    BinOp.NE: lambda a, b: a != b,
    BinOp.LT: lambda a, b: a < b,
    BinOp.LE: lambda a, b: a <= b,
    BinOp.GT: lambda a, b: a > b,
    BinOp.GE: lambda a, b: a >= b,
}
_FLOAT = {
    BinOp.ADD: lambda a, b: a + b,
    BinOp.SUB: lambda a, b: a - b,
    BinOp.MUL: lambda a, b: a * b,
    BinOp.DIV: lambda a, b: a / b,
}


def _unary(e: Unary, st: _State) -> Value:
    x = _eval(e.x, st)
    if e.op is UnaryOp.NOT:
        return np.bool_(not x)
    return wrap(-int(x), e.dtype) if e.dtype.is_int else -x


def _floor(e: FloorDiv | Mod, st: _State) -> Value:
    a, b = _eval(e.a, st), _eval(e.b, st)
    if e.dtype.is_int:
        a, b = int(a), int(b)
        if b == 0:
            return wrap(0, e.dtype)
        return wrap(a // b if isinstance(e, FloorDiv) else a % b, e.dtype)
    floor = np.floor(a / b)
    return floor if isinstance(e, FloorDiv) else a - b * floor


def _minmax(e: Min | Max, st: _State) -> Value:
    a, b = _eval(e.a, st), _eval(e.b, st)
    if e.dtype.is_float:
        return np.minimum(a, b) if isinstance(e, Min) else np.maximum(a, b)
    return min(a, b) if isinstance(e, Min) else max(a, b)


def _cast(e: Cast, st: _State) -> Value:
    x = _eval(e.x, st)
    if e.dtype is DType.BOOL:
        return np.bool_(x != 0)
    if e.dtype.is_int and e.x.dtype.is_int or e.x.dtype is DType.BOOL:
        return wrap(int(x), e.dtype) if e.dtype.is_int else e.dtype.np.type(int(x))
    return np.array(x).astype(e.dtype.np)[()]


def _select(e: Select, st: _State) -> Value:
    return _eval(e.a, st) if _eval(e.cond, st) else _eval(e.b, st)


def _load(e: Load, st: _State) -> Value:
    return st.buffers[e.buffer.name][_index(e.buffer.name, e.index, st)]


_EXPRS: dict[type, Callable[[Any, _State], Value]] = {
    Const: lambda e, st: _const(e),
    VarRef: lambda e, st: st.env[e.name],
    Load: _load,
    Bin: _bin,
    Unary: _unary,
    Call: lambda e, st: mathref.call(e.fn, [_eval(a, st) for a in e.args], e.dtype.np),
    Select: _select,
    Cast: _cast,
    Min: _minmax,
    Max: _minmax,
    FloorDiv: _floor,
    Mod: _floor,
}
