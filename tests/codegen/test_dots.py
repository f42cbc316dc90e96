"""Dot-product tiles vectorised by the emitter (`compiler/cpu/llvm_dots.py`): the
loop's terms as vector partial sums, reduced by one transposed tree. Checked against
NumPy in float64 over sizes 0, 1, primes and sizes around the vector width, with every
number of sums the tree can get (padding lanes included), and against the same kernels
left to LLVM's vectoriser."""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler import pipeline
from compiler.codegen.target import get_target, prepare
from compiler.cpu import cpu_parallel, llvm_dots, runtime
from compiler.cpu import llvm as backend
from compiler.options import Options

MATMUL_T = "def mmt(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"
QKT = (
    "def qkt(float(B,T,E) Q, float(B,T,E) K) -> (S) {\n"
    "    S(b, i, j) +=! Q(b, i, e) * K(b, j, e)\n}"
)
LINEAR = (
    "def linear(float(B, I) X, float(O, I) W, float(O) b) -> (Y, Z) {\n"
    "    Y(n, o) +=! X(n, i) * W(o, i)\n"
    "    Z(n, o) = fmax(Y(n, o) + b(o), 0)\n}"
)


def _ir(text: str, options: Options) -> str:
    lowered = pipeline.run(text, upto="lower", options=options)
    f = cpu_parallel.run(prepare(get_target("llvm"), lowered.function, options))
    return str(backend.build_module(f))


_KERNELS: dict[tuple[str, str, int], compiler.Kernel] = {}


def _kernel(text: str, dtype: str, min_sums: int) -> compiler.Kernel:
    """`text` (in `dtype`) compiled with dot loops of `min_sums` sums or more emitted
    here (1 << 20: none, all left to LLVM), once per test session: the sizes are
    the kernel's arguments."""
    key = (text, dtype, min_sums)
    if key not in _KERNELS:
        source = text.replace("float(", "float64(") if dtype == "float64" else text
        saved, table = llvm_dots.MIN_SUMS, runtime._CACHE
        llvm_dots.MIN_SUMS, runtime._CACHE = min_sums, OrderedDict()  # compiled afresh
        try:
            _KERNELS[key] = compiler.define(source, options=Options(threads=1), cache=False)
        finally:
            llvm_dots.MIN_SUMS, runtime._CACHE = saved, table
    return _KERNELS[key]


def _run(text: str, arrays: list, min_sums: int) -> list:
    out = _kernel(text, str(arrays[0].dtype), min_sums)(*arrays)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def _mmt(m: int, n: int, k: int, dtype: str, seed: int = 0) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k)).astype(dtype)
    return [a, b], a.astype(np.float64) @ b.astype(np.float64).T


def _close(got: np.ndarray, want: np.ndarray, k: int, dtype: str) -> None:
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * eps * max(k, 1) * 4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dot_tiles_are_vector_partials_and_one_tree(dtype: str) -> None:
    text = MATMUL_T.replace("float(", f"{dtype}(") if dtype == "float64" else MATMUL_T
    ir = _ir(text, Options(threads=1))
    lanes = 16 if dtype == "float32" else 8
    ty = "float" if dtype == "float32" else "double"
    assert re.search(rf"\.dot\"? = alloca <{lanes} x {ty}>", ir)
    assert "shufflevector" in ir


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("min_sums", [1, 8])
def test_dot_tiles_over_odd_lengths(dtype: str, min_sums: int) -> None:
    """Lengths below, at and around the vector width (the scalar path, whole vectors,
    a vector part and a tail); with 1 sum a tree at least, every tile shape (4 x 4,
    the 4 x 1 and 1 x 1 remainders) goes through the tree and its padding lanes."""
    for k in (1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 97):
        arrays, want = _mmt(7, 6, k, dtype)
        (got,) = _run(MATMUL_T, arrays, min_sums)
        _close(got, want, k, dtype)


def test_same_results_as_llvms_vectoriser() -> None:
    arrays, want = _mmt(9, 13, 45, "float32", seed=3)
    (mine,) = _run(MATMUL_T, arrays, 8)
    (llvms,) = _run(MATMUL_T, arrays, 1 << 20)  # no loop has that many sums
    _close(mine, want, 45, "float32")
    _close(llvms, want, 45, "float32")


def test_batched_products_and_the_linear_layer() -> None:
    rng = np.random.default_rng(1)
    q, kk = (rng.standard_normal((3, 11, 37)).astype(np.float32) for _ in range(2))
    assert re.search(r"\.dot\"? = alloca <16 x float>", _ir(QKT, Options(threads=1)))
    (s,) = _run(QKT, [q, kk], 8)
    _close(s, np.einsum("bie,bje->bij", q.astype(np.float64), kk), 37, "float32")
    x = rng.standard_normal((10, 50)).astype(np.float32)
    w = rng.standard_normal((9, 50)).astype(np.float32)
    bias = rng.standard_normal(9).astype(np.float32)
    y, z = _run(LINEAR, [x, w, bias], 8)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    _close(y, want, 50, "float32")
    _close(z, np.maximum(want + bias, 0), 50, "float32")


def test_gradient_of_a_dot_tiled_product_in_float64() -> None:
    text = MATMUL_T.replace("float(", "float64(")
    arrays, _ = _mmt(6, 5, 23, "float64", seed=4)
    cot = np.random.default_rng(5).standard_normal((6, 5))
    ga, gb = compiler.define(text, options=Options(threads=1), cache=False).vjp(
        *arrays, grad_outputs=(cot,)
    )
    np.testing.assert_allclose(ga, cot @ arrays[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, cot.T @ arrays[0], rtol=1e-12, atol=1e-12)


@settings(deadline=None)
@given(
    m=st.integers(1, 13),
    n=st.integers(1, 13),
    k=st.integers(1, 70),
    dtype=st.sampled_from(["float32", "float64"]),
    min_sums=st.sampled_from([1, 8]),
)
def test_dot_tiles_match_numpy(m: int, n: int, k: int, dtype: str, min_sums: int) -> None:
    arrays, want = _mmt(m, n, k, dtype, seed=m * 100 + n + k)
    (got,) = _run(MATMUL_T, arrays, min_sums)
    _close(got, want, k, dtype)
