"""The TC printer: golden text for every construct and precedence case, and the
minimality of its parentheses (removing any pair changes the parse or breaks it)."""

from __future__ import annotations

import pytest
from hypothesis import given

from compiler.diagnostics import InternalError, ParseError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Cast,
    CmpOp,
    Compare,
    Const,
    Def,
    Exists,
    Expr,
    Let,
    Logical,
    LogicOp,
    Module,
    Param,
    RangeConstraint,
    ScalarType,
    Select,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.parser import parse_expr
from compiler.frontend.printer import print_def, print_expr, print_module, print_stmt, print_where
from tests.frontend.strategies import exprs

F32, F64, I32 = ScalarType.FLOAT32, ScalarType.FLOAT64, ScalarType.INT32
a, b, c, d, e = (Var(n) for n in "abcde")
i, j, k = Var("i"), Var("j"), Var("k")
N, M = Var("N"), Var("M")


def add(x: Expr, y: Expr) -> Binary:
    return Binary(BinOp.ADD, x, y)


def sub(x: Expr, y: Expr) -> Binary:
    return Binary(BinOp.SUB, x, y)


def mul(x: Expr, y: Expr) -> Binary:
    return Binary(BinOp.MUL, x, y)


def neg(x: Expr) -> Unary:
    return Unary(UnaryOp.NEG, x)


def lt(x: Expr, y: Expr) -> Compare:
    return Compare(CmpOp.LT, x, y)


def eq(x: Expr, y: Expr) -> Compare:
    return Compare(CmpOp.EQ, x, y)


def land(x: Expr, y: Expr) -> Logical:
    return Logical(LogicOp.AND, x, y)


def lor(x: Expr, y: Expr) -> Logical:
    return Logical(LogicOp.OR, x, y)


def acc(name: str, *args: Expr) -> Access:
    return Access(name, args)


# (label, expression) pairs; the golden file shows what each prints as.
PRECEDENCE_CASES: list[tuple[str, Expr]] = [
    ("sub right-nested keeps parens", sub(a, sub(b, c))),
    ("sub left-nested drops parens", sub(sub(a, b), c)),
    ("add of sub, right", add(a, sub(b, c))),
    ("sub of add, right", sub(a, add(b, c))),
    ("mul binds tighter than add", add(a, mul(b, c))),
    ("add inside mul", mul(add(a, b), c)),
    ("div right-nested", Binary(BinOp.DIV, a, Binary(BinOp.DIV, b, c))),
    ("div left-nested", Binary(BinOp.DIV, Binary(BinOp.DIV, a, b), c)),
    ("mod of mul, right", Binary(BinOp.MOD, a, mul(b, c))),
    ("mul of mod, left", mul(Binary(BinOp.MOD, a, b), c)),
    ("neg of sum", neg(add(a, b))),
    ("neg of product", neg(mul(a, b))),
    ("product of neg", mul(neg(a), b)),
    ("neg of neg", neg(neg(a))),
    ("not of comparison", Unary(UnaryOp.NOT, lt(a, b))),
    ("not of not", Unary(UnaryOp.NOT, Unary(UnaryOp.NOT, a))),
    ("neg of access", neg(acc("A", i))),
    ("sub of neg", sub(a, neg(b))),
    ("comparison chain, left", eq(lt(a, b), c)),
    ("comparison chain, right", eq(a, lt(b, c))),
    ("comparison of sums", lt(add(a, b), sub(c, d))),
    ("and of comparisons", land(lt(a, b), lt(c, d))),
    ("or of ands", lor(land(a, b), land(c, d))),
    ("and of ors", land(lor(a, b), lor(c, d))),
    ("or right-nested", lor(a, lor(b, c))),
    ("or left-nested", lor(lor(a, b), c)),
    ("comparison of and", lt(land(a, b), c)),
    ("ternary plain", Select(lt(a, b), c, d)),
    ("ternary in condition", Select(Select(a, b, c), d, e)),
    ("ternary in then", Select(a, Select(b, c, d), e)),
    ("ternary in else", Select(a, b, Select(c, d, e))),
    ("ternary as add operand", add(Select(a, b, c), d)),
    ("ternary as right operand", add(d, Select(a, b, c))),
    ("ternary under neg", neg(Select(a, b, c))),
    ("or in ternary condition", Select(lor(a, b), c, d)),
    ("ternary in call arg", Call("fmax", (Select(a, b, c), d))),
    ("sum in access index", acc("A", add(i, k), sub(j, Const(1, I32)))),
    ("cast of sum", Cast(F32, add(a, b))),
    ("sum of casts", add(Cast(F64, a), Cast(ScalarType.INT64, b))),
    ("min of max", Call("min", (Call("max", (a, b)), c))),
    ("builtin calls", mul(Call("exp", (neg(a),)), Call("fma", (a, b, c)))),
    ("0-d access", add(acc("S"), Var("s"))),
]

