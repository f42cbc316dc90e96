"""[ext] The def's where clause (`-> (O) where G >= 4 * H {`): how it parses, prints
and checks. What it means (range inference's context, the check at every call) is
tested in tests/poly/test_ranges_stated.py and tests/test_def_where.py."""

from __future__ import annotations

import pytest

from compiler.diagnostics import ParseError, SemanticError
from compiler.frontend.ast import Binary, BinOp, CmpOp, Compare, Const, ScalarType, Var
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def, print_module

GRU = (
    "def gru(float(N, G) gates, float(N, H) h) -> (float(N, H) O, P) where G >= 4 * H, N != 3 {\n"
    "    O(n, j) = r * gates(n, 3 * H + j) where j in 0:H, r = gates(n, j)\n"
    "    P(n) +=! O(n, j) where exists h(n, j)\n"
    "}"
)


def _int(value: int) -> Const:
    return Const(value, ScalarType.INT32)


def test_the_clause_parses_after_the_outputs() -> None:
    d = parse(GRU).get()
    assert d.where == (
        Compare(CmpOp.GE, Var("G"), Binary(BinOp.MUL, _int(4), Var("H"))),
        Compare(CmpOp.NE, Var("N"), _int(3)),
    )
    assert [o.name for o in d.outputs] == ["O", "P"]  # a typed output before it
    first, second = d.stmts  # the statements keep their own where clauses and lets
    assert [type(c).__name__ for c in first.where] == ["RangeConstraint", "Let"]
    assert [type(c).__name__ for c in second.where] == ["Exists"]
    assert [c.span.text for c in d.where] == ["G >= 4 * H", "N != 3"]


def test_a_def_without_the_clause_has_none() -> None:
    assert parse("def f(float(N) A) -> (B) { B(i) = A(i) }").get().where == ()


def test_printing_round_trips() -> None:
    d = parse(GRU).get()
    text = print_def(d)
    assert text.splitlines()[0] == (
        "def gru(float(N, G) gates, float(N, H) h) -> (float(N, H) O, P) where G >= 4 * H, N != 3 {"
    )
    assert parse(text).get() == d
    assert print_module(parse(text)) == text + "\n"


def test_the_checked_def_keeps_the_clause() -> None:
    checked = check_def(parse(GRU).get())
    assert checked.definition.where == parse(GRU).get().where


@pytest.mark.parametrize(
    ("clause", "message", "column"),
    [
        ("where {", "expected a condition on the sizes but found '{'", 32),
        ("where N > 1, {", "expected a condition on the sizes but found '{'", 39),
        ("where i in 0:N {", "expected '{' to open the def body but found 'in'", 34),
        ("where N = 3 {", "expected '{' to open the def body but found '='", 34),
        ("where N > 3 N < 9 {", "expected '{' to open the def body but found identifier 'N'", 38),
    ],
)
def test_parse_errors_point_at_the_clause(clause: str, message: str, column: int) -> None:
    with pytest.raises(ParseError) as info:
        parse(f"def f(float(N) g) -> (O) {clause} O(i) = g(i) }}", "t.tc")
    (diag,) = info.value.diagnostics
    assert diag.message == message
    assert (diag.span.line, diag.span.col) == (1, column)


def _errors(clause: str) -> list[tuple[str, str]]:
    src = f"def f(float(N, G) A, float(N) b) -> (O) where {clause} {{ O(n) = A(n, 0) + b(n) }}"
    with pytest.raises(SemanticError) as info:
        check_def(parse(src, "t.tc").get())
    return [(d.message, d.span.text) for d in info.value.diagnostics]


PREFIX = "the def's where clause compares integer affine expressions of the sizes, found "


@pytest.mark.parametrize(
    ("clause", "found", "at"),
    [
        ("n < N", "'n', which is not a size of this def", "n"),
        ("A(0, 0) > 1", "a read of tensor 'A'", "A(0, 0)"),
        ("b > N", "the tensor 'b'", "b"),
        ("G > 1.5", "the float32 constant 1.5", "1.5"),
        ("G * N > 4", "the product of sizes `G * N`", "G * N"),
        ("N / G > 1", "`N / G`", "N / G"),
        ("N < G < 9", "the comparison `N < G` inside a comparison", "N < G"),
        ("G > 2 && N > 1", "`G > 2 && N > 1`, which is not a comparison", "G > 2 && N > 1"),
        ("N", "`N`, which is not a comparison", "N"),
        ("exp(N) > 1", "`exp(N)`", "exp(N)"),
    ],
)
def test_only_affine_comparisons_of_sizes_check(clause: str, found: str, at: str) -> None:
    assert _errors(clause) == [(PREFIX + found, at)]


def test_every_bad_condition_is_reported() -> None:
    errors = _errors("G >= 4 * N, n < N, 1 < 2, G > 1.5")
    assert [at for _, at in errors] == ["n", "1 < 2", "1.5"]
    assert errors[1][0] == "the condition `1 < 2` of the def's where clause relates no size"


def test_quasi_affine_conditions_check() -> None:
    src = "def f(float(N, G) A) -> (O) where G % 4 == 0, (G - 1) / 4 >= -N + 2 { O(n) = A(n, 0) }"
    assert len(check_def(parse(src).get()).definition.where) == 2
