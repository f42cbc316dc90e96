"""TC expressions -> loop-IR expressions, with TC's exact types and semantics.

Part of `poly.astgen`. `ExprLowering(...).value(e)` gives the loop-IR expression of a
TC expression in its TC type (`compiler.frontend.types`), with a `Cast` wherever TC
promotes; `index(e)` gives a subscript as int64.

Semantics matched to the reference evaluator (`compiler.interp.expr`):
- index variables and sizes are int32 values (`Cast(int32, i)`); subscripts made only
  of index variables, sizes, int constants, `+ - *` are computed in int64 directly;
- integer `/` and `%` are Euclidean (Halide's): `r = a mod |b|` (floor modulo, never
  negative), `q = (a - r) / b` (exact), and `x / 0 == x % 0 == 0`; by a positive
  constant they are plain `FloorDiv` / `Mod`. Float `%` is `a - b * floor(a / b)`;
- `c ? a : b` is a lazy `Select`; `a && b` and `a || b` become lazy Selects when the
  right operand reads memory, so a guarded read never happens;
- TC's `min` / `max` are `Min` / `Max`; other builtins are float `Call`s.

Reads that `poly.schedule` could not prove in bounds (`unproven`) are read through a
`Select(in bounds, Load, 0)` and registered as checks: `checks` lists, in evaluation
order, `(condition, check id, index)` triples for the caller to turn into error
records (see `poly.astgen`); the condition includes the path condition of the
enclosing ternaries and short-circuits, so a guarded read is never reported.

Example: with `i` bound to loop variable `i`, `A(i) / 2` (A int32) becomes
`FloorDiv(Load(A, [i]), 2 : int32)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from compiler import loops as L
from compiler.diagnostics import InternalError, SemanticError
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
from compiler.frontend.types import INDEX_TYPE, call_type, promote
from compiler.names import NameSupply

I64 = L.DType.INT64


def dtype_of(t: ScalarType) -> L.DType:
    return L.DType(t.value)


def const(value: bool | int | float, dtype: L.DType) -> L.Const:
    return L.Const(value, dtype)


def cast(e: L.Expr, dtype: L.DType) -> L.Expr:
    return e if e.dtype is dtype else L.Cast(dtype, e)


def conj(a: L.Expr | None, b: L.Expr) -> L.Expr:
    return b if a is None else L.Bin(L.BinOp.AND, a, b)


@dataclass(frozen=True)
class ReadCheck:
    """A run-time bounds check: `access` may read dimension `dim` out of range, or,
    with `write`, `access` is a data-dependent left-hand side that may store there."""

    access: Access
    dim: int
    write: bool = False


@dataclass
class ExprLowering:
    """Lowers the expressions of one statement instance.

    `index_values`: each index variable's value (int64 loop-IR expression);
    `types`: every name's TC type (`frontend.types.stmt_env`); `buffers`: by tensor
    name; `lets`: let names bound in scope; `unproven`: reads to check;
    `register`: gives a check its id (shared by the whole function).
    """

    index_values: Mapping[str, L.Expr]
    types: Mapping[str, ScalarType]
    buffers: Mapping[str, L.Buffer]
    sizes: frozenset[str]
    lets: frozenset[str]
    unproven: frozenset[tuple[Access, int]]
    register: Callable[[ReadCheck], int]
    checks: list[tuple[L.Expr, int, L.Expr]] = field(default_factory=list)

    # ------------------------------------------------------------ values

    def value(self, e: Expr, path: L.Expr | None = None) -> L.Expr:
        """`e` in its TC type; `path`: the condition under which it is evaluated."""
        if isinstance(e, Const):
            return const(e.value, dtype_of(e.dtype))
        if isinstance(e, Var):
            return self._var(e.name)
        if isinstance(e, Access):
            return self._read(e, path)
        if isinstance(e, Binary):
            return self._binary(e, path)
        if isinstance(e, Unary):
            x = self.value(e.operand, path)
            return L.Unary(L.UnaryOp.NOT if e.op is UnaryOp.NOT else L.UnaryOp.NEG, x)
        if isinstance(e, Compare):
            t = promote(self.type_of(e.lhs), self.type_of(e.rhs))
            a, b = self.typed(e.lhs, t, path), self.typed(e.rhs, t, path)
            return L.Bin(_CMP[e.op], a, b)
        if isinstance(e, Logical):
            return self._logical(e, path)
        if isinstance(e, Select):
            t = self.type_of(e)
            cond = self.truth(e.cond, path)
            then = self.typed(e.then, t, conj(path, cond))
            otherwise = self.typed(e.otherwise, t, conj(path, L.Unary(L.UnaryOp.NOT, cond)))
            return L.Select(cond, then, otherwise)
        if isinstance(e, Cast):
            return cast(self.value(e.operand, path), dtype_of(e.dtype))
        if isinstance(e, Call):
            return self._call(e, path)
        raise InternalError(f"lower: unknown expression {e!r}")

    def type_of(self, e: Expr) -> ScalarType:
        from compiler.frontend.types import expr_type

        return expr_type(e, self.types)

    def typed(self, e: Expr, t: ScalarType, path: L.Expr | None) -> L.Expr:
        return cast(self.value(e, path), dtype_of(t))

    def truth(self, e: Expr, path: L.Expr | None) -> L.Expr:
        x = self.value(e, path)
        return x if x.dtype is L.DType.BOOL else cast(x, L.DType.BOOL)

    def _var(self, name: str) -> L.Expr:
        if name in self.index_values:
            return cast(self.index_values[name], dtype_of(INDEX_TYPE))
        if name in self.sizes:
            return cast(L.VarRef(name), dtype_of(INDEX_TYPE))
        if name in self.lets:
            return L.VarRef(name, dtype_of(self.types[name]))
        raise InternalError(f"lower: unbound name '{name}'")

    def _binary(self, e: Binary, path: L.Expr | None) -> L.Expr:
        t = promote(self.type_of(e.lhs), self.type_of(e.rhs))
        a, b = self.typed(e.lhs, t, path), self.typed(e.rhs, t, path)
        if e.op in _ARITH:
            return L.Bin(_ARITH[e.op], a, b)
        if t.is_float:
            return L.Bin(L.BinOp.DIV, a, b) if e.op is BinOp.DIV else L.Mod(a, b)
        return euclid(e.op, a, b, t)

    def _logical(self, e: Logical, path: L.Expr | None) -> L.Expr:
        lhs = self.truth(e.lhs, path)
        guard = lhs if e.op is LogicOp.AND else L.Unary(L.UnaryOp.NOT, lhs)
        rhs = self.truth(e.rhs, conj(path, guard))
        if not _reads_memory(rhs):
            return L.Bin(L.BinOp.AND if e.op is LogicOp.AND else L.BinOp.OR, lhs, rhs)
        if e.op is LogicOp.AND:
            return L.Select(lhs, rhs, const(False, L.DType.BOOL))
        return L.Select(lhs, const(True, L.DType.BOOL), rhs)

    def _call(self, e: Call, path: L.Expr | None) -> L.Expr:
        t = call_type(e.fn, [self.type_of(a) for a in e.args])
        args = [self.typed(a, t, path) for a in e.args]
        if e.fn in ("min", "max") and len(args) == 2:
            return L.Min(*args) if e.fn == "min" else L.Max(*args)
        if L.MATH_ARITY.get(e.fn) != len(args):
            raise SemanticError(
                f"builtin '{e.fn}' is not supported by the native targets yet",
                e.span,
                hint="use target='interp' for this def",
            )
        return L.Call(e.fn, tuple(args))

    # ------------------------------------------------------------ reads

    def _read(self, e: Access, path: L.Expr | None) -> L.Expr:
        buffer = self.buffers[e.name]
        index = tuple(self.index(arg, path) for arg in e.args)
        load = L.Load(buffer, index)
        inside: L.Expr | None = None
        for dim, (i, extent) in enumerate(zip(index, buffer.shape, strict=True)):
            if (e, dim) not in self.unproven:
                continue
            ok = L.Bin(
                L.BinOp.AND,
                L.Bin(L.BinOp.GE, i, const(0, I64)),
                L.Bin(L.BinOp.LT, i, extent),
            )
            bad = L.Unary(L.UnaryOp.NOT, ok)
            self.checks.append((conj(path, bad), self.register(ReadCheck(e, dim)), i))
            inside = conj(inside, ok)
        if inside is None:
            return load
        zero = const(False if buffer.dtype is L.DType.BOOL else 0, buffer.dtype)
        return L.Select(inside, load, zero)

    def store_index(
        self, lhs: Access, checked: tuple[int, ...]
    ) -> tuple[tuple[L.Expr, ...], L.Expr | None]:
        """The subscripts of a left-hand side (loading the tensors they read), and the
        condition that the `checked` dimensions are in bounds (None when none are),
        registering one write check per such dimension (see `ReadCheck`)."""
        buffer = self.buffers[lhs.name]
        index = tuple(self.index(arg) for arg in lhs.args)
        inside: L.Expr | None = None
        for dim in checked:
            i, extent = index[dim], buffer.shape[dim]
            ok = L.Bin(
                L.BinOp.AND,
                L.Bin(L.BinOp.GE, i, const(0, I64)),
                L.Bin(L.BinOp.LT, i, extent),
            )
            check_id = self.register(ReadCheck(lhs, dim, write=True))
            self.checks.append((L.Unary(L.UnaryOp.NOT, ok), check_id, i))
            inside = conj(inside, ok)
        return index, inside

    def index(self, e: Expr, path: L.Expr | None = None) -> L.Expr:
        """A subscript as int64."""
        if self._is_plain_index(e):
            return self._index64(e)
        return cast(self.value(e, path), I64)

    def _is_plain_index(self, e: Expr) -> bool:
        if isinstance(e, Var):
            return e.name in self.index_values or e.name in self.sizes
        if isinstance(e, Const):
            return e.dtype is ScalarType.INT32
        if isinstance(e, Binary) and e.op in _ARITH:
            return self._is_plain_index(e.lhs) and self._is_plain_index(e.rhs)
        if isinstance(e, Unary) and e.op is UnaryOp.NEG:
            return self._is_plain_index(e.operand)
        return False

    def _index64(self, e: Expr) -> L.Expr:
        if isinstance(e, Var):
            v = self.index_values.get(e.name)
            return v if v is not None else L.VarRef(e.name)
        if isinstance(e, Const):
            return const(int(e.value), I64)
        if isinstance(e, Binary):
            return L.Bin(_ARITH[e.op], self._index64(e.lhs), self._index64(e.rhs))
        if isinstance(e, Unary):
            return L.Unary(L.UnaryOp.NEG, self._index64(e.operand))
        raise InternalError(f"lower: not a plain subscript {e!r}")


def bound_to_loops(e: Expr) -> L.Expr:
    """A bound or shape expression of the sizes (`N - KH + 1`, `(W - 1) / 2`,
    `min(A, B)`, isl's piecewise `N >= 6 && M > N ? N : 5`) as int64 loop IR (its
    conditions as booleans): `/` and `%` are floor operations, as in `compiler.shapes`."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return const(e.value, I64)
    if isinstance(e, Var):
        return L.VarRef(e.name)
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return L.Unary(L.UnaryOp.NEG, bound_to_loops(e.operand))
    if isinstance(e, Binary):
        a, b = bound_to_loops(e.lhs), bound_to_loops(e.rhs)
        if e.op in _ARITH:
            return L.Bin(_ARITH[e.op], a, b)
        return L.FloorDiv(a, b) if e.op is BinOp.DIV else L.Mod(a, b)
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        a, b = (bound_to_loops(x) for x in e.args)
        return L.Min(a, b) if e.fn == "min" else L.Max(a, b)
    if isinstance(e, Select):  # a piecewise extent (`max(min(N, M), 5)`, as isl splits it)
        cond, a, b = (bound_to_loops(x) for x in (e.cond, e.then, e.otherwise))
        return L.Select(cond, a, b)
    if isinstance(e, Compare):
        return L.Bin(_CMP[e.op], bound_to_loops(e.lhs), bound_to_loops(e.rhs))
    if isinstance(e, Logical):
        op = L.BinOp.AND if e.op is LogicOp.AND else L.BinOp.OR
        return L.Bin(op, bound_to_loops(e.lhs), bound_to_loops(e.rhs))
    if isinstance(e, Unary) and e.op is UnaryOp.NOT:
        return L.Unary(L.UnaryOp.NOT, bound_to_loops(e.operand))
    raise InternalError(f"not a bound expression of the sizes: {e!r}")


