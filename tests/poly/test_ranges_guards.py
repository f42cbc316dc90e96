"""Range inference treats lazily evaluated reads as guarded: the branches of `?:`, and
[tcc] the right operand of `&&` (evaluated only where the left one is true) and of
`||` (only where it is false), as `compiler.interp` and the native code evaluate them.

Oracles: the ternary spelling of the same condition (ranges must be equal), and
`compiler.interp` for the native results.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import compiler
from compiler.diagnostics import RangeError
from compiler.frontend.ast import CmpOp, Compare, Expr, RangeConstraint, Var
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.parser import parse
from compiler.poly.accesses import reads_of
from compiler.poly.isl_bridge import StmtSpace, condition_of
from compiler.poly.ranges import infer_ranges

AND = "def f(float(N) A) -> (O) { O(i) = (i > 0 && A(i - 1) > 0) ? 1.0 : 0.0 where i in 0:N }"
OR = "def f(float(N) A) -> (O) { O(i) = (i == 0 || A(i - 1) > 0) ? 1.0 : 0.0 where i in 0:N }"
BOTH_ENDS = (
    "def f(float(N) A) -> (O) {\n"
    "    O(i) = (i == 0 || i == N - 1 || A(i - 1) < A(i + 1)) ? A(i) : 0.0 where i in 0:N\n"
    "}\n"
)


def _ranged(src: str) -> RangedDef:
    return infer_ranges(check_def(parse(src).get()))


def var_range(r: RangedDef, stmt: int, var: str) -> tuple[Expr, Expr]:
    """The (lo, hi) of the one `where var in lo:hi` of statement `stmt`."""
    clauses = [
        c
        for c in r.checked.definition.stmts[stmt].where
        if isinstance(c, RangeConstraint) and c.expr == Var(var)
    ]
    assert len(clauses) == 1, clauses
    return clauses[0].lo, clauses[0].hi


def assert_range(r: RangedDef, stmt: int, var: str, expected: str) -> None:
    """`expected`: the values of `var` in isl syntax (`0 <= v < N`), compared as sets."""
    params = r.checked.size_params
    space = StmtSpace(("v",), params)
    got = condition_of(Var("v"), *var_range(r, stmt, var), space) & space.context
    want = isl.Set(f"[{', '.join(params)}] -> {{ [v] : {expected} }}") & space.context
    assert got.is_equal(want), f"{var}: got {got}, want {want}"


@pytest.mark.parametrize("src", [AND, OR, BOTH_ENDS])
def test_guarded_right_operand_is_accepted(src: str) -> None:
    r = _ranged(src)
    assert_range(r, 0, "i", "0 <= v < N")
    assert r.warnings == ()


def test_the_left_operand_is_not_guarded() -> None:
    with pytest.raises(RangeError, match=r"`A\(i - 1\)` reads out of bounds for every size"):
        _ranged(
            "def f(float(N) A) -> (O) { O(i) = (A(i - 1) > 0 && i > 0) ? 1.0 : 0.0 where i in 0:N }"
        )


def test_an_unguarded_right_operand_still_fails() -> None:
    # `||`'s right operand runs where its left is false: at i == 0, `i > 0 && ...` is
    # false, so A(-1) would be read
    src = (
        "def f(float(N) A) -> (O) {\n"
        "    O(i) = (i > 0 && A(i - 1) > 0 || A(i - 1) < 0) ? 1.0 : 0.0 where i in 0:N\n"
        "}\n"
    )
    with pytest.raises(RangeError, match="out of bounds for every size"):
        _ranged(src)


@pytest.mark.parametrize(
    ("logical", "ternary"),
    [
        ("(i >= 2 && A(i - 2) > 0) ? 1.0 : 0.0", "(i >= 2 ? A(i - 2) : 0.0) > 0 ? 1.0 : 0.0"),
        ("A(i) + ((i > 0 && A(i - 1) > 0) ? 1.0 : 0.0)", "A(i) + (i > 0 ? A(i - 1) : 0.0)"),
        ("(i < 1 || A(i - 1) > 0) ? A(i) : 0.0", "(i < 1 ? 1.0 : A(i - 1)) > 0 ? A(i) : 0.0"),
    ],
)
def test_inferred_range_is_the_ternarys(logical: str, ternary: str) -> None:
    def inferred(rhs: str) -> tuple[Expr, Expr]:
        return var_range(_ranged(f"def f(float(N) A) -> (O) {{ O(i) = {rhs} }}"), 0, "i")

    assert inferred(logical) == inferred(ternary)


def test_reads_of_records_the_guards() -> None:
    stmt = (
        parse("def f(float(N) A) -> (O) { O(i) = (i > 0 && A(i - 1) > 0 || A(i) < 0) ? 1.0 : 0.0 }")
        .get()
        .stmts[0]
    )
    first, second = reads_of(stmt)
    assert len(first.guards) == 1
    cond, value = first.guards[0]
    assert isinstance(cond, Compare) and cond.op is CmpOp.GT and value is True
    assert len(second.guards) == 1
    cond, value = second.guards[0]
    assert value is False  # A(i) runs where `i > 0 && A(i - 1) > 0` is false


# ------------------------------------------------------------------ native == interp


@pytest.mark.parametrize("src", [AND, OR, BOTH_ENDS])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_llvm_equals_interp(src: str, n: int) -> None:
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    (got,) = compiler.define(src, target="llvm")(a)
    (want,) = compiler.define(src, target="interp")(a)
    np.testing.assert_array_equal(got, want)
