"""Parser tests: golden AST dumps of every construct, precedence and associativity
asserted structurally, spans, and one golden rendered diagnostic per parse error."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.diagnostics import ParseError
from compiler.frontend import ast
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
    Logical,
    LogicOp,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.astdump import dump
from compiler.frontend.parser import MAX_DEPTH, parse, parse_expr

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

a, b, c, d, e = (Var(n) for n in "abcde")


def i32(value: int) -> Const:
    return Const(value, ScalarType.INT32)


def f32(value: float) -> Const:
    return Const(value, ScalarType.FLOAT32)


# ------------------------------------------------------------------ golden ASTs

GOLDEN_PROGRAMS = {
    "params_and_outputs": """\
def sig(float(N, 256) A, int32 k, double(2) D, uint8(N, M) U)
    -> (O, int32(M, N) O1, float S) {
    O(i) = A(i, 0)
}
""",
    "all_assign_ops": """\
def ops(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) += A(i)
    O(i) *= A(i)
    O(i) min= A(i)
    O(i) max= A(i)
    O(i) +=! A(i + j)
    O(i) *=! A(i + j)
    O(i) min=! A(i + j)
    O(i) max=! A(i + j)
}
""",
    "where_clauses": """\
def w(float(N) A, int32 k) -> (O) {
    O(i) +=! A(i + j) * s where i in 0:N - 1, j in 0:k, s = A(i) * 2, exists A(i)
}
""",
    "dialect_lhs_and_ranges": """\
def f_grad(float(N, C, H) I, float(M, C, KH) W, float(N, M, HO) O_grad) -> (I_grad) {
    I_grad(n, c, h + kh) +=! O_grad(n, m, h) * W(m, c, kh)
        where h - kh in 0:HO, kh in 0:min(KH, h + 1)
    I_grad(n, c, 2 * h) = 0
}
""",
    "equivalent": """\
def mm(float(M, K) A, float(K, N) B) -> (C) {
    C(i, j) +=! A(i, k) * B(k, j) <=> matmul(A(i, k), B(k, j)) where k in 0:K
    C(i, j) += 0 <=> exp(A(i, 0))
}
""",
    "expressions": """\
def e(float(N) A, int32(N) Idx, float x) -> (O, P, Q) {
    O(i) = i == 0 ? A(i) : -A(i - 1) * 2.5 % 3 / x
    P(i) = float(!(A(i) < .5) || A(i) >= 1e-3 && Idx(i) != 4) + int32(x)
    Q(i) = fmax(exp(A(i)), 0.0) + min(A(i), x) + max(1, Idx(Idx(i))) + tanh(x)
    O = x
    P() = 1.
}
""",
    "multiple_defs": """\
