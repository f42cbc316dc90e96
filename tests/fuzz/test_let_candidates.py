"""A `where` let used as a `max=` candidate or as a float comparison's operand rounds
as the inline call does (docs/internals/numerics.md: such operands call the scalar libm
functions, so a value computed twice has the same bits). The llvm emitter binds such a
let under `scalar_math` (compiler/cpu/llvm_exact.py); before, it computed the let with
libmvec's vector variant, which differs in the last bit: winners were lost and a
recomputed value compared unequal. Found while triaging fuzz seed 2082 (whose gradient
shares a repeated hypot as a let)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import compiler

RNG = np.random.default_rng(2)


def _kernel(src: str, target: str) -> object:
    warnings.simplefilter("ignore")
    if target == "interp":
        return compiler.define(src, "f", target="interp", cache=None)
    return compiler.define(src, "f", options=compiler.Options(threads=1), cache=None)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_let_equals_the_same_call_inline(target: str) -> None:
    src = """def f(double(N) A, double(N) B) -> (O, R) {
        O(i) max=! hypot(A(i), B(i)) where k in 0:1
        R(i) = t == O(i) ? 1.0 : 0.0 where t = hypot(A(i), B(i))
    }"""
    a, b = RNG.standard_normal(64), RNG.standard_normal(64)
    _, r = _kernel(src, target)(a, b)
    np.testing.assert_array_equal(np.asarray(r), np.ones(64))  # the same value, bit for bit


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_the_gradient_of_a_let_candidate_finds_the_winners(target: str) -> None:
    src = "def f(double(N, K) A) -> (O) { O(i) max=! t where t = tanh(A(i, k)) }"
    a, c = RNG.standard_normal((64, 5)), RNG.standard_normal(64)
    (g,) = _kernel(src, target).vjp(a, grad_outputs=[c])
    want = np.zeros_like(a)
    best = np.tanh(a).argmax(axis=1)  # random data: no ties
    rows = np.arange(64)
    want[rows, best] = c * (1 - np.tanh(a[rows, best]) ** 2)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12, atol=1e-15)
