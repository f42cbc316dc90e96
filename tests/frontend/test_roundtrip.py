"""Round-trip properties of the printer and the parser:
`parse(print(ast)) == ast` for random trees, printing is idempotent on parsed text,
and every program in examples/ survives parse -> print -> parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given

from compiler.frontend.ast import Def, Expr, Module, Stmt, WhereClause
from compiler.frontend.parser import parse, parse_expr
from compiler.frontend.printer import print_expr, print_module, print_stmt
from tests.frontend.strategies import exprs, modules, stmts, where_clauses

# Not imported from tests.conftest: importing it again would reload its default
# hypothesis profile and silently undo --hypothesis-profile.
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.tc")) if EXAMPLES_DIR.is_dir() else []


def _in_module(stmt: Stmt) -> Module:
    return Module((Def("f", (), (), (stmt,)),))


@given(exprs())
def test_expr_roundtrip(expr: Expr) -> None:
    assert parse_expr(print_expr(expr)) == expr


@given(stmts())
def test_stmt_roundtrip(stmt: Stmt) -> None:
    text = f"def f() -> () {{\n    {print_stmt(stmt)}\n}}\n"
    assert parse(text) == _in_module(stmt)


@given(stmts(), where_clauses())
def test_where_roundtrip(stmt: Stmt, clause: WhereClause) -> None:
    with_clause = Stmt(stmt.lhs, stmt.op, stmt.rhs, (clause,), stmt.equivalent)
    module = _in_module(with_clause)
    assert parse(print_module(module)) == module


@given(modules())
def test_module_roundtrip(module: Module) -> None:
    text = print_module(module)
    assert parse(text) == module
    assert print_module(parse(text)) == text


@pytest.mark.skipif(not EXAMPLES, reason="no examples/*.tc yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_roundtrip(path: Path) -> None:
    module = parse(path.read_text(), str(path))
    text = print_module(module)
    assert parse(text) == module
    assert print_module(parse(text)) == text
