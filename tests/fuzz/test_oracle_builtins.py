"""The fuzzer's oracle on the builtins it draws beyond the elementwise basics (logb,
remainder, nextafter, rhypot, norm4d, rnorm4d, tgamma, erfcinv, normcdfinv) and on
float literals, against NumPy/SciPy written here by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from tools.fuzz_gen import generate
from tools.fuzz_ir import Bin, Call, Num, Program, Read, Size, Stmt, Tensor, Var, evaluate
from tools.fuzz_math import BUILTINS, FORWARD_ONLY

V, S = Var, Size
RNG = np.random.default_rng(7)


def _elementwise(dtype: str, rhs: object, arity: int, n: int) -> Program:
    inputs = tuple(Tensor("ABCD"[k], dtype, (S("N"),)) for k in range(arity))
    stmt = Stmt("O", (V("i"),), "=", rhs, (("i", Num(0), S("N"), True),))
    return Program("f", dtype, (("N", n),), inputs, ("O",), (stmt,))


def _run(dtype: str, fn: str, *arrays: np.ndarray) -> np.ndarray:
    rhs = Call(fn, tuple(Read("ABCD"[k], (V("i"),)) for k in range(len(arrays))))
    p = _elementwise(dtype, rhs, len(arrays), len(arrays[0]))
    return evaluate(p, dict(p.sizes), {"ABCD"[k]: a for k, a in enumerate(arrays)}).values["O"]


def test_logb_remainder_and_the_norms() -> None:
    x = np.array([0.5, 0.75, 1.0, 3.0, 5.5, 1024.0])
    np.testing.assert_array_equal(_run("double", "logb", x), np.frexp(x)[1] - 1.0)
    a, b = np.array([5.0, -5.0, 7.5, 2.5, -0.75]), np.array([2.0, 2.0, 2.0, 1.0, 0.5])
    np.testing.assert_array_equal(_run("double", "remainder", a, b), a - b * np.round(a / b))
    c, d = RNG.standard_normal(5) ** 2 + 0.5, RNG.standard_normal(5)
    np.testing.assert_allclose(_run("double", "rhypot", c, d), 1 / np.hypot(c, d), rtol=1e-15)
    w = [RNG.standard_normal(5) for _ in range(4)]
    norm = np.sqrt(sum(v * v for v in w))
    np.testing.assert_allclose(_run("double", "norm4d", *w), norm, rtol=1e-15)
    np.testing.assert_allclose(_run("double", "rnorm4d", *w), 1 / norm, rtol=1e-15)
    np.testing.assert_allclose(_run("double", "tgamma", c), special.gamma(c), rtol=1e-13)


def test_round_is_cs_half_away_from_zero_next_to_the_half() -> None:
    # seed 150086: floor(|x| + 0.5) rounds 0.49999999999999994 + 0.5 up to 1.0
    below = math.nextafter(0.5, 0.0)
    x = np.array([below, -below, 0.5, -0.5, 1.5, -2.5, math.nextafter(1.5, 0.0), 2.0**52 + 1])
    want = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -3.0, 1.0, 2.0**52 + 1])
    got = _run("double", "round", x)
    np.testing.assert_array_equal(got, want)
    assert list(np.signbit(got)) == list(np.signbit(want))


def test_inverse_error_functions() -> None:
    y = np.array([0.25, 0.5, 1.0, 1.5, 1.75])
    np.testing.assert_allclose(_run("double", "erfcinv", y), special.erfcinv(y), rtol=1e-14)
    p = np.array([0.0625, 0.25, 0.5, 0.9375])
    want = -math.sqrt(2) * special.erfcinv(2 * p)  # Phi^-1(p), written via erfcinv
    np.testing.assert_allclose(_run("double", "normcdfinv", p), want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype, np_type", [("float", np.float32), ("double", np.float64)])
def test_nextafter_steps_in_the_value_type(dtype: str, np_type: type) -> None:
    x, y = np.array([1.0, 1.0, -0.5, 0.0]), np.array([2.0, 0.0, -1.0, -1.0])
    want = np.nextafter(x.astype(np_type), y.astype(np_type)).astype(np.float64)
    np.testing.assert_array_equal(_run(dtype, "nextafter", x, y), want)


def test_a_float_literal_is_float32_in_a_double_def() -> None:
    a = RNG.standard_normal(4)
    p = _elementwise("double", Bin("*", Read("A", (V("i"),)), Num(0.1)), 1, 4)
    got = evaluate(p, {"N": 4}, {"A": a}).values["O"]
    np.testing.assert_array_equal(got, a * np.float64(np.float32(0.1)))


def test_the_generator_draws_the_new_builtins_in_forward_programs_only() -> None:
    forward = " ".join(str(generate(s, exact=s % 2 == 0)) for s in range(300))
    assert sum(f"fn='{fn}'" in forward for fn in FORWARD_ONLY) >= 5
    grad = " ".join(str(generate(s, exact=False, grad=True)) for s in range(60))
    assert not any(f"fn='{fn}'" in grad for fn in FORWARD_ONLY)
    assert all(fn in BUILTINS for fn in FORWARD_ONLY)
