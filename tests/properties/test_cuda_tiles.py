"""Property test of GPU thread tiles (compiler/cuda/cuda_tile.py) in emulation.

Random tile shapes (1..5 x 1..3 outputs a thread) and random sizes around the tile and
strip edges (a strip is 32 * tx columns): the tiled kernel, its x rest and its y rest
together must compute what NumPy does, forward and gradient, for a matmul and a
convolution (whose tile runs along the output channels, not next to the innermost
loop), in float64.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.cuda.cuda_options import CudaOptions
from compiler.kernel import define

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

MATMUL = "def mm(double(M, K) A, double(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
CONV = (
    "def conv(double(N, C, H, W) I, double(M, C, KH, KW) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}"
)
tiles = st.tuples(st.integers(1, 5), st.integers(1, 3))


def _options(tile: tuple[int, int]) -> CudaOptions:
    return CudaOptions(block=64, thread_tile=tile, tile_threads=1)


@settings(max_examples=12, deadline=None)
@given(
    tile=tiles,
    m=st.integers(1, 11),
    k=st.integers(1, 5),
    n=st.sampled_from([1, 31, 32, 33, 63, 64, 65, 96, 97, 130]),
)
def test_tiled_matmul_and_gradient_equal_numpy(
    tile: tuple[int, int], m: int, k: int, n: int
) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    kernel = define(MATMUL, target="cuda-emulated", options=_options(tile))
    (C,) = kernel(A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    dC = rng.standard_normal((m, n))
    dA, dB = kernel.vjp(A, B, grad_outputs=(dC,))
    np.testing.assert_allclose(dA, dC @ B.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dB, A.T @ dC, rtol=1e-12, atol=1e-12)


@settings(max_examples=6, deadline=None)
@given(tile=tiles, m=st.integers(1, 7), w=st.sampled_from([3, 34, 35, 67]))
def test_tiled_convolution_equals_numpy(tile: tuple[int, int], m: int, w: int) -> None:
    rng = np.random.default_rng(m * 100 + w)
    image, W1 = rng.standard_normal((2, 3, 4, w)), rng.standard_normal((m, 3, 2, 3))
    (out,) = define(CONV, target="cuda-emulated", options=_options(tile))(image, W1)
    want = np.zeros((2, m, 3, w - 2))
    for kh in range(2):
        for kw in range(3):
            patch = image[:, :, kh : kh + 3, kw : kw + w - 2]
            want += np.einsum("nchw,mc->nmhw", patch, W1[:, :, kh, kw])
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
