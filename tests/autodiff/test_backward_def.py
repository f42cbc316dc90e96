"""A hand-written backward= def must return the gradient of every float input (Kernel.vjp)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler

SRC = """
def f(double(N) A, double(N) B) -> (O) { O(i) = A(i) * B(i) * B(i) }
def f_a(double(N) A, double(N) B, double(N) O_grad) -> (A_grad) {
    A_grad(i) = O_grad(i) * B(i) * B(i)
}
def f_ab(double(N) A, double(N) B, double(N) O, double(N) O_grad) -> (A_grad, B_grad) {
    A_grad(i) = O_grad(i) * B(i) * B(i)
    B_grad(i) = 2.0 * O_grad(i) * O(i) / B(i)
}
"""


def test_vjp_refuses_a_backward_def_missing_a_gradient() -> None:
    k = compiler.define(SRC, "f", target="interp", backward="f_a")
    with pytest.raises(compiler.TCError, match=r"no gradient for input\(s\) 'B' of 'f'") as err:
        k.vjp(np.ones(3), np.ones(3), grad_outputs=(np.ones(3),))
    assert "-> (A_grad, B_grad)" in err.value.render()


def test_vjp_with_a_backward_def_that_reads_the_outputs() -> None:
    k = compiler.define(SRC, "f", target="interp", backward="f_ab")
    a = np.array([1.0, -2.0, 0.5])
    b = np.array([3.0, 0.25, -1.5])
    g = np.array([0.5, 2.0, -1.0])
    ga, gb = k.vjp(a, b, grad_outputs=(g,))
    np.testing.assert_allclose(ga, g * b * b)
    np.testing.assert_allclose(gb, 2 * g * a * b)
