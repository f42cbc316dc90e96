"""Tests of TC's type rules (compiler.frontend.types)."""

from __future__ import annotations

import itertools

import pytest

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Call,
    Cast,
    CmpOp,
    Compare,
    Const,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.frontend.types import (
    call_type,
    const_type,
    expr_type,
    is_narrowing,
    promote,
    stmt_env,
)

T = ScalarType
ALL = list(ScalarType)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (T.INT32, T.INT32, T.INT32),
        (T.INT32, T.FLOAT32, T.FLOAT32),
        (T.FLOAT64, T.INT64, T.FLOAT64),
        (T.UINT8, T.FLOAT16, T.FLOAT16),
        (T.FLOAT32, T.FLOAT64, T.FLOAT64),
        (T.FLOAT16, T.FLOAT32, T.FLOAT32),
        (T.UINT8, T.UINT32, T.UINT32),
        (T.BOOL, T.UINT8, T.UINT8),
        (T.BOOL, T.BOOL, T.BOOL),
        (T.INT8, T.UINT32, T.INT32),  # int op uint -> int of the wider width
        (T.UINT64, T.INT8, T.INT64),
        (T.INT16, T.INT64, T.INT64),
        (T.BOOL, T.INT32, T.INT32),
        (T.BOOL, T.INT8, T.INT8),
        (T.INT32, T.UINT32, T.INT32),
    ],
)
def test_promote_table(a: ScalarType, b: ScalarType, expected: ScalarType) -> None:
    assert promote(a, b) is expected
    assert promote(b, a) is expected


def test_promote_is_commutative_associative_and_idempotent() -> None:
    for a, b in itertools.product(ALL, ALL):
        assert promote(a, b) is promote(b, a)
    for a in ALL:
        assert promote(a, a) is a
    for a, b, c in itertools.product(ALL, ALL, ALL):
        assert promote(promote(a, b), c) is promote(a, promote(b, c))


def test_promote_never_loses_floatness_or_width() -> None:
    for a, b in itertools.product(ALL, ALL):
        r = promote(a, b)
        assert r.is_float == (a.is_float or b.is_float)
        if r.is_float:
            assert r.bits == max(t.bits for t in (a, b) if t.is_float)
        else:
            assert r.bits == max(a.bits, b.bits)


def test_narrowing() -> None:
    assert not is_narrowing(T.INT32, T.FLOAT32)
    assert not is_narrowing(T.UINT8, T.INT32)
    assert is_narrowing(T.FLOAT32, T.INT32)
    assert is_narrowing(T.FLOAT64, T.FLOAT32)
    assert is_narrowing(T.INT32, T.UINT32)
    assert is_narrowing(T.INT32, T.BOOL)
    for t in ALL:
        assert not is_narrowing(t, t)


def test_const_and_call_types() -> None:
    assert const_type(Const(1, T.INT32)) is T.INT32
    assert const_type(Const(0.5, T.FLOAT32)) is T.FLOAT32
    assert call_type("exp", [T.INT32]) is T.FLOAT32  # builtins start from float32
    assert call_type("exp", [T.FLOAT64]) is T.FLOAT64
    assert call_type("fmax", [T.FLOAT32, T.INT32]) is T.FLOAT32
    assert call_type("min", [T.INT32, T.INT32]) is T.INT32  # min/max are operators
    assert call_type("max", [T.INT8, T.FLOAT16]) is T.FLOAT16


def test_expr_type_rules() -> None:
    env = {"i": T.INT32, "A": T.FLOAT64, "B": T.UINT8, "x": T.FLOAT32}
    a = Access("A", (Var("i"),))
    b = Access("B", (Var("i"),))
    assert expr_type(Binary(BinOp.ADD, Var("i"), Const(0.5, T.FLOAT32)), env) is T.FLOAT32
    assert expr_type(Binary(BinOp.MUL, b, Var("i")), env) is T.INT32
    assert expr_type(Binary(BinOp.MUL, b, b), env) is T.UINT8
    assert expr_type(Compare(CmpOp.LT, a, Var("i")), env) is T.BOOL
    assert expr_type(Unary(UnaryOp.NEG, b), env) is T.UINT8
    assert expr_type(Unary(UnaryOp.NOT, Compare(CmpOp.EQ, b, b)), env) is T.BOOL
    assert expr_type(Select(Compare(CmpOp.GT, a, a), Var("x"), a), env) is T.FLOAT64
    assert expr_type(Cast(T.INT16, a), env) is T.INT16
    assert expr_type(Call("exp", (Var("x"),)), env) is T.FLOAT32
    with pytest.raises(InternalError):
        expr_type(Var("nope"), env)


def test_stmt_env_types_lets_and_variables() -> None:
    checked = check_def(
        parse(
            """
            def f(uint8(N, K) A, double(K) w) -> (O) {
                O(i) +=! x * y where x = A(i, k), y = x * w(k)
            }
            """
        ).get()
    )
    env = stmt_env(checked, checked.stmts[0])
    assert env == {
        "A": T.UINT8,
        "w": T.FLOAT64,
        "O": T.FLOAT64,
        "N": T.INT32,
        "K": T.INT32,
        "i": T.INT32,
        "k": T.INT32,
        "x": T.UINT8,
        "y": T.FLOAT64,
    }
    assert expr_type(checked.definition.stmts[0].rhs, env) is T.FLOAT64
