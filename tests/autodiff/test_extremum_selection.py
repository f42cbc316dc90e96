"""The gradient of `max=` / `min=` picks the winners by recomputing the candidate and
comparing it with the forward's result (`O_v1 * O_v1 + B(0, j) == O(i, j)`), so both
must round alike (issue 50). On the native target only the product a sum adds to its
accumulator may become an FMA (README, numerics): a candidate `a * b + c` is rounded
as written, in the forward and in the gradient, scalar or vectorised. Checked in
float64 against central differences and by hand, on every CPU target.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options

TARGETS = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}

ISSUE = (
    "def f(double(M, K) B) -> (O) {\n"
    "    O(b, i) = B(0, i) where b in 0:M\n"
    "    O(i, j) max= O(i, j) * O(i, j) + B(0, j) where j in 0:16\n}"
)

DEFS = {
    "max= (issue 50)": (ISSUE, [(3, 16)]),
    "min=": (
        "def f(double(M, K) B) -> (O) {\n"
        "    O(b, i) = B(1, i) where b in 0:M\n"
        "    O(i, j) min= B(i, j) * B(0, j) - B(1, j) where j in 0:K\n}",
        [(3, 37)],
    ),
    "max=!": (
        "def f(double(N, M) A, double(M) C) -> (O) {\n    O(i) max=! A(i, j) * C(j) + A(i, j)\n}",
        [(5, 23), (23,)],
    ),
    "min=!": (
        "def f(double(N, M) A, double(M) C) -> (O) {\n"
        "    O(i) min=! A(i, j) * A(i, j) * C(j) + C(j) * 0.3\n}",
        [(5, 23), (23,)],
    ),
    "previous version wins": (
        "def f(double(N) A, double(N) B, double(N) C) -> (O) {\n"
        "    O(i) = A(i) * B(i) + C(i)\n    O(i) max= C(i) * 0.5\n}",
        [(33,), (33,), (33,)],
    ),
    "fmax and max builtins": (
        "def f(double(N) A, double(N) B) -> (O) {\n"
        "    O(i) = fmax(A(i) * B(i) + A(i), B(i)) + max(B(i) * B(i) - A(i), A(i) * 0.5)\n}",
        [(33,), (33,)],
    ),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(DEFS))
def test_gradient_matches_finite_differences(case: str, target: str) -> None:
    source, shapes = DEFS[case]
    rng = np.random.default_rng(1)
    k = compiler.define(source, cache=False, **TARGETS[target])
    compiler.gradcheck(k, *[rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_issue_by_hand(target: str) -> None:
    """O(i, j) = max(B0j^2 + B0j, B0j): the square wins wherever B0j != 0."""
    b = np.random.RandomState(1).randn(3, 16)
    g = np.random.RandomState(2).randn(3, 16)
    k = compiler.define(ISSUE, cache=False, **TARGETS[target])
    (got,) = k.vjp(b, grad_outputs=(g,))
    want = np.zeros_like(b)
    want[0] = g.sum(axis=0) * (2 * b[0] + 1)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_llvm_rounds_each_operation_outside_sums(threads: int) -> None:
    """`a * b + c` as NumPy computes it, bit for bit, scalar tail and vector body."""
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(1001) for _ in range(3))
    src = "def f(double(N) A, double(N) B, double(N) C) -> (O) { O(i) = A(i) * B(i) + C(i) }"
    (got,) = compiler.define(src, target="llvm", options=Options(threads=threads))(a, b, c)
    np.testing.assert_array_equal(got, a * b + c)


# A candidate through a vector-math builtin (libmvec's variant and libm's scalar
# function may differ in the last bit; a loop mixes them in its vector body and scalar
# remainder): candidates and comparison operands use the scalar function everywhere,
# so the gradient still finds every winner (found by tools.fuzz, F3). 37 columns: a
# remainder after every vector width.
MATH_CANDIDATES = {
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "exp": (np.exp, np.exp),
    "log": (np.log, lambda x: 1 / x),
}


@pytest.mark.parametrize("fn", sorted(MATH_CANDIDATES))
@pytest.mark.parametrize("dtype", ["float", "double"])
@pytest.mark.parametrize("op", ["max=!", "min=!"])
def test_a_math_candidate_selects_every_winner(fn: str, dtype: str, op: str) -> None:
    f, df = MATH_CANDIDATES[fn]
    src = f"def f({dtype}(N, K) A) -> (O) {{ O(i) {op} {fn}(A(i, k)) }}"
    np_dtype = np.float32 if dtype == "float" else np.float64
    rng = np.random.default_rng(7)
    a = rng.uniform(0.5, 2.0, (37, 37)) if fn == "log" else rng.standard_normal((37, 37))
    a = a.astype(np_dtype)
    g = rng.standard_normal(37).astype(np_dtype)
    values = f(a.astype(np.float64))
    win = values.argmax(axis=1) if op == "max=!" else values.argmin(axis=1)
    want = np.zeros((37, 37))
    want[np.arange(37), win] = g * df(a[np.arange(37), win].astype(np.float64))
    for name, kwargs in TARGETS.items():
        if name == "cuda-emulated":
            continue
        (got,) = compiler.define(src, **kwargs).vjp(a, grad_outputs=(g,))
        assert np.count_nonzero(got) == 37, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


# A division in a candidate rounds exactly (no reciprocal multiply) wherever the candidate
# is computed, and a clamp split of a colliding `min=!` scatter copies its versions over
# the whole shape (found by tools.fuzz: the winners were lost on llvm; the copies wrote an
# element several times and were rejected).
SCATTERS = {
    "divide": (
        "def f(double(N, M) A, double B) -> (O) {\n"
        "    O(i1, 2 * i2 + k3) min=! B / A(i1, i2) where i1 in 1:N, i2 in 1:M, k3 in 0:N\n}",
        {"N": 2, "M": 5},
    ),
    "clamped": (
        "def f(double(N, M) A, double B, double(K) C) -> (O) {\n"
        "    O(i1, 2 * i2 + k3) min=! fma(B, A(k4, max(i2 - 2, 0)), C(min(k3, K - 1)))"
        " where i1 in 1:N, i2 in 1:M, k3 in 0:N, k4 in 0:min(N, K)\n}",
        {"N": 2, "M": 4, "K": 1},
    ),
}


@pytest.mark.parametrize("case", sorted(SCATTERS))
@pytest.mark.parametrize("name", [n for n in TARGETS if n != "cuda-emulated"])
def test_colliding_min_scatters_against_differences(case: str, name: str) -> None:
    src, sizes = SCATTERS[case]
    rng = np.random.default_rng(11)
    a = rng.uniform(0.5, 2.0, (sizes["N"], sizes["M"])) * rng.choice(
        [-1.0, 1.0], (sizes["N"], sizes["M"])
    )
    args = [a, np.array(0.75)] + ([rng.standard_normal(sizes["K"])] if "K" in sizes else [])
    ref = compiler.define(src, target="interp")
    (o,) = ref(*args)
    g = rng.standard_normal(o.shape)
    g[~np.isfinite(o)] = 0.0
    got = compiler.define(src, **TARGETS[name]).vjp(*args, grad_outputs=(g,))
    eps = 1e-6
    for x, gx in zip(args, got, strict=True):
        want = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            x[idx] += eps
            hi = ref(*args)[0]
            x[idx] -= 2 * eps
            lo = ref(*args)[0]
            x[idx] += eps
            d = np.where(np.isfinite(o), hi - lo, 0.0)
            want[idx] = np.sum(d * g) / (2 * eps)
        np.testing.assert_allclose(gx, want, rtol=1e-6, atol=1e-7)
