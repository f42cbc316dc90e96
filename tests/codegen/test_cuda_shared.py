"""Shared-memory tiling of contractions (cuda.cuda_shared): matmul, bmm and conv2d's
implicit GEMM run in emulation (fibers, __syncthreads, race-checked shared tiles)
equal to the interpreter on odd sizes, in float32 and float64."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from compiler.cuda.cuda_options import CudaOptions
from compiler.diagnostics import OptionsError
from compiler.kernel import define

# warp_outputs=0: a few outputs of a long reduction otherwise run as warp reductions
SMALL = CudaOptions(
    shared_tile=(16, 16, 4, 2, 2), shared_min_outputs=1, race_check=True, warp_outputs=0
)
MM = "def mm({t}(M, K) A, {t}(K, N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
BMM = "def bmm({t}(Q, M, K) A, {t}(Q, K, N) B) -> (C) {{ C(b, m, n) +=! A(b, m, k) * B(b, k, n) }}"
CONV = (
    "def conv({t}(N, C, H, W) I, {t}(M, C, KH, KW) W1) -> (O) "
    "{{ O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw) }}"
)
# dC * B^T (a gradient's transposed operand)
MMT = "def mmt({t}(M, N) D, {t}(K, N) B) -> (G) {{ G(m, k) +=! D(m, n) * B(k, n) }}"


def _kernels(kernel: object, env: dict[str, int]) -> list[str]:
    program = kernel._native
    return [k.variant for k, g in zip(program.gpu.kernels, program.grids(env), strict=True) if g[0]]


def _check(src: str, dtype: str, arrays: list[np.ndarray], env: dict[str, int]) -> None:
    code = src.format(t=dtype)
    got = define(code, target="cuda-emulated", options=SMALL)
    assert "shared" in _kernels(got, env)
    want = define(code, target="interp")(*arrays)
    tol = 1e-5 if dtype == "float" else 1e-12
    for g, w in zip(got(*arrays), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float", "double"])
def test_matmul_on_odd_sizes_equals_the_interpreter(dtype: str) -> None:
    np_t = np.float32 if dtype == "float" else np.float64
    rng = np.random.default_rng(3)
    sizes = [(1, 1, 1), (7, 33, 65), (65, 7, 1), (33, 65, 7), (1, 65, 33), (65, 65, 65)]
    sizes += [s for s in itertools.product((1, 7, 33, 65), repeat=3) if sum(s) % 5 == 0][:6]
    for m, n, k in sizes:
        A, B = rng.standard_normal((m, k)).astype(np_t), rng.standard_normal((k, n)).astype(np_t)
        _check(MM, dtype, [A, B], {"M": m, "N": n, "K": k})


@pytest.mark.parametrize("dtype", ["float", "double"])
def test_bmm_and_a_transposed_operand_equal_the_interpreter(dtype: str) -> None:
    np_t = np.float32 if dtype == "float" else np.float64
    rng = np.random.default_rng(4)
    for q, m, n, k in [(1, 7, 33, 5), (3, 17, 1, 33), (2, 33, 19, 7)]:
        A = rng.standard_normal((q, m, k)).astype(np_t)
        B = rng.standard_normal((q, k, n)).astype(np_t)
        _check(BMM, dtype, [A, B], {"Q": q, "M": m, "N": n, "K": k})
    for m, n, k in [(7, 33, 65), (33, 1, 17)]:
        D, B = rng.standard_normal((m, n)).astype(np_t), rng.standard_normal((k, n)).astype(np_t)
        _check(MMT, dtype, [D, B], {"M": m, "N": n, "K": k})


@pytest.mark.parametrize("dtype", ["float", "double"])
def test_conv2d_implicit_gemm_equals_the_interpreter(dtype: str) -> None:
    np_t = np.float32 if dtype == "float" else np.float64
    rng = np.random.default_rng(5)
    for n, c, h, w, m, kh, kw in [
        (1, 1, 3, 3, 1, 3, 3),
        (2, 3, 9, 7, 5, 3, 2),
        (1, 5, 6, 11, 17, 1, 3),
    ]:
        X = rng.standard_normal((n, c, h, w)).astype(np_t)
        W1 = rng.standard_normal((m, c, kh, kw)).astype(np_t)
        _check(CONV, dtype, [X, W1], {"N": n, "C": c, "H": h, "W": w, "M": m, "KH": kh, "KW": kw})


def test_shared_memory_option_and_threshold() -> None:
    code = MM.format(t="float")
    env = {"M": 200, "N": 200, "K": 9}
    assert "shared" in _kernels(define(code, target="cuda-emulated"), env)
    off = define(code, target="cuda-emulated", options=CudaOptions(shared_memory=False))
    assert all(k.variant != "shared" for k in off._native.gpu.kernels)
    small = {"M": 7, "N": 9, "K": 9}  # below the default's shared_min_outputs
    assert "shared" not in _kernels(define(code, target="cuda-emulated"), small)
    for bad in [(16, 16, 4, 3, 2), (8, 8, 4, 8, 8), (16, 16, 128, 2, 2), (16, 16, 4, 2)]:
        with pytest.raises(OptionsError, match="shared_tile"):
            CudaOptions(shared_tile=bad)


def test_only_contractions_with_reuse_on_both_sides() -> None:
    """A matrix-vector product (no column side), a max= reduction and a sum of two
    products keep the other kernels."""
    for src in [
        "def mv(float(M, K) A, float(K) x) -> (y) { y(m) +=! A(m, k) * x(k) }",
        "def mx(float(M, K) A, float(K, N) B) -> (C) { C(m, n) max=! A(m, k) * B(k, n) }",
        "def two(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) * A(m, k) }",
    ]:
        kernel = define(src, target="cuda-emulated", options=SMALL)
        assert all(k.variant != "shared" for k in kernel._native.gpu.kernels), src


# a convolution's weight gradient: 64 x 576 outputs, each a sum of N * H * W terms
WGRAD = (
    "def wgrad(float(N, M, HO, WO) G, float(N, C, H, W) I) -> (W1) "
    "{ W1(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw) where kh in 0:3, kw in 0:3 }"
)


def test_few_outputs_of_a_long_reduction_run_a_warp_each_unless_the_tiles_fill_the_gpu() -> None:
    """At N32 C64 56^2 M64 the weight gradient's shared tiles are 5 blocks of 256
    threads: the warp reduction (a warp an output) runs. matmul 4096^3 (1024 tiles)
    keeps the shared kernel; so does a small matmul whose outputs exceed warp_outputs."""
    wgrad = define(WGRAD, target="cuda-emulated")
    env = {"N": 32, "M": 64, "HO": 54, "WO": 54, "C": 64, "H": 56, "W": 56}
    ran = _kernels(wgrad, env)
    assert "warp" in ran and "shared" not in ran
    mm = define(MM.format(t="float"), target="cuda-emulated")
    assert _kernels(mm, {"M": 4096, "K": 4096, "N": 4096}) == ["shared"]
    assert _kernels(mm, {"M": 512, "K": 512, "N": 512}) == ["shared"]
