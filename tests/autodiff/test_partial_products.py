"""Gradients of a product (`*=!`, `*=`) whose pieces multiply only part of the output
(issue 43, fuzz seed 21196), checked in float64 against central differences on every
CPU target and the CUDA emulation.

A clamp in a subscript (`B(i2, max(i2 - 1, 0))`) splits a statement into pieces, each
with a condition on the written elements (`0 - (i2 - 1) in 1:...`: only `i2 = 0`).
A product piece `O_v(k) *= P` leaves the other elements as they were, so their
adjoint passes to `O_v(k-1)` unchanged, as for `max=`/`min=`. It used to be written
only where the piece multiplies: every other element's gradient was lost (seed
21196: `A_grad` 0.0 everywhere). The same rule lets a user's `*=` over part of an
output through plain index variables be differentiated (it was refused).
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from tests.autodiff.kit import GRAD_TARGETS, gradcheck_cases

# name -> (source, shapes of the inputs for each size case)
DEFS = {
    # the case test_reverse once listed as unsupported
    "reducing *= over rows 0:2": (
        "def f(double(N, M) A) -> (O) {\n    O(i) = A(i, 0)\n    O(i) *= A(i, j) where i in 0:2\n}",
        [((2, 3),), ((5, 4),)],
    ),
    # seed 21196 as the tester drew it: five clamp pieces of one *=! reduction
    "seed 21196": (
        "def f(double(N) A, double(N, M) B) -> (O) {\n"
        "    O(i1, i2) *=! t0 * (A(i1 + k3) + B(0, k4)) where k3 in 0:3, k4 in 0:M,"
        " i2 in 0:N, t0 = B(i2, min(max(i2 - 1, 0), M - 1)) - B(min(k4, N - 1), min(i2, M - 1))\n"
        "}",
        [((3,), (3, 2)), ((5,), (5, 4)), ((4,), (4, 1))],
    ),
    # a *= (no reduction) whose clamp piece multiplies O(0) only
    "*= clamp piece": (
        "def f(double(N) A, double(N) B) -> (O) {\n"
        "    O(i) = B(i)\n"
        "    O(i) *= A(max(i - 1, 0))\n}",
        [((1,), (1,)), ((6,), (6,))],
    ),
    # a user's *= over part of the output
    "*= over a part": (
        "def f(double(N) A, double(N) B) -> (O) {\n"
        "    O(i) = B(i)\n"
        "    O(i) *= A(i) where i in 2:N\n}",
        [((2,), (2,)), ((7,), (7,))],
    ),
    # a reducing *= over part of the rows
    "reducing *= over a part": (
        "def f(double(N) A, double(N, M) B) -> (O) {\n"
        "    O(i) = A(i)\n"
        "    O(i) *= B(i, k) where k in 0:M, i in 1:N\n}",
        [((1,), (1, 3)), ((5,), (5, 2))],
    ),
}


@pytest.mark.parametrize("target", sorted(GRAD_TARGETS))
@pytest.mark.parametrize("case", sorted(DEFS))
def test_gradient_matches_finite_differences(case: str, target: str) -> None:
    source, cases = DEFS[case]
    gradcheck_cases(source, cases, target, (21196,))


def test_the_untouched_elements_keep_the_adjoint() -> None:
    """`O(i) *= A(i) where i in 2:N`: dO/dB is 1 at i < 2 and A(i) from i = 2."""
    k = compiler.define(DEFS["*= over a part"][0], target="interp", cache=False)
    a, b = np.array([2.0, 3.0, 5.0, 7.0]), np.array([1.0, -1.0, 0.5, 4.0])
    a_grad, b_grad = k.vjp(a, b, grad_outputs=(np.ones(4),))
    np.testing.assert_array_equal(b_grad, [1.0, 1.0, 5.0, 7.0])
    np.testing.assert_array_equal(a_grad, [0.0, 0.0, 0.5, 4.0])
