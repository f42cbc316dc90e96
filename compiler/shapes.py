"""Shapes at call time: bind the size parameters from the inputs, evaluate bounds.

    bind_sizes(ranged, {"I": (2, 3, 10, 12), ...})   -> {"N": 2, "C": 3, ...}
    check_preconditions(ranged, sizes)                (bind_sizes calls it)
    output_shapes(ranged, sizes)                      -> {"O": (2, 4, 8, 10)}
    eval_bound_expr(expr, sizes, index_values=None)   -> int
    infer_shapes(source, name, input_shapes)          -> parse, check, infer, bind, shapes

An output's shape is `hi` of every dimension (see `compiler.poly.ranges`: tcc stores
an output at the index value itself). Bound expressions are integers throughout:
`/` is floor division and `%` never negative, as TC's (Halide's) integer operators for
the positive divisors that range inference produces.

Every mismatch is a ShapeError naming the tensor, the dimension and both sizes; sizes
that break a condition of the def's where clause (`-> (O) where G >= 4 * H {`) are a
ShapeError pointing at it, and sizes that break a relation a read needs (`RangedDef.preconditions`: `G >= 4 * H` for
`gates(n, 3 * H + j) where j in 0:H`) are a ShapeError naming the read and the relation.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from compiler.diagnostics import InternalError, ShapeError, did_you_mean
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
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import RangedDef, TensorInfo
from compiler.frontend.printer import print_expr
from compiler.frontend.visit import walk


def _as_shape(tensor: TensorInfo, shape: object) -> tuple[int, ...]:
    try:
        dims = tuple(operator.index(d) for d in shape)  # type: ignore[attr-defined]
    except TypeError:
        raise ShapeError(
            f"the shape of '{tensor.name}' must be a sequence of integers, got {shape!r}",
            tensor.span,
        ) from None
    if len(dims) != tensor.rank:
        raise ShapeError(
            f"'{tensor.name}' has rank {tensor.rank} but a shape of rank {len(dims)} was "
            f"given: {list(dims)}",
            tensor.span,
            f"the def declares {_declared(tensor)}",
        )
    return dims


def _declared(tensor: TensorInfo) -> str:
    dims = ", ".join(print_expr(d) for d in tensor.dims or ())
    return f"'{tensor.name}' as ({dims})"


def bind_sizes(ranged: RangedDef, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The value of every size parameter, read off the inputs' shapes."""
    inputs = ranged.checked.inputs
    names = {t.name for t in inputs}
    for given in input_shapes:
        if given not in names:
            raise ShapeError(
                f"'{given}' is not an input of def '{ranged.name}'",
                hint=did_you_mean(given, names),
            )
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    for t in inputs:
        if t.name not in input_shapes:
            raise ShapeError(f"no shape given for input '{t.name}' of def '{ranged.name}'", t.span)
        shape = _as_shape(t, input_shapes[t.name])
        for k, (dim, n) in enumerate(zip(t.dims or (), shape, strict=True)):
            where = f"dimension {k} of '{t.name}'"
            if n <= 0:
                raise ShapeError(f"{where} has size {n}; sizes must be at least 1", t.span)
            if not isinstance(dim, (Var, Const)):
                continue  # an expression of sizes: checked once they are all bound
            if isinstance(dim, Const):
                if n != dim.value:
                    raise ShapeError(f"{where} is declared {dim.value} but has size {n}", t.span)
            elif dim.name in sizes and sizes[dim.name] != n:
                raise ShapeError(
                    f"size '{dim.name}' is {sizes[dim.name]} from {origin[dim.name]} but "
                    f"{n} from {where}",
                    t.span,
                    "tensors that share a size name must agree on it",
                )
            else:
                sizes.setdefault(dim.name, n)
                origin.setdefault(dim.name, where)
    _check_dim_exprs(inputs, input_shapes, sizes)
    missing = [p for p in ranged.checked.size_params if p not in sizes]
    if missing:
        raise ShapeError(
            f"size {', '.join(repr(m) for m in missing)} of def '{ranged.name}' is not the "
            "size of any input, so it cannot be bound from the arguments",
            ranged.checked.definition.span,
        )
    check_preconditions(ranged, sizes)
    return sizes


def check_preconditions(ranged: RangedDef, sizes: Mapping[str, int]) -> None:
    """A ShapeError for the first precondition these sizes break
    (`RangedDef.preconditions`): a condition of the def's where clause, pointing at it,
    or a read that range inference could not prove in bounds, naming the read and the
    relation of the sizes it needs. Either names the sizes bound."""
    outputs = {t.name for t in ranged.checked.outputs}
    for pre in ranged.preconditions:
        if eval_bound_expr(pre.cond, sizes):
            continue
        if pre.access is None:
            raise ShapeError(
                f"the sizes {_show(sizes)} break the condition `{print_expr(pre.cond)}` of "
                f"the where clause of def '{ranged.name}'",
                pre.cond.span,
                "pass inputs whose sizes satisfy every condition after the output list",
            )
        read = print_expr(pre.access)
        if pre.access.name in outputs:
            hint = (
                f"a read of output '{pre.access.name}' must lie in what earlier statements "
                "wrote; narrow this statement's where clause, or write those elements first"
            )
        else:
            hint = "pass inputs whose sizes satisfy it, or narrow this statement's where clause"
        raise ShapeError(
            f"this def reads `{read}` out of bounds with {_show(sizes)}: it needs "
            f"`{print_expr(pre.cond)}`",
            pre.access.span,
            hint,
        )


