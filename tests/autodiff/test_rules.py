"""The derivative rule tables (compiler.autodiff.rules): every arithmetic operator
has its rule there, and each agrees with finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.autodiff.rules import ARITHMETIC, CAST, PARTIALS, vjp
from compiler.frontend.ast import Access, BinOp, UnaryOp, Var
from compiler.frontend.builtins import ARITY
from tests.autodiff.kit import check

RNG = np.random.default_rng(11)


def test_every_float_operator_has_a_rule() -> None:
    assert set(BinOp) | {UnaryOp.NEG, CAST} <= set(ARITHMETIC)
    assert set(PARTIALS) <= set(ARITY)


def test_zero_adjoint_parts_are_symbolic() -> None:
    a, b = Access("A", (Var("i"),)), Access("B", (Var("i"),))
    g = Access("O_grad", (Var("i"),))
    assert vjp(BinOp.ADD, (a, b), g) == (g, g)
    assert vjp("floor", (a,), g) == (None,)  # piecewise constant: a symbolic zero
    assert vjp("no_such_builtin", (a,), g) is None


@pytest.mark.parametrize(
    "expr",
    ["A(i) + B(i)", "A(i) - B(i)", "A(i) * B(i)", "A(i) / B(i)", "A(i) % B(i)", "-A(i) * B(i)",
     "double(float(A(i))) * B(i)"],
)  # fmt: skip
def test_arithmetic_rule_matches_finite_differences(expr: str) -> None:
    src = f"def f(double(N) A, double(N) B) -> (O) {{ O(i) = {expr} }}"
    a = RNG.uniform(2.1, 2.9, 6)
    b = RNG.uniform(1.1, 1.9, 6)
    check(src, a, b, atol=1e-4)
