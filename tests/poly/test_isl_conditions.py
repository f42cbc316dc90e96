"""isl writes a condition that always holds as the integer 1 (`if (j >= 2 * x || 1)`,
in the gather of a floor-divided read's gradient); the loop IR gets a bool there (the
verifier refused `||` of bool and int64). Oracle: the cotangent scattered by hand."""

from __future__ import annotations

import itertools

import islpy as isl
import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler.poly.ast_tree import ast_expr

# found by tests/properties/test_floordiv_gradients.py
SRC = """def f(double(N) B, double(4, 5) A) -> (O) {
    O(i) +=! A((2 * j + 2 * k) / 3, (i - j - 2 * k + 8) / 2) where i in 0:2, j in 0:3, k in 0:4
}"""


def _scattered(cot: np.ndarray) -> np.ndarray:
    out = np.zeros((4, 5))
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        out[(2 * j + 2 * k) // 3, (i - j - 2 * k + 8) // 2] += cot[i]
    return out


def test_an_integer_operand_of_or_is_a_bool() -> None:
    ctx = isl.DEFAULT_CONTEXT
    j = isl.AstExpr.from_id(isl.Id("j"))
    one = isl.AstExpr.from_val(isl.Val.int_from_si(ctx, 1))
    got = ast_expr(j.ge(one).or_(one))
    assert got.dtype is L.DType.BOOL
    assert isinstance(got, L.Bin) and got.b == L.Const(True, L.DType.BOOL)


@pytest.mark.parametrize("target", ("interp", "llvm", "cuda-emulated"))
@pytest.mark.parametrize("gather", ("auto", "full"))
def test_gradient(target: str, gather: str) -> None:
    options = compiler.Options(gather=gather) if target == "llvm" else None
    k = compiler.define(SRC, target=target, options=options)
    rng = np.random.default_rng(0)
    b, a = rng.standard_normal(3), rng.standard_normal((4, 5))
    cot = rng.standard_normal(2)
    _, a_grad = k.vjp(b, a, grad_outputs=(cot,))
    np.testing.assert_allclose(a_grad, _scattered(cot), rtol=1e-12, atol=1e-12)
