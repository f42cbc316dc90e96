"""A `max=`/`min=` after a sum whose clamp pieces the gradient recomputes (issue 43,
fuzz seed 23215), checked in float64 against central differences on every CPU target
and the CUDA emulation.

`P(i) +=! B(i) - C(k, max(k - 2, 0))` splits into the pieces `k >= 2` and `k < 2`; the
gradient recomputes `P` piece by piece, in another order than the forward's loop, so
the recomputed value need not equal the forward's bits. `P(i) min= c` used to give
the previous value its adjoint where `P_v2(i) == P(i)` (the forward's result): the
rounding made that false and the gradient of B was 0 at random elements. Without a
reduction the test is now `P_v2(i) <= c`, both sides computed in the gradient.

With a reduction (`P(i, j) max= D(k)`, fuzz seed 23479: B_grad 7.04 on interp and 5.48
on llvm against 9.23 from central differences) the previous value is compared with
its terms' extremum, an auxiliary `max=!` reduction in the gradient.
"""

from __future__ import annotations

import pytest

import compiler
from tests.autodiff.kit import GRAD_TARGETS, gradcheck_cases

DEFS = {
    "min= after pieces": (
        "def f(double(N) B, double(M, M) C) -> (P) {\n"
        "    P(i2) +=! B(i2) - C(k3, max(k3 - 2, 0)) where k3 in 0:M\n"
        "    P(i6) min= double(i6 + 1) where i6 in 0:N - 1\n}",
        [((7,), (5, 5)), ((1,), (3, 3)), ((4,), (6, 6))],
    ),
    "max= with a let after pieces": (
        "def f(double(N) B, double(M, M) C) -> (P) {\n"
        "    P(i) +=! B(i) * C(min(k + 1, M - 1), k) where k in 0:M\n"
        "    P(i) max= t * t - 1.0 where t = B(i)\n}",
        [((5,), (4, 4)), ((3,), (1, 1))],
    ),
    "max= reduction after pieces": (
        "def f(double(M, M) B, double(N) D) -> (P) {\n"
        "    P(i, j) +=! D(min(j, N - 1)) + (B(min(k, M - 1), min(k, M - 1)) >= D(min(j, N - 1))"
        " ? 1.0 : B(M - 1, 0)) where i in 0:M, j in 0:M, k in 0:2 * N - 2\n"
        "    P(i, j) max= D(k) where i in 0:M, j in 0:M, k in 0:N\n}",
        [((5, 5), (17,)), ((3, 3), (2,))],
    ),
}


@pytest.mark.parametrize("target", sorted(GRAD_TARGETS))
@pytest.mark.parametrize("case", sorted(DEFS))
def test_gradient_matches_finite_differences(case: str, target: str) -> None:
    source, cases = DEFS[case]
    gradcheck_cases(source, cases, target, (0, 1, 2))


def test_the_printed_gradient_compares_with_the_right_hand_side() -> None:
    text = compiler.grad(DEFS["min= after pieces"][0])
    assert "P_v2(i6) <= double(i6 + 1)" in text and "P_v2(i6) == P(i6)" not in text


def test_a_reduction_compares_with_its_terms_extremum() -> None:
    text = compiler.grad(DEFS["max= reduction after pieces"][0])
    assert "max=! D(k)" in text and "P_v4(i, j) == P(i, j)" not in text