# two defs in one file
def first(float(N) A) -> (B) { B(i) = A(i) }
def second(float(N) B) -> (C) {
    C(i) = B(i)   # trailing comment
}
def empty() -> () {}
""",
}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_golden_ast(name: str, golden) -> None:
    module = parse(GOLDEN_PROGRAMS[name], f"{name}.tc")
    golden.check(f"frontend/ast/{name}.txt", dump(module))


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.tc")), ids=lambda p: p.stem)
def test_examples_parse(path, golden) -> None:
    module = parse(path.read_text(), path.name)
    assert module.defs, f"{path.name} has no def"
    golden.check(f"frontend/ast/example_{path.stem}.txt", dump(module))


# ------------------------------------------------------- structure of statements


def test_statement_structure() -> None:
    module = parse("def f(float(N) A) -> (O) { O(i) +=! A(i) <=> sum(A(i)) where i in 0:N }")
    (definition,) = module.defs
    assert definition.name == "f"
    assert definition.params == (ast.Param("A", ScalarType.FLOAT32, (Var("N"),)),)
    assert definition.outputs == (ast.Param("O", None, None),)
    (stmt,) = definition.stmts
    assert stmt.lhs == Access("O", (Var("i"),))
    assert stmt.op is AssignOp.PLUS_INIT
    assert stmt.rhs == Access("A", (Var("i"),))
    assert stmt.equivalent == Access("sum", (Access("A", (Var("i"),)),))
    assert stmt.where == (ast.RangeConstraint(Var("i"), i32(0), Var("N")),)


def test_zero_d_lhs_and_scalar_params() -> None:
    module = parse("def f(int32 k, float(2, N) A) -> (float O) { O = k O() = 1 }")
    params = module.defs[0].params
    assert params[0] == ast.Param("k", ScalarType.INT32, ())
    assert params[1] == ast.Param("A", ScalarType.FLOAT32, (i32(2), Var("N")))
    assert module.defs[0].outputs == (ast.Param("O", ScalarType.FLOAT32, ()),)
    lhs = [s.lhs for s in module.defs[0].stmts]
    assert lhs == [Access("O", ()), Access("O", ())]


def test_type_aliases() -> None:
    module = parse("def f(float a, double b, half c, float64 d) -> (O) { O = a }")
    assert [p.dtype for p in module.defs[0].params] == [
        ScalarType.FLOAT32,
        ScalarType.FLOAT64,
        ScalarType.FLOAT16,
        ScalarType.FLOAT64,
    ]


def test_where_clause_kinds() -> None:
    module = parse(
        "def f(float(N) A) -> (O) { O(i) = x where x = A(i), exists A(i + 1), i - 1 in 0:N }"
    )
    assert module.defs[0].stmts[0].where == (
        ast.Let("x", Access("A", (Var("i"),))),
        ast.Exists(Access("A", (Binary(BinOp.ADD, Var("i"), i32(1)),))),
        ast.RangeConstraint(Binary(BinOp.SUB, Var("i"), i32(1)), i32(0), Var("N")),
    )


def test_dialect_lhs_expressions() -> None:
    module = parse("def f(int32(N) A) -> (O) { O(h + kh, 0, A(i)) += 1 where h in 0:N, kh in 0:2 }")
    assert module.defs[0].stmts[0].lhs == Access(
        "O", (Binary(BinOp.ADD, Var("h"), Var("kh")), i32(0), Access("A", (Var("i"),)))
    )


def test_builtins_become_calls_and_other_names_accesses() -> None:
    assert parse_expr("exp(x)") == Call("exp", (Var("x"),))
    assert parse_expr("fmax(x, 1)") == Call("fmax", (Var("x"), i32(1)))
    assert parse_expr("min(a, b)") == Call("min", (a, b))
    assert parse_expr("max(a, b)") == Call("max", (a, b))
    assert parse_expr("expo(x)") == Access("expo", (Var("x"),))
    assert parse_expr("A()") == Access("A", ())
    assert parse_expr("exp") == Var("exp")
    assert parse_expr("float(x)") == Cast(ScalarType.FLOAT32, Var("x"))
    assert parse_expr("uint8(x + 1)") == Cast(ScalarType.UINT8, Binary(BinOp.ADD, Var("x"), i32(1)))


@pytest.mark.parametrize(
    ("text", "value", "dtype"),
    [
        ("1", 1, ScalarType.INT32),
        ("1.", 1.0, ScalarType.FLOAT32),
        (".5", 0.5, ScalarType.FLOAT32),
        ("1e-5", 1e-5, ScalarType.FLOAT32),
        ("3E2", 300.0, ScalarType.FLOAT32),
        ("9223372036854775807", 2**63 - 1, ScalarType.INT64),  # beyond int32: int64
        ("2147483647", 2**31 - 1, ScalarType.INT32),
        ("2147483648", 2**31, ScalarType.INT64),
    ],
)
def test_number_values(text: str, value: float, dtype: ScalarType) -> None:
    const = parse_expr(text)
    assert isinstance(const, Const)
    assert const.value == value and type(const.value) is type(value)
    assert const.dtype is dtype


# ------------------------------------------------- precedence and associativity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a + b * c", Binary(BinOp.ADD, a, Binary(BinOp.MUL, b, c))),
        ("a * b + c", Binary(BinOp.ADD, Binary(BinOp.MUL, a, b), c)),
        ("a - b - c", Binary(BinOp.SUB, Binary(BinOp.SUB, a, b), c)),
        ("a / b * c % d", Binary(BinOp.MOD, Binary(BinOp.MUL, Binary(BinOp.DIV, a, b), c), d)),
        ("(a + b) * c", Binary(BinOp.MUL, Binary(BinOp.ADD, a, b), c)),
        ("-a * b", Binary(BinOp.MUL, Unary(UnaryOp.NEG, a), b)),
        ("-(a * b)", Unary(UnaryOp.NEG, Binary(BinOp.MUL, a, b))),
        ("- -a", Unary(UnaryOp.NEG, Unary(UnaryOp.NEG, a))),
        ("!a == b", Compare(CmpOp.EQ, Unary(UnaryOp.NOT, a), b)),
        ("a < b == c", Compare(CmpOp.EQ, Compare(CmpOp.LT, a, b), c)),
        ("a == b < c", Compare(CmpOp.LT, Compare(CmpOp.EQ, a, b), c)),
        ("a + b < c * d", Compare(CmpOp.LT, Binary(BinOp.ADD, a, b), Binary(BinOp.MUL, c, d))),
        (
            "a || b && c",
            Logical(LogicOp.OR, a, Logical(LogicOp.AND, b, c)),
        ),
        (
            "a && b || c",
            Logical(LogicOp.OR, Logical(LogicOp.AND, a, b), c),
        ),
        (
            "a && b && c",
            Logical(LogicOp.AND, Logical(LogicOp.AND, a, b), c),
        ),
        (
            "a < b && c >= d",
            Logical(LogicOp.AND, Compare(CmpOp.LT, a, b), Compare(CmpOp.GE, c, d)),
        ),
        ("a ? b : c ? d : e", Select(a, b, Select(c, d, e))),
        ("a ? b ? c : d : e", Select(a, Select(b, c, d), e)),
        ("a || b ? c : d", Select(Logical(LogicOp.OR, a, b), c, d)),
        ("a ? b : c || d", Select(a, b, Logical(LogicOp.OR, c, d))),
        ("a + b ? c + d : e", Select(Binary(BinOp.ADD, a, b), Binary(BinOp.ADD, c, d), e)),
        ("(a ? b : c) + d", Binary(BinOp.ADD, Select(a, b, c), d)),
        ("!a && !b", Logical(LogicOp.AND, Unary(UnaryOp.NOT, a), Unary(UnaryOp.NOT, b))),
        ("-1", Unary(UnaryOp.NEG, i32(1))),
        ("2 * -b", Binary(BinOp.MUL, i32(2), Unary(UnaryOp.NEG, b))),
        ("a - -.5", Binary(BinOp.SUB, a, Unary(UnaryOp.NEG, f32(0.5)))),
    ],
)
def test_precedence(text: str, expected: ast.Expr) -> None:
    assert parse_expr(text) == expected


# ------------------------------------------------------------------------ spans


def test_spans_are_exact() -> None:
    text = "def f(float(N) A) -> (O) {\n  O(i) +=! (A(i) + 1) * -A(i) where i in 0:N\n}"
    module = parse(text, "s.tc")
    definition = module.defs[0]
    stmt = definition.stmts[0]
    assert module.span.text == text
    assert definition.span.text == text
    assert definition.params[0].span.text == "float(N) A"
    assert definition.outputs[0].span.text == "O"
    assert stmt.span.text == "O(i) +=! (A(i) + 1) * -A(i) where i in 0:N"
    assert (stmt.span.line, stmt.span.col) == (2, 3)
    assert stmt.lhs.span.text == "O(i)"
    assert stmt.rhs.span.text == "(A(i) + 1) * -A(i)"
    assert isinstance(stmt.rhs, Binary)
    assert stmt.rhs.lhs.span.text == "A(i) + 1"
    assert stmt.rhs.rhs.span.text == "-A(i)"
    assert stmt.where[0].span.text == "i in 0:N"
    assert stmt.span.filename == "s.tc"


def test_spans_of_every_node_kind() -> None:
    expr = parse_expr("c ? float(x) : min(a, b) || !A(i, j) < 3.5")
    assert isinstance(expr, Select)
    assert expr.span.text == "c ? float(x) : min(a, b) || !A(i, j) < 3.5"
    assert expr.then.span.text == "float(x)"
    other = expr.otherwise
    assert isinstance(other, Logical)
    assert other.span.text == "min(a, b) || !A(i, j) < 3.5"
    assert other.lhs.span.text == "min(a, b)"
    assert isinstance(other.rhs, Compare)
    assert other.rhs.lhs.span.text == "!A(i, j)"
    assert other.rhs.rhs.span.text == "3.5"


# ------------------------------------------------------------------ parse errors

ERROR_CASES = {
    "lhs_constant": "def sum1D(float(M) A) -> (C) {\n    C(0) +=! A(r_m) where i in 0:1\n}\n",
    "dotdot_range": "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i in 0..2\n}\n",
    "missing_assign_op": "def f(float(N) A) -> (O) {\n    O(i) A(i)\n}\n",
    "double_equals_assign": "def f(float(N) A) -> (O) {\n    O(i) == A(i)\n}\n",
    "spaced_min_eq": "def f(float(N) A) -> (O) {\n    O(i) min = A(i)\n}\n",
    "untyped_input": "def f(A) -> (O) {\n    O(i) = A(i)\n}\n",
    "missing_arrow": "def f(float(N) A) (O) {\n    O(i) = A(i)\n}\n",
    "missing_close_brace": "def f(float(N) A) -> (O) {\n    O(i) = A(i)\n",
    "missing_rparen": "def f(float(N) A) -> (O) {\n    O(i) = A(i + 1\n}\n",
    "float_dim": "def f(float(2.5) A) -> (O) {\n    O(i) = A(i)\n}\n",
    "empty_rhs": "def f(float(N) A) -> (O) {\n    O(i) = where i in 0:N\n}\n",
    "bad_where_clause": "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i < N\n}\n",
    "where_without_colon": "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i in 0 N\n}\n",
    "ternary_without_colon": "def f(float(N) A) -> (O) {\n    O(i) = i > 0 ? A(i)\n}\n",
    "cast_without_paren": "def f(float(N) A) -> (O) {\n    O(i) = float A(i)\n}\n",
    "min_one_arg": "def f(float(N) A) -> (O) {\n    O(i) = min(A(i))\n}\n",
    "min_without_paren": "def f(float(N) A) -> (O) {\n    O(i) = min + A(i)\n}\n",
    "junk_after_def": "def f(float(N) A) -> (O) {\n    O(i) = A(i)\n}\nO(i) = 1\n",
    "unexpected_char": "def f(float(N) A) -> (O) {\n    O(i) = A[i]\n}\n",
    "int_too_large": "def f(float(N) A) -> (O) {\n    O(i) = A(i) * 99999999999999999999\n}\n",
    "float_too_large": "def f(float(N) A) -> (O) {\n    O(i) = A(i) * 1e999\n}\n",
    "for_loop": "def f(float(N) A) -> (O) {\n    for t in 0:T {\n        O(t) = A(t)\n    }\n}\n",
    "keyword_as_name": "def where(float(N) A) -> (O) {\n    O(i) = A(i)\n}\n",
    "equivalent_without_args": "def f(float(N) A) -> (O) {\n    O(i) = A(i) <=> copy\n}\n",
    "trailing_comma_in_where": "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i in 0:N,\n}\n",
    "statement_starts_with_paren": "def f(float(N) A) -> (O) {\n    (i) = A(i)\n}\n",
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_parse_error_diagnostic(name: str, golden) -> None:
    with pytest.raises(ParseError) as info:
        parse(ERROR_CASES[name], f"{name}.tc")
    error = info.value
    assert error.span.source is not None, "every parse error points into the source"
    golden.check(f"frontend/parse_errors/{name}.txt", error.render() + "\n")


def test_lhs_constant_points_at_the_constant() -> None:
    with pytest.raises(ParseError) as info:
        parse(ERROR_CASES["lhs_constant"])
    assert (info.value.span.line, info.value.span.col) == (2, 7)
    assert info.value.message == "expected an index variable but found number '0'"


def test_dotdot_range_hint() -> None:
    with pytest.raises(ParseError) as info:
        parse(ERROR_CASES["dotdot_range"])
    assert info.value.span.text == ".2"
    assert "lo:hi" in (info.value.diagnostics[0].hint or "")


def test_parse_expr_rejects_trailing_tokens() -> None:
    with pytest.raises(ParseError, match="expected the end of the expression but found"):
        parse_expr("a + b c")


# ------------------------------------------------------------------------ limits


def test_nesting_within_limit_parses() -> None:
    depth = MAX_DEPTH // 2
    expr = parse_expr("(" * depth + "x" + ")" * depth)
    assert expr == Var("x")


@pytest.mark.parametrize(
    "text",
    [
        "(" * 5000 + "x" + ")" * 5000,
        "-" * 5000 + "x",
        "f(" * 5000 + "x" + ")" * 5000,
        "a ? b : " * 5000 + "c",
        "x" + " + x" * 5000,
    ],
    ids=["parens", "unary", "calls", "ternary", "long_sum"],
)
def test_deep_nesting_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_expr(text)


def test_deep_nesting_in_a_program_is_a_parse_error() -> None:
    text = "def f(float(N) A) -> (O) { O(i) = " + "(" * 3000 + "A(i)" + ")" * 3000 + " }"
    with pytest.raises(ParseError, match="nested too deeply") as info:
        parse(text)
    assert info.value.span.line == 1
