"""Register tiles sized for 512-bit and 128-bit vector registers (`Options.vector_bits`,
`cpu.cpu_registers.tile_rows`) against the reference evaluator: 8-row convolution tiles,
32-lane packed matmul tiles and 4x4 dot-product tiles at odd sizes (1, primes, extents
below and between multiples of the lanes and rows), float32 and float64, strided reads,
and a convolution's gradient. The rest of the suite sees a 256-bit host
(tests/conftest.py), so these are the tests of the other widths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler.options import Options
from tests.codegen.kit import reference_and_llvm

CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) "
    "{ O(n, m, h, w) +=! I(n, c, {s} * h + kh, {s} * w + kw) * W1(m, c, kh, kw) }"
)
MATMUL = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
LINEAR = "def lin(float(B, I) X, float(O, I) W) -> (Y) { Y(b, o) +=! X(b, i) * W(o, i) }"


def _check(text: str, arrays: list[np.ndarray], options: Options) -> None:
    e, g = reference_and_llvm(text, arrays, options)
    tol = 1e-12 if g.dtype == np.float64 else 3e-5
    scale = max(1.0, float(np.abs(e).max(initial=0)))
    np.testing.assert_allclose(g, e, rtol=tol, atol=tol * scale * np.sqrt(arrays[0].size))


def _typed(text: str, dtype: type) -> str:
    return text.replace("float(", "double(") if dtype is np.float64 else text


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([128, 512]),
    stride=st.sampled_from([1, 2]),
    m=st.sampled_from([1, 7, 8, 9, 17]),
    hw=st.sampled_from([3, 5, 18, 33, 37]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_convolution_tiles_match_the_reference(
    bits: int, stride: int, m: int, hw: int, dtype: type, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    arrays = [
        rng.standard_normal((2, 3, hw, hw)).astype(dtype),
        rng.standard_normal((m, 3, 3, 3)).astype(dtype),
    ]
    text = _typed(CONV.replace("{s}", str(stride)), dtype)
    _check(text, arrays, Options(threads=2, vector_bits=bits))


@pytest.mark.parametrize(
    ("m", "k", "n"), [(1, 1, 1), (3, 7, 31), (5, 259, 32), (131, 17, 33), (9, 300, 65)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_matmul_tiles_of_32_lanes_match_the_reference(
    m: int, k: int, n: int, dtype: type
) -> None:
    rng = np.random.default_rng(m * k + n)
    arrays = [
        rng.standard_normal((m, k)).astype(dtype),
        rng.standard_normal((k, n)).astype(dtype),
    ]
    _check(_typed(MATMUL, dtype), arrays, Options(threads=2, vector_bits=512))


@pytest.mark.parametrize(("b", "o", "i"), [(1, 1, 1), (3, 5, 17), (4, 4, 64), (9, 7, 2053)])
def test_dot_tiles_of_16_outputs_match_the_reference(b: int, o: int, i: int) -> None:
    rng = np.random.default_rng(b * o + i)
    arrays = [
        rng.standard_normal((b, i)).astype(np.float32),
        rng.standard_normal((o, i)).astype(np.float32),
    ]
    _check(LINEAR, arrays, Options(threads=2, vector_bits=512))


def test_a_convolution_gradient_with_512_bit_tiles_matches_the_reference() -> None:
    rng = np.random.default_rng(3)
    text = CONV.replace("{s}", "1")
    i = rng.standard_normal((2, 5, 11, 13)).astype(np.float32)
    w = rng.standard_normal((9, 5, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 9, 9, 11)).astype(np.float32)
    k = compiler.define(text, options=Options(vector_bits=512), cache=None)
    ref = compiler.define(text, target="interp")
    for a, b in zip(k.vjp(i, w, grad_outputs=(g,)), ref.vjp(i, w, grad_outputs=(g,)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("b", "i", "o"),
    [
        (3, 1025, 257),  # o larger, its operand over 2^18 elements: swapped
        (5, 17, 1031),  # o larger, small operand: literal order
        (259, 1031, 7),  # b larger: literal order
        (1, 300, 1000),
    ],
)
def test_both_orders_of_a_dot_tile_match_the_reference(b: int, i: int, o: int) -> None:
    """The dot tile's loops swapped at run time (`cpu.alternatives.SwapCheck`) or not, against
    the reference evaluator."""
    rng = np.random.default_rng(b + i + o)
    arrays = [
        rng.standard_normal((b, i)).astype(np.float32),
        rng.standard_normal((o, i)).astype(np.float32),
    ]
    _check(LINEAR, arrays, Options(threads=2))