CONST_CASES: list[tuple[str, Const]] = [
    ("int32", Const(42, I32)),
    ("int32 zero", Const(0, I32)),
    ("float32 integral", Const(2.0, F32)),
    ("float32 int value", Const(3, F32)),
    ("float32 fraction", Const(0.125, F32)),
    ("float32 small", Const(1e-5, F32)),
    ("float32 large", Const(1e20, F32)),
    ("float32 many digits", Const(0.1 + 0.2, F32)),
    ("negative int32", Const(-1, I32)),
    ("negative float32", Const(-0.5, F32)),
    ("float64", Const(0.5, F64)),
    ("negative float64", Const(-0.5, F64)),
    ("int64", Const(7, ScalarType.INT64)),
    ("bool", Const(1, ScalarType.BOOL)),
    ("float16", Const(1.5, ScalarType.FLOAT16)),
    ("float32 inf", Const(float("inf"), F32)),
    ("float32 -inf", Const(float("-inf"), F32)),
    ("float64 -inf", Const(float("-inf"), F64)),
    ("float32 nan", Const(float("nan"), F32)),
]


def _table(cases: list[tuple[str, Expr]] | list[tuple[str, Const]]) -> str:
    width = max(len(label) for label, _ in cases)
    return "".join(f"{label:<{width}}  {print_expr(expr)}\n" for label, expr in cases)


def test_precedence_golden(golden) -> None:
    golden.check("frontend/printer/precedence.txt", _table(PRECEDENCE_CASES))


def test_constants_golden(golden) -> None:
    golden.check("frontend/printer/constants.txt", _table(CONST_CASES))


def _conv_def() -> Def:
    n, m, h, w, kh, kw = (Var(x) for x in ("n", "m", "h", "w", "kh", "kw"))
    body = Stmt(
        acc("O", n, m, h, w),
        AssignOp.PLUS_INIT,
        mul(acc("I", n, Var("c"), add(h, kh), add(w, kw)), acc("W1", m, Var("c"), kh, kw)),
        where=(RangeConstraint(kh, Const(0, I32), Var("KH")),),
    )
    return Def(
        "conv",
        (
            Param("I", F32, (N, Var("C"), Var("H"), Var("W"))),
            Param("W1", F32, (Var("M"), Var("C"), Var("KH"), Var("KW"))),
        ),
        (Param("O", None, None),),
        (body,),
    )


def _every_construct_def() -> Def:
    params = (
        Param("A", F32, (N, Const(3, I32))),
        Param("B", F64, (N,)),
        Param("k", I32, ()),
        Param("h", ScalarType.FLOAT16, (M,)),
    )
    outputs = (Param("O", None, None), Param("O1", I32, (M, N)), Param("s", F32, ()))
    stmts = tuple(
        Stmt(acc("O", i), op, mul(acc("A", i, Const(0, I32)), Cast(F32, Var("k"))))
        for op in AssignOp
    ) + (
        Stmt(
            acc("O1", add(i, k), j),
            AssignOp.ASSIGN,
            Select(lt(i, j), Const(1, I32), Const(0, I32)),
            where=(
                RangeConstraint(add(i, k), Const(0, I32), M),
                RangeConstraint(j, Const(0, I32), Call("min", (N, Var("k")))),
                Let("x", acc("B", j)),
                Exists(acc("B", i)),
            ),
            equivalent=acc("matmul", i, j),
        ),
        Stmt(acc("s"), AssignOp.PLUS_INIT, add(acc("A", i, j), acc("s"))),
        Stmt(acc("O", i), AssignOp.MAX, acc("A", i, j), equivalent=acc("reduce_max", i)),
    )
    return Def("every_construct", params, outputs, stmts)


def test_module_golden(golden) -> None:
    module = Module((_conv_def(), _every_construct_def(), Def("empty", (), (), ())))
    golden.check("frontend/printer/module.tc", print_module(module))


def test_layout() -> None:
    text = print_def(_conv_def())
    lines = text.split("\n")
    assert lines[0] == "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {"
    assert lines[1].startswith("    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(")
    assert lines[-1] == "}"
    assert print_module(Module((_conv_def(), _conv_def()))) == f"{text}\n\n{text}\n"
    assert print_module(Module(())) == ""


