"""Split reductions (cuda.cuda_split) and sizes-only conditions (cuda_map's pieces)
on cuda-emulated against NumPy at odd sizes (1, primes, a partial count that does not
divide the rows), the split kernels selected where expected, and NVRTC compiling them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from compiler import loops as L
from compiler.cuda.cuda_map import map_to_gpu
from compiler.cuda.cuda_options import CudaOptions
from compiler.kernel import define

SRC = """
def total(float(N, K) A) -> (s) { s +=! A(i, k) }
def colsum(float(N, K) A) -> (c) { c(k) +=! A(i, k) }
def colmax(float(N, K) A) -> (c) { c(k) max=! A(i, k) }
def rowsum(float(N, K) A) -> (r) { r(i) +=! A(i, k) }
def vecmin(float(N) A) -> (m) { m min=! A(i) }
def firstmatch(float(N) S, float v) -> (idx) { idx min=! (S(r) == v) ? r : N }
"""
SIZES = [(1, 1), (3, 17), (97, 5), (1009, 37), (5, 4099), (4099, 3)]
ROOT = Path(__file__).resolve().parents[2]
HAS_NVRTC = importlib.util.find_spec("cuda") is not None


def _ran(kernel, sizes: dict[str, int]) -> list[str]:  # noqa: ANN001
    """The names of the CUDA kernels these sizes launch."""
    program = kernel._native
    return [k.name for k in program.gpu.kernels if program.grid(k, sizes)[0]]


@pytest.mark.parametrize(("n", "k"), SIZES)
def test_split_sums_and_extrema_match_numpy(n: int, k: int) -> None:
    a = np.random.default_rng(n * 7 + k).standard_normal((n, k)).astype(np.float32)
    wide = a.astype(np.float64)
    cases = [("total", wide.sum()), ("colsum", wide.sum(0)), ("colmax", wide.max(0))]
    for entry, want in [*cases, ("rowsum", wide.sum(1))]:
        kernel = define(SRC, entry, target="cuda-emulated")
        (got,) = kernel(a)
        np.testing.assert_allclose(
            np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-4 * np.sqrt(n * k)
        )
    vec = a.reshape(-1)
    kernel = define(SRC, "vecmin", target="cuda-emulated")
    (got,) = kernel(vec)
    assert float(got) == float(vec.min())


def test_split_kernels_run_where_the_reduction_is_long() -> None:
    total = define(SRC, "total", target="cuda-emulated")
    assert _ran(total, {"N": 1009, "K": 37}) == ["total_k0s1", "total_k0s2"]
    assert _ran(total, {"N": 2, "K": 3}) == ["total_k0"]
    colsum = define(SRC, "colsum", target="cuda-emulated")
    assert _ran(colsum, {"N": 4099, "K": 3}) == ["colsum_k0s1", "colsum_k0s2"]
    rowsum = define(SRC, "rowsum", target="cuda-emulated")  # few long rows: split
    assert _ran(rowsum, {"N": 5, "K": 4099}) == ["rowsum_k0s1", "rowsum_k0s2"]
    assert _ran(rowsum, {"N": 4099, "K": 37}) == ["rowsum_k0w"]  # many rows: a warp a row


def test_split_sum_is_deterministic() -> None:
    a = np.random.default_rng(3).standard_normal((4099, 37)).astype(np.float32)
    kernel = define(SRC, "total", target="cuda-emulated")
    first = np.asarray(kernel(a)[0])
    assert all(np.asarray(kernel(a)[0]).tobytes() == first.tobytes() for _ in range(3))


@pytest.mark.parametrize("n", [1, 2, 97, 4099])
def test_integer_argmin_like_min_splits_and_matches_numpy(n: int) -> None:
    s = np.random.default_rng(n).integers(0, 5, n).astype(np.float32)
    v = np.float32(s[n // 2])
    kernel = define(SRC, "firstmatch", target="cuda-emulated")
    (got,) = kernel(s, v)
    assert int(got) == int(np.flatnonzero(s == v)[0])
    if n == 4099:
        assert "firstmatch_k0s1" in _ran(kernel, {"N": n})


def test_statement_under_a_sizes_only_if_keeps_its_band() -> None:
    i64, f32 = L.DType.INT64, L.DType.FLOAT32
    n = L.VarRef("N", i64)
    a = L.Buffer("A", f32, (n,), L.Role.IN)
    o = L.Buffer("O", f32, (n,), L.Role.OUT)
    i = L.VarRef("i", i64)
    store = L.Store(o, (i,), L.Bin(L.BinOp.MUL, L.Load(a, (i,)), L.Const(2.0, f32)))
    band = L.For("i", L.Const(0, i64), n, 1, store, L.LoopKind.PARALLEL)
    cond = L.Bin(L.BinOp.GE, n, L.Const(5, i64))
    f = L.Function("f", (a, o), ("N",), L.If(cond, band, None))
    (kernel,) = map_to_gpu(f, (f.body,), CudaOptions()).kernels
    assert kernel.mode == "parallel" and kernel.grid[0] is not None
    assert L.eval_expr(kernel.when, {"N": 7}) > 0 and L.eval_expr(kernel.when, {"N": 4}) <= 0


@pytest.mark.skipif(not HAS_NVRTC, reason="needs cuda-bindings (the [cuda] extra)")
def test_split_kernels_compile_with_nvrtc() -> None:
    from compiler.cuda.cuda import emit_cuda
    from compiler.cuda.cuda_driver import compile_source

    for entry in ("total", "colsum", "colmax", "rowsum", "vecmin", "firstmatch"):
        program = define(SRC, entry, target="cuda-emulated")._native
        split = [k for k in program.gpu.kernels if k.variant in ("split", "warp")]
        assert split, entry
        source = emit_cuda(program.gpu)
        assert compile_source(source, arch="sm_90", fast_math=False)


def test_conv_bias_gradient_splits_over_batch_and_rows() -> None:
    src = (ROOT / "examples" / "conv2d.tc").read_text()
    rng = np.random.default_rng(5)
    i = rng.standard_normal((3, 2, 23, 23))
    w1 = rng.standard_normal((5, 2, 3, 3))
    b = rng.standard_normal(5)
    seed = rng.standard_normal((3, 5, 21, 21))
    kernel = define(src.replace("float(", "double("), target="cuda-emulated")
    _, w1_grad, b_grad = kernel.vjp(i, w1, b, grad_outputs=[seed])
    np.testing.assert_allclose(b_grad, seed.sum(axis=(0, 2, 3)), rtol=1e-12, atol=1e-12)
    want = np.einsum("nmhw,nckhlw->mckl", seed, _windows(i, 3, 3))
    np.testing.assert_allclose(w1_grad, want, rtol=1e-10, atol=1e-10)
    grads = kernel.grad._native
    sizes = {"N": 3, "C": 2, "H": 23, "W": 23, "M": 5, "KH": 3, "KW": 3}
    ran = [k.variant for k in grads.gpu.kernels if grads.grid(k, sizes)[0]]
    assert "split" in ran


def _windows(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """x[n, c, h + a, w + b] as an array indexed [n, c, a, h, b, w]."""
    n, c, h, w = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    out = np.empty((n, c, kh, ho, kw, wo))
    for a in range(kh):
        for b in range(kw):
            out[:, :, a, :, b, :] = x[:, :, a : a + ho, b : b + wo]
    return out
