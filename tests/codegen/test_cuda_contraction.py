"""CUDA's contraction rule (docs/internals/numerics.md): only a sum's product is fused,
as `fma(a, b, acc)`, and NVRTC compiles without `--fmad`, so a `max=` gradient that
recomputes its candidate selects the winners the forward selected."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.cuda import cuda_driver
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.ranges import infer_ranges
from compiler.runtime.cuda import compile_cuda

MAXUPDATE = """def f(double(M, K) B) -> (O) {
  O(b, i) = B(0, i) where b in 0:M
  O(i, j) max= O(i, j) * O(i, j) + B(0, j) where j in 0:16
}"""


def _cuda_source(src: str) -> str:
    return compile_cuda(infer_ranges(check_def(parse(src).get(None)))).source


def test_a_sums_product_is_an_explicit_fma_and_nothing_else_is() -> None:
    text = _cuda_source(
        "def mm(float(M, K) A, float(K, N) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }"
    )
    assert "acc = fmaf(A[i * K + k], B[k * N + j], acc);" in text
    # the max= candidate is no sum: its multiply and add stay apart
    text = _cuda_source(MAXUPDATE)
    assert "fma" not in text.split("__global__", 1)[1]
    assert "acc = tcc_max(acc, O[i * tcc_max(16LL, K) + j] * O[" in text


def test_nvrtc_runs_without_fmad_unless_fast_math(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[bytes]] = []

    class _Stop(Exception):
        pass

    class _Nvrtc:
        def nvrtcCreateProgram(self, *args: object) -> tuple[int, object]:
            return (0, object())

        def nvrtcCompileProgram(self, prog: object, n: int, opts: list[bytes]) -> tuple[int]:
            seen.append(list(opts))
            raise _Stop

        def nvrtcDestroyProgram(self, prog: object) -> tuple[int]:
            return (0,)

    monkeypatch.setattr(cuda_driver, "_bindings", lambda: (None, _Nvrtc()))
    monkeypatch.setattr(
        cuda_driver, "_check", lambda result, what: result[1] if len(result) > 1 else None
    )
    for fast in (False, True):
        with pytest.raises(_Stop):
            cuda_driver.compile_source("", arch="sm_90", fast_math=fast)
    assert b"--fmad=false" in seen[0] and b"--use_fast_math" not in seen[0]
    assert b"--use_fast_math" in seen[1] and b"--fmad=false" not in seen[1]


def test_max_update_gradient_on_cuda_emulated_matches_differences() -> None:
    rng = np.random.default_rng(3)
    B = rng.standard_normal((3, 16))
    G = rng.standard_normal((3, 16))
    k = compiler.define(MAXUPDATE, target="cuda-emulated")
    (got,) = k.vjp(B, grad_outputs=(G,))
    ref = compiler.define(MAXUPDATE, target="interp")
    eps, want = 1e-6, np.zeros_like(B)
    for idx in np.ndindex(B.shape):
        hi, lo = B.copy(), B.copy()
        hi[idx] += eps
        lo[idx] -= eps
        want[idx] = np.sum((ref(hi)[0] - ref(lo)[0]) * G) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
