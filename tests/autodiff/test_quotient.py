"""The adjoint of a divisor outside a sum (`autodiff.quotient`): `O(v) +=! N / D` with
`D` free of the reduction sends `-O_grad * O / D` to `D` over `v` alone, not a second
pass over the reduction; gradients checked in float64 against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from tests.autodiff.kit import check, reparse, uniform

ATTENTION_OUT = (
    "def att(float(B, T, T) P, float(B, T, E) V, float(B, T) l) -> (O) "
    "{ O(b, i, e) +=! P(b, i, j) * V(b, j, e) / l(b, i) }"
)


def _stmt_of(text: str, target: str) -> str:
    (line,) = [s for s in text.splitlines() if s.strip().startswith(f"{target}(")]
    return line


def test_the_divisor_gradient_reads_the_output_and_sums_over_its_variables_only() -> None:
    text = compiler.grad(ATTENTION_OUT)
    reparse(text)
    line = _stmt_of(text, "l_grad")
    assert "O(b, i, e)" in line and "P(" not in line and "V(" not in line
    assert "j in" not in line  # no sum over the forward's reduction variable
    assert "float(B, T, E) O," in text  # the forward output is a parameter


def test_attention_output_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    p = uniform(rng, (2, 3, 3), 0.1, 1.0)
    v = uniform(rng, (2, 3, 4))
    l_ = uniform(rng, (2, 3), 0.5, 2.0)
    check(ATTENTION_OUT, p, v, l_)


@pytest.mark.parametrize(
    "src",
    [
        # the divisor uses the reduction variable: the literal adjoint
        "def f(float(N, K) A, float(N, K) D) -> (O) { O(n) +=! A(n, k) / D(n, k) }",
        # a `+=` into earlier values: the sum is not the output
        "def f(float(N, K) A, float(N) D) -> (O) { O(n) = A(n, 0)\n O(n) += A(n, k) / D(n) }",
    ],
)
def test_other_quotients_keep_the_literal_adjoint(src: str) -> None:
    text = compiler.grad(src)
    assert "D_grad" in text and "O(n)" not in _stmt_of(text, "D_grad")
    rng = np.random.default_rng(1)
    check(src, uniform(rng, (3, 5)), uniform(rng, (3, 5) if "D(n, k)" in src else (3,), 0.5, 2))


def test_a_divisor_output_overwritten_later_reads_its_version() -> None:
    src = (
        "def f(float(N, K) A, float(N) D) -> (O, R) {\n"
        "  O(n) +=! A(n, k) / D(n)\n"
        "  R(n) = O(n) * O(n)\n"
        "  O(n) = O(n) + 1\n}"
    )
    text = compiler.grad(src)
    reparse(text)
    assert "O_v1(n)" in _stmt_of(text, "D_grad")
    rng = np.random.default_rng(2)
    check(src, uniform(rng, (3, 4)), uniform(rng, (3,), 0.5, 2.0))
