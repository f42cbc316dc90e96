"""Accurate float32 sums on the LLVM target: a long reduction loop is summed in blocks
of `SUM_BLOCK` (lanes of partial sums inside a block), the blocks added with Kahan's
compensation (`cpu.llvm_sums.blocked_sum`). Checked against `math.fsum` with the
documented bound (SUM_BLOCK / lanes + log2(lanes) + 2) * eps * sum(|x|), lanes = 32
(AVX2: 4 interleaved vectors of 8 floats; AVX-512 has more, a smaller bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler.cpu.llvm_emit import SUM_BLOCK
from compiler.options import Options

EPS32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff
LANES = 32
BOUND = (SUM_BLOCK / LANES + math.log2(LANES) + 2) * EPS32
SUM = "def total(float(N) A) -> (O) { O() +=! A(i) }"
SUM2 = "def total2(float(M, N) A) -> (O) { O() +=! A(i, j) }"
ROWS = "def rows(float(M, N) A) -> (O) { O(i) +=! A(i, j) }"


def _kernel(text: str, threads: int = 2) -> compiler.Kernel:
    return compiler.define(text, target="llvm", options=Options(threads=threads))


def test_summing_a_tenth_ten_million_times() -> None:
    n = 10_000_000
    (got,) = _kernel(SUM)(np.full(n, 0.1, np.float32))
    exact = n * float(np.float32(0.1))
    assert abs(float(got) - exact) <= BOUND * exact
    assert abs(float(got) - exact) / exact < 1e-6  # one running sum in lanes: ~1e-3


def test_two_dimensional_sum_of_ones_is_exact() -> None:
    (got,) = _kernel(SUM2)(np.ones((4099, 4111), np.float32))
    assert got == np.float32(4099 * 4111)  # correctly rounded (above 2^24)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1_000_000, 3_000_000),
    kind=st.sampled_from(["uniform", "normal", "exponents", "constant"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_large_sums_against_fsum(n: int, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        x = rng.random(n)
    elif kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "exponents":
        x = rng.random(n) * 2.0 ** rng.integers(-20, 20, n)
    else:
        x = np.full(n, rng.random())
    x = x.astype(np.float32)
    wide = x.astype(np.float64)
    (got,) = _kernel(SUM)(x)
    exact = math.fsum(wide)
    assert abs(float(got) - exact) <= BOUND * float(np.abs(wide).sum())


@pytest.mark.parametrize(
    "n", [1, 2, 31, SUM_BLOCK - 1, SUM_BLOCK, SUM_BLOCK + 1, 3 * SUM_BLOCK + 7]
)
@pytest.mark.parametrize("m", [1, 3])
def test_sizes_around_the_block(n: int, m: int) -> None:
    rng = np.random.default_rng(n * 7 + m)
    a = rng.standard_normal((m, n)).astype(np.float32)
    (got,) = _kernel(ROWS, threads=1)(a)
    want = np.array([math.fsum(r) for r in a.astype(np.float64)])
    tolerance = BOUND * np.abs(a.astype(np.float64)).sum(axis=1) + 1e-30
    assert np.all(np.abs(got - want) <= tolerance)
    (g2,) = _kernel(SUM2)(a)
    assert abs(float(g2) - math.fsum(a.astype(np.float64).ravel())) <= BOUND * np.abs(a).sum()


def test_float64_sums_are_blocked_too() -> None:
    x = np.full(5_000_001, 0.1)
    k = _kernel(SUM.replace("float(N)", "double(N)").replace("total", "total64"))
    (got,) = k(x)
    assert abs(float(got) - 5_000_001 * 0.1) <= 1e-15 * 5_000_001 * 0.1 * 8


# `+=!` starts at +0.0, and +0.0 + -0.0 is +0.0: a sum whose terms are all -0.0 is +0.0,
# as IEEE and NumPy give it. The accumulators' fast-math flags are `reassoc` and
# `contract`, not `nsz`, which let LLVM drop the first `0.0 +` and keep a -0.0 that
# `copysign` then shows (fuzz seed 130135: a whole output's sign flipped).
SIGNED = {
    "one term": "def z1(float(N) A) -> (O) { O(i) +=! A(i) * 2.0 }",
    "a row": "def z2(float(M, N) A) -> (O) { O(i) +=! A(i, j) }",
    "a column": "def z3(float(M, N) A) -> (O) { O(j) +=! A(i, j) }",
    "a product": "def z4(float(M, N) A, float(N, M) B) -> (O) { O(i, k) +=! A(i, j) * B(j, k) }",
    "everything": "def z5(float(M, N) A) -> (O) { O() +=! A(i, j) }",
}


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 40), (2, SUM_BLOCK + 9)])
@pytest.mark.parametrize("name", sorted(SIGNED))
@pytest.mark.parametrize(
    "options", [Options(threads=1), Options(threads=2), Options(threads=1, register_tile=1)]
)
def test_a_sum_of_negative_zeros_is_positive_zero(
    name: str, shape: tuple[int, int], options: Options
) -> None:
    text = SIGNED[name]
    k = compiler.define(text, target="llvm", options=options)
    a = np.full(shape, -0.0, np.float32)
    args = (a[0],) if name == "one term" else (a,)
    if name == "a product":
        args = (np.full(shape, 1.0, np.float32), a.T.copy())  # 1 * -0.0 is -0.0
    (got,) = k(*args)
    (want,) = compiler.define(text, target="interp")(*args)
    assert not np.any(np.signbit(want))  # the oracle: +0.0
    assert got.shape == want.shape and not np.any(np.signbit(got)), text
