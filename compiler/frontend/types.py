"""TC's type rules: the scalar type of every expression, exactly as TC's sema.

TC classifies scalar types as (code, bits) with code one of Int, UInt, Float; `bool`
is UInt of 1 bit. A binary operation promotes its operand types (`promote`):

    equal types               -> that type
    int/uint  op  float       -> the float                     int32 * float32 -> float32
    float     op  float       -> the wider float               float32 + float64 -> float64
    uint      op  uint        -> the wider uint                uint8 + bool -> uint8
    int       op  int / uint  -> the int of the wider width    int8 + uint32 -> int32

Other rules (TC's `Sema::checkExp`):
- index variables and size parameters are int32; a let has its value's type;
  a tensor read has the tensor's dtype; a literal has its own dtype;
- comparisons and `&&`, `||`, `!` give bool; `c ? a : b` gives promote(a, b);
- `min`/`max` promote their operands like `+`; every other builtin promotes its
  arguments *starting from float32* (TC assumes builtins are float functions), so
  `exp(i)` is float32 and `exp(x)` with a float64 `x` is float64;
- a cast `T(e)` has type T.
A value may be stored into a tensor declared with type T only if
`promote(value, T) == T` (`is_narrowing`), otherwise TC asks for a cast.

`expr_type(expr, env)` applies these rules; `env` maps every name the expression
uses to its scalar type (`stmt_env` builds it for a checked statement).
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Let,
    Logical,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import CheckedDef, StmtFacts

INDEX_TYPE = ScalarType.INT32
"""The type of index variables and size parameters."""

_UNSIGNED = {
    1: ScalarType.BOOL,
    8: ScalarType.UINT8,
    16: ScalarType.UINT16,
    32: ScalarType.UINT32,
    64: ScalarType.UINT64,
}
_SIGNED = {8: ScalarType.INT8, 16: ScalarType.INT16, 32: ScalarType.INT32, 64: ScalarType.INT64}

# Builtins that TC treats as operators (no float32 seed in their promotion).
_OPERATOR_BUILTINS = frozenset({"min", "max"})


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The result type of a binary arithmetic operation on `a` and `b` (TC's match_types)."""
    if a is b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        return a if a.bits > b.bits else b
    a_unsigned, b_unsigned = _is_unsigned(a), _is_unsigned(b)
    if a_unsigned and b_unsigned:
        return a if a.bits > b.bits else b
    return _SIGNED[max(a.bits, b.bits, 8)]


def _is_unsigned(t: ScalarType) -> bool:
    return t is ScalarType.BOOL or t.name.startswith("UINT")


def promote_all(types: list[ScalarType], start: ScalarType | None = None) -> ScalarType:
    """Promote a list of types left to right, optionally starting from `start`."""
    result = start
    for t in types:
        result = t if result is None else promote(result, t)
    if result is None:
        raise InternalError("promote_all needs at least one type")
    return result


def is_narrowing(value: ScalarType, target: ScalarType) -> bool:
    """True when storing a `value` into a `target` tensor needs an explicit cast."""
    return promote(value, target) is not target


def const_type(c: Const) -> ScalarType:
    """The type of a literal: its own dtype (int literals int32, others float32)."""
    return c.dtype


def call_type(fn: str, arg_types: list[ScalarType]) -> ScalarType:
    """The result type of builtin `fn` applied to arguments of `arg_types`."""
    if fn in _OPERATOR_BUILTINS and arg_types:
        return promote_all(arg_types)
    return promote_all(arg_types, ScalarType.FLOAT32)


def unary_type(op: UnaryOp, operand: ScalarType) -> ScalarType:
    return ScalarType.BOOL if op is UnaryOp.NOT else operand


def expr_type(expr: Expr, env: Mapping[str, ScalarType]) -> ScalarType:
    """The scalar type of `expr` under TC's rules; `env` gives every name's type.

    >>> from compiler.frontend.ast import BinOp
    >>> e = Binary(BinOp.MUL, Var("i"), Const(0.5, ScalarType.FLOAT32))
    >>> expr_type(e, {"i": ScalarType.INT32}).value
    'float32'
    """
    if isinstance(expr, Const):
        return const_type(expr)
    if isinstance(expr, (Var, Access)):
        if expr.name not in env:
            raise InternalError(f"expr_type: no type for name '{expr.name}'")
        return env[expr.name]
    if isinstance(expr, Binary):
        return promote(expr_type(expr.lhs, env), expr_type(expr.rhs, env))
    if isinstance(expr, Unary):
        return unary_type(expr.op, expr_type(expr.operand, env))
    if isinstance(expr, (Compare, Logical)):
        return ScalarType.BOOL
    if isinstance(expr, Select):
        return promote(expr_type(expr.then, env), expr_type(expr.otherwise, env))
    if isinstance(expr, Cast):
        return expr.dtype
    if isinstance(expr, Call):
        return call_type(expr.fn, [expr_type(a, env) for a in expr.args])
    raise InternalError(f"expr_type: unknown expression {expr!r}")


def stmt_env(checked: CheckedDef, facts: StmtFacts) -> dict[str, ScalarType]:
    """Every name a checked statement can use, with its type: tensors, size
    parameters, index and reduction variables, and the statement's lets."""
    env: dict[str, ScalarType] = {t.name: t.dtype for t in checked.tensors}
    env.update(dict.fromkeys(checked.size_params, INDEX_TYPE))
    env.update(dict.fromkeys(facts.all_vars, INDEX_TYPE))
    for clause in facts.stmt.where:
        if isinstance(clause, Let):
            env[clause.name] = expr_type(clause.value, env)
    return env
