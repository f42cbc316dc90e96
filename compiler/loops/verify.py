"""`verify(f)`: the loop IR's well-formedness rules, checked; a violation is a compiler bug.

Rules: every variable read is bound (size parameter, enclosing loop, Let or Local) with
the dtype the reference claims; a name is never rebound inside its own scope; every
buffer accessed is a parameter of the function or an enclosing Alloc, accessed with as
many int64 indices as it has dimensions; operand dtypes agree (arithmetic on numbers,
logic on bools, Calls on floats); stored and assigned values have the target's dtype;
loop bounds are int64; shapes read only size parameters; constants fit their dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.diagnostics import InternalError
from compiler.loops.ir import (
    Alloc,
    Assign,
    Bin,
    Block,
    Buffer,
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
    Role,
    Select,
    Stmt,
    Store,
    Unary,
    UnaryOp,
    VarRef,
)
from compiler.loops.printer import print_expr

_I64 = DType.INT64


class _Scope:
    def __init__(self) -> None:
        self.vars: dict[str, DType] = {}
        self.mutable: set[str] = set()
        self.buffers: dict[str, Buffer] = {}
        # id -> dtype of the expressions checked since a name last left the scope (a
        # tile's lanes share subexpressions: one check each). Binding a new name keeps
        # it (an expression checked before read only names bound then, whose dtypes
        # stay); a name or buffer leaving the scope empties it.
        self.checked: dict[int, DType] = {}


def verify(f: Function) -> None:
    """Raise InternalError naming the first rule `f` breaks; return None if it is well formed."""
    scope = _Scope()
    for name in f.size_params:
        _bind(scope, name, _I64, f.name)
    for b in f.buffers:
        if b.role is Role.TEMP:
            _fail(f"buffer {b.name} of function {f.name} has role temp (use Alloc)")
        _declare(scope, b)
    _stmt(f.body, scope)


def _fail(message: str) -> None:
    raise InternalError(f"loop IR: {message}")


def _bind(scope: _Scope, name: str, dtype: DType, where: str) -> None:
    if name in scope.vars:
        _fail(f"{name} is bound twice (in {where})")
    scope.vars[name] = dtype


def _declare(scope: _Scope, b: Buffer) -> None:
    if b.name in scope.buffers:
        _fail(f"buffer {b.name} is declared twice")
    for d in b.shape:
        _expect(d, _I64, scope, f"dimension of {b.name}")
        if not _reads_only(d, scope):
            _fail(f"the shape of {b.name} reads a loop variable: {print_expr(d)}")
    scope.buffers[b.name] = b


def _reads_only(e: Expr, scope: _Scope) -> bool:
    if isinstance(e, VarRef):
        return e.name in scope.vars and e.name not in scope.mutable
    return all(_reads_only(c, scope) for c in _expr_children(e))


def _stmt(s: Stmt, scope: _Scope) -> None:
    if isinstance(s, Block):
        for child in s.stmts:
            _stmt(child, scope)
    elif isinstance(s, For):
        _expect(s.lo, _I64, scope, f"lower bound of loop {s.var}")
        _expect(s.hi, _I64, scope, f"upper bound of loop {s.var}")
        _scoped(scope, s.var, _I64, s.body, mutable=False)
    elif isinstance(s, If):
        _expect(s.cond, DType.BOOL, scope, "if condition")
        _stmt(s.then, scope)
        if s.otherwise is not None:
            _stmt(s.otherwise, scope)
    elif isinstance(s, Store):
        buffer = _access(s.buffer, s.index, [_dtype(i, scope) for i in s.index], scope)
        _expect(s.value, buffer.dtype, scope, f"value stored to {buffer.name}")
    elif isinstance(s, Assign):
        if s.var not in scope.mutable:
            _fail(f"assignment to {s.var}, which is not an enclosing Local")
        _expect(s.value, scope.vars[s.var], scope, f"value assigned to {s.var}")
    elif isinstance(s, Let):
        _scoped(scope, s.var, _dtype(s.value, scope), s.body, mutable=False)
    elif isinstance(s, Local):
        _expect(s.init, s.dtype, scope, f"initial value of {s.var}")
        _scoped(scope, s.var, s.dtype, s.body, mutable=True)
    elif isinstance(s, Alloc):
        if s.buffer.role is not Role.TEMP:
            _fail(f"Alloc of {s.buffer.name} needs role temp, not {s.buffer.role.value}")
        _declare(scope, s.buffer)
        _stmt(s.body, scope)
        del scope.buffers[s.buffer.name]
        scope.checked.clear()
    else:
        _fail(f"unknown statement {type(s).__name__}")


def _scoped(scope: _Scope, var: str, dtype: DType, body: Stmt, *, mutable: bool) -> None:
    _bind(scope, var, dtype, "a nested scope")
    if mutable:
        scope.mutable.add(var)
    _stmt(body, scope)
    del scope.vars[var]
    scope.mutable.discard(var)
    scope.checked.clear()


def _access(b: Buffer, index: tuple[Expr, ...], kinds: list[DType], scope: _Scope) -> Buffer:
    """Check an access of `b` whose (checked) subscripts `index` have dtypes `kinds`."""
    declared = scope.buffers.get(b.name)
    if declared is None:
        _fail(f"buffer {b.name} is not a parameter or an enclosing Alloc")
    elif declared is not b and declared != b:
        _fail(f"buffer {b.name} differs from its declaration")
    if len(index) != len(b.shape):
        _fail(f"{b.name} has {len(b.shape)} dimensions but is indexed with {len(index)}")
    for i, kind in zip(index, kinds, strict=True):
        if kind is not _I64:
            _fail(f"index of {b.name} should be int64, found {kind.value}: {print_expr(i)}")
    return b


def _expect(e: Expr, dtype: DType, scope: _Scope, what: str) -> None:
    found = _dtype(e, scope)
    if found is not dtype:
        _fail(f"{what} should be {dtype.value}, found {found.value}: {print_expr(e)}")


def _expr_children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Const, VarRef)):
        return ()
    if isinstance(e, Load):
        return e.index
    if isinstance(e, (Bin, Min, Max, FloorDiv, Mod)):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.x,)
    if isinstance(e, Call):
        return e.args
    _fail(f"unknown expression {type(e).__name__}")
    return ()


def _dtype(e: Expr, scope: _Scope) -> DType:
    """Check `e` and its children; return its dtype."""
    known = scope.checked.get(id(e))
    if known is not None:
        return known
    scope.checked[id(e)] = found = _check(e, scope)
    return found


def _check(e: Expr, scope: _Scope) -> DType:
    kids = [_dtype(c, scope) for c in _expr_children(e)]

    def text() -> str:  # only for a message: printing every node was most of verify
        return print_expr(e)

    if isinstance(e, Const):
        _check_const(e)
    elif isinstance(e, VarRef):
        if e.name not in scope.vars:
            _fail(f"{e.name} is read but not bound")
        if scope.vars[e.name] is not e.dtype:
            _fail(f"{e.name} is {scope.vars[e.name].value}, read as {e.dtype.value}")
    elif isinstance(e, Load):
        _access(e.buffer, e.index, kids, scope)
    elif isinstance(e, Bin):
        _same(kids, text)
        if e.op.is_logical != (kids[0] is DType.BOOL) and not e.op.is_compare:
            _fail(f"operator {e.op.value} on {kids[0].value}: {text()}")
    elif isinstance(e, Unary):
        if (e.op is UnaryOp.NOT) != (kids[0] is DType.BOOL):
            _fail(f"operator {e.op.value} on {kids[0].value}: {text()}")
    elif isinstance(e, Call):
        _same(kids, text)
        if not kids[0].is_float:
            _fail(f"{e.fn} needs float arguments, found {kids[0].value}: {text()}")
    elif isinstance(e, Select):
        if kids[0] is not DType.BOOL:
            _fail(f"select condition is {kids[0].value}: {text()}")
        _same(kids[1:], text)
    elif isinstance(e, (Min, Max, FloorDiv, Mod)):
        _same(kids, text)
        if kids[0] is DType.BOOL:
            _fail(f"{type(e).__name__} of bools: {text()}")
    return e.dtype


def _same(dtypes: list[DType], text: Callable[[], str]) -> None:
    if len(set(dtypes)) > 1:
        _fail(f"operands of different dtypes ({', '.join(d.value for d in dtypes)}): {text()}")


# dtype -> (min, max) of an integer dtype, None for float and bool (np.iinfo and the
# DType properties were a third of verify's time: a tiled tree holds thousands of Consts)
_INT_LIMITS: dict[DType, tuple[int, int] | None] = {}


def _int_limits(dtype: DType) -> tuple[int, int] | None:
    if dtype not in _INT_LIMITS:
        integer = not dtype.is_float and dtype is not DType.BOOL
        info = np.iinfo(dtype.np) if integer else None
        _INT_LIMITS[dtype] = None if info is None else (int(info.min), int(info.max))
    return _INT_LIMITS[dtype]


def _check_const(c: Const) -> None:
    value = c.value
    if c.dtype is DType.BOOL:
        ok = isinstance(value, bool)
    elif (limits := _int_limits(c.dtype)) is not None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and limits[0] <= value <= limits[1]
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        _fail(f"constant {value!r} does not fit {c.dtype.value}")