def euclid(op: BinOp, a: L.Expr, b: L.Expr, t: ScalarType) -> L.Expr:
    """Integer `/` or `%` as TC (Halide) defines them: Euclidean, `x / 0 == 0`."""
    if (isinstance(b, L.Const) and int(b.value) > 0) or not t.is_signed:
        if isinstance(b, L.Const) and int(b.value) > 0:
            return L.FloorDiv(a, b) if op is BinOp.DIV else L.Mod(a, b)
        return L.Bin(L.BinOp.DIV if op is BinOp.DIV else L.BinOp.MOD, a, b)
    magnitude = L.Max(b, L.Unary(L.UnaryOp.NEG, b))
    remainder = L.Mod(a, magnitude)  # floor modulo by |b|: in [0, |b|); 0 when b == 0
    if op is BinOp.MOD:
        return remainder
    return L.Bin(L.BinOp.DIV, L.Bin(L.BinOp.SUB, a, remainder), b)  # exact; 0 when b == 0


def _reads_memory(e: L.Expr) -> bool:
    found = False

    class _Loads(L.Visitor):
        def visit_Load(self, node: L.Load) -> None:
            nonlocal found
            found = True

    _Loads().visit(e)
    return found


_ARITH = {BinOp.ADD: L.BinOp.ADD, BinOp.SUB: L.BinOp.SUB, BinOp.MUL: L.BinOp.MUL}
_CMP = {
    CmpOp.EQ: L.BinOp.EQ,
    CmpOp.NE: L.BinOp.NE,
    CmpOp.LT: L.BinOp.LT,
    CmpOp.LE: L.BinOp.LE,
    CmpOp.GT: L.BinOp.GT,
    CmpOp.GE: L.BinOp.GE,
}


def copy_nest(source: L.Buffer, dest: L.Buffer) -> L.Stmt:
    """Serial loops copying `source` into `dest` (a snapshot); the loop variables
    `s0, s1, ...` skip the names of the sizes in the shape (`s0_1` for a size `s0`)."""
    supply = NameSupply(set().union(*(L.var_names(e) for e in source.shape)))
    names = [supply.fresh(f"s{k}") for k in range(len(source.shape))]
    index = tuple(L.VarRef(n) for n in names)
    body: L.Stmt = L.Store(dest, index, L.Load(source, index))
    for name, extent in reversed(list(zip(names, source.shape, strict=True))):
        body = L.For(name, const(0, I64), extent, 1, body)
    return body


__all__ = [
    "ExprLowering",
    "ReadCheck",
    "bound_to_loops",
    "cast",
    "const",
    "copy_nest",
    "dtype_of",
    "euclid",
]