def _check_dim_exprs(
    inputs: Sequence[TensorInfo],
    input_shapes: Mapping[str, Sequence[int]],
    sizes: Mapping[str, int],
) -> None:
    """Dimensions declared as expressions of sizes (a gradient's `O_grad` has O's shape
    `H - KH + 1`): once per call, against the sizes the plain dimensions bound."""
    for t in inputs:
        for k, (dim, n) in enumerate(zip(t.dims or (), input_shapes[t.name], strict=True)):
            if isinstance(dim, (Var, Const)):
                continue
            if any(isinstance(e, Var) and e.name not in sizes for e in walk(dim)):
                continue  # reported below as an unbound size
            want = eval_bound_expr(dim, sizes)
            if n != want:
                raise ShapeError(
                    f"dimension {k} of '{t.name}' is declared `{print_expr(dim)}` = {want} "
                    f"(with {_show(sizes)}) but has size {n}",
                    t.span,
                    _dim_hint(t.name),
                )


def _dim_hint(name: str) -> str | None:
    if name.endswith("_grad"):
        return (
            f"'{name}' is the gradient of an output: it must have that output's shape "
            "(Kernel.output_shapes gives it)"
        )
    return None


def output_shapes(ranged: RangedDef, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Each output's shape: `hi` of its bounds (or its declared shape, which must hold them)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for t in ranged.checked.outputs:
        dims: list[int] = []
        for k, bound in enumerate(ranged.bounds_of(t.name)):
            lo, hi = eval_bound_expr(bound.lo, sizes), eval_bound_expr(bound.hi, sizes)
            where = f"dimension {k} of output '{t.name}'"
            if hi < 0:
                raise ShapeError(
                    f"{where} would have negative size {hi} (`{print_expr(bound.hi)}` with "
                    f"{_show(sizes)})",
                    t.span,
                    "the inputs are too small for this def, e.g. a kernel larger than the image",
                )
            if lo < 0 and lo < hi:
                raise ShapeError(
                    f"{where} is written at negative index {lo} (`{print_expr(bound.lo)}` "
                    f"with {_show(sizes)})",
                    t.span,
                )
            dims.append(hi)
        if t.dims is not None:
            dims = _check_declared(t, dims, sizes)
        shapes[t.name] = tuple(dims)
    return shapes


def _check_declared(t: TensorInfo, inferred: list[int], sizes: Mapping[str, int]) -> list[int]:
    declared = [eval_bound_expr(d, sizes) for d in t.dims or ()]
    for k, (want, got) in enumerate(zip(declared, inferred, strict=True)):
        if got > want:
            raise ShapeError(
                f"dimension {k} of output '{t.name}' is declared {want} but the statements "
                f"write indices up to {got - 1}",
                t.span,
            )
    return declared


def _show(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "no sizes"


_BIN = {
    BinOp.ADD: operator.add,
    BinOp.SUB: operator.sub,
    BinOp.MUL: operator.mul,
    BinOp.DIV: operator.floordiv,
    BinOp.MOD: operator.mod,
}
_CMP = {
    CmpOp.EQ: operator.eq,
    CmpOp.NE: operator.ne,
    CmpOp.LT: operator.lt,
    CmpOp.LE: operator.le,
    CmpOp.GT: operator.gt,
    CmpOp.GE: operator.ge,
}


def eval_bound_expr(
    expr: Expr, sizes: Mapping[str, int], index_values: Mapping[str, int] | None = None
) -> int:
    """Exact integer value of a bound expression (comparisons give 0 or 1)."""
    env = {**sizes, **(index_values or {})}
    return _eval(expr, env)


def _eval(e: Expr, env: Mapping[str, int]) -> int:
    if isinstance(e, Const) and isinstance(e.value, int):
        return e.value
    if isinstance(e, Var):
        if e.name not in env:
            raise InternalError(f"bound expression uses '{e.name}', which has no value")
        return env[e.name]
    if isinstance(e, Unary):
        v = _eval(e.operand, env)
        return -v if e.op is UnaryOp.NEG else int(not v)
    if isinstance(e, Binary):
        a, b = _eval(e.lhs, env), _eval(e.rhs, env)
        if e.op in (BinOp.DIV, BinOp.MOD) and b == 0:
            raise ShapeError(f"division by zero in `{print_expr(e)}` with {_show(env)}", e.span)
        return int(_BIN[e.op](a, b))
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        a, b = (_eval(x, env) for x in e.args)
        return min(a, b) if e.fn == "min" else max(a, b)
    if isinstance(e, Compare):
        return int(_CMP[e.op](_eval(e.lhs, env), _eval(e.rhs, env)))
    if isinstance(e, Logical):
        a = bool(_eval(e.lhs, env))
        if e.op is LogicOp.AND:
            return int(a and bool(_eval(e.rhs, env)))
        return int(a or bool(_eval(e.rhs, env)))
    if isinstance(e, Select):
        return _eval(e.then, env) if _eval(e.cond, env) else _eval(e.otherwise, env)
    raise InternalError(f"not an integer bound expression: `{print_expr(e)}`")


def infer_shapes(
    source: str, name: str | None, input_shapes: Mapping[str, Sequence[int]]
) -> dict[str, tuple[int, ...]]:
    """Output shapes of def `name` (None: the only def) for the given input shapes."""
    from compiler import pipeline

    ranged = pipeline.run(source, name, upto="ranges")
    return output_shapes(ranged, bind_sizes(ranged, input_shapes))