def test_statement_parts_in_tc_order() -> None:
    stmt = Stmt(
        acc("O", i),
        AssignOp.PLUS,
        acc("A", i, j),
        where=(RangeConstraint(j, Const(0, I32), N), Let("x", a), Exists(acc("B", j))),
        equivalent=acc("E", i),
    )
    assert print_stmt(stmt) == "O(i) += A(i, j) <=> E(i) where j in 0:N, x = a, exists B(j)"
    keyword_named = Stmt(acc("O", i), AssignOp.MAX_INIT, acc("A", i, j), equivalent=acc("max", i))
    assert print_stmt(keyword_named) == "O(i) max=! A(i, j) <=> max(i)"
    # A 0-d left-hand side has no parentheses; a 0-d read has them.
    assert print_stmt(Stmt(acc("s"), AssignOp.ASSIGN, acc("t"))) == "s = t()"


def test_where_clauses() -> None:
    assert print_where(RangeConstraint(sub(Var("h"), Var("kh")), Const(0, I32), Var("HO"))) == (
        "h - kh in 0:HO"
    )
    # A ternary bound is parenthesised, so the range's `:` reads unambiguously.
    ternary = RangeConstraint(i, Select(a, b, c), Select(a, b, c))
    assert print_where(ternary) == "i in (a ? b : c):(a ? b : c)"
    assert print_where(Let("x", add(a, b))) == "x = a + b"
    assert print_where(Exists(acc("B", i))) == "exists B(i)"


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (sub(a, sub(b, c)), "a - (b - c)"),
        (sub(sub(a, b), c), "a - b - c"),
        (neg(add(a, b)), "-(a + b)"),
        (Select(Select(a, b, c), d, e), "(a ? b : c) ? d : e"),
        (eq(lt(a, b), c), "a < b == c"),
        (eq(a, lt(b, c)), "a == (b < c)"),
        (neg(neg(a)), "- -a"),
    ],
)
def test_brief_cases(expr: Expr, text: str) -> None:
    assert print_expr(expr) == text
    assert parse_expr(text) == expr


def test_negative_and_typed_constants_reparse_to_equivalents() -> None:
    one, half = Const(1, I32), Const(0.5, F32)
    assert parse_expr(print_expr(Const(-1, I32))) == neg(one)
    assert parse_expr(print_expr(sub(a, Const(-1, I32)))) == sub(a, neg(one))
    assert parse_expr(print_expr(Const(-0.5, F32))) == neg(half)
    assert parse_expr(print_expr(Const(0.5, F64))) == Cast(F64, half)
    assert parse_expr(print_expr(Const(7, ScalarType.INT64))) == Cast(
        ScalarType.INT64, Const(7, I32)
    )
    inf = parse_expr(print_expr(Const(float("-inf"), F32)))
    assert inf == Binary(BinOp.DIV, neg(Const(1.0, F32)), Const(0.0, F32))


@pytest.mark.parametrize(
    "expr",
    [
        Var("where"),
        Var("float"),
        Var("min"),
        Var("1x"),
        Access("exp", (a,)),
        Call("foo", (a,)),
        Const(2.5, I32),
    ],
)
def test_unprintable_trees_raise(expr: Expr) -> None:
    with pytest.raises(InternalError):
        print_expr(expr)


def test_unprintable_params_raise() -> None:
    with pytest.raises(InternalError):
        print_def(Def("f", (Param("A", None, None),), (), ()))
    with pytest.raises(InternalError):
        print_def(Def("f", (), (Param("O", None, (N,)),), ()))
    with pytest.raises(InternalError):
        print_def(Def("f", (Param("A", F32, (Const(-1, I32),)),), (), ()))


def _grouping_paren_pairs(text: str) -> list[tuple[int, int]]:
    """(open, close) offsets of parentheses that group, not those of a call or cast."""
    pairs, stack = [], []
    for pos, ch in enumerate(text):
        if ch == "(":
            before = text[:pos].rstrip()
            is_call = bool(before) and (before[-1].isalnum() or before[-1] == "_")
            stack.append((pos, is_call))
        elif ch == ")":
            start, is_call = stack.pop()
            if not is_call:
                pairs.append((start, pos))
    return pairs


@given(exprs())
def test_parentheses_are_minimal(expr: Expr) -> None:
    text = print_expr(expr)
    for start, end in _grouping_paren_pairs(text):
        stripped = text[:start] + " " + text[start + 1 : end] + " " + text[end + 1 :]
        try:
            reparsed = parse_expr(stripped)
        except ParseError:
            continue
        assert reparsed != expr, f"parentheses at {start} in {text!r} are redundant"


def test_grouping_paren_finder() -> None:
    text = "f(a) * (b + g((c)))"
    assert [text[s : e + 1] for s, e in _grouping_paren_pairs(text)] == ["(c)", "(b + g((c)))"]
