"""Gradients of defs that update part of an output, then read it (issue 43), and of
reductions that read their own output, in float64 central differences.

A read of an output sees its extent so far (the hull of every earlier write); a `+=`
that reads its own output reads the value before the statement (forward and backward
alike); an `op!` statement that reads its own output is rejected (tests/frontend).
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import SemanticError
from tests.poly.test_ranges_overwrite import UPDATE

RNG = np.random.default_rng(43)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_partial_updates_gradient(target: str) -> None:
    compiler.gradcheck(compiler.define(UPDATE, target=target, cache=False), RNG.normal(size=5))


def test_partial_updates_gradient_by_hand() -> None:
    a = RNG.normal(size=4)
    k = compiler.define(UPDATE, target="interp", cache=False)
    zero = np.zeros(4)
    (got,) = k.vjp(a, grad_outputs=(zero, zero, np.array(1.0)))
    # L = sum(B^2 + U): dB(x)/dI(x) = 1, dB(x)/dI(x + 1) = 1 (x < N - 1), B(N-1) = 2 I(N-1);
    # U(x) = I(x)^2 + I(x + 1) (x < N - 1), U(N - 1) = I(N - 1)^2 + I(N - 1)
    b = a.copy()
    b[:-1] += a[1:]
    b[-1] += a[-1]
    want = 2 * a.copy()
    want[-1] += 1
    want[1:] += 1
    want[:-1] += 2 * b[:-1]
    want[1:] += 2 * b[:-1]
    want[-1] += 2 * b[-1] * 2
    np.testing.assert_allclose(got, want)


SELF_READ = (
    "def f(double(N) B) -> (O1) {\n"
    "    O1 +=! max(float64(i), 3.0) where i in 0:3\n"
    "    O1 OP (O1 * (B(i) * O1)) where i in 0:N\n"
    "}\n"
)


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_an_accumulation_reads_the_value_before_it(target: str) -> None:
    b = RNG.normal(size=4)
    k = compiler.define(SELF_READ.replace("OP", "+="), target=target, cache=False)
    (got,) = k(b)
    assert float(got) == pytest.approx(9 + 81 * b.sum())  # O1 was 3 + 3 + 3
    (grad,) = k.vjp(b, grad_outputs=(np.array(1.0),))
    np.testing.assert_allclose(grad, np.full(4, 81.0))
    compiler.gradcheck(k, b)


def test_a_reset_reading_its_own_output_is_rejected() -> None:
    with pytest.raises(SemanticError, match="the `!` first resets all of 'O1'"):
        compiler.define(SELF_READ.replace("OP", "+=!"), target="interp")
