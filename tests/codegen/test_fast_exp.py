"""float32 `exp` as inline LLVM IR (compiler/cpu/llvm_exp.py): its error in ulps over
the whole float range, its special values, that it stays inline (no call, so the
vectoriser widens it), and kernels using it against the NumPy reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.cpu.llvm_exp import HI, LO, ULP
from compiler.cpu.llvm_math import vector_math
from compiler.options import Options
from tests.codegen.test_vector_math import _ir, float32_inputs, ulps

ONE_THREAD = Options(threads=1)
EXP = "def fexp(float(N) A) -> (B) { B(i) = exp(A(i)) }"


def _exp(x: np.ndarray) -> np.ndarray:
    (got,) = compiler.define(EXP, options=ONE_THREAD, cache=False)(x)
    return got


def _reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.exp(x.astype(np.float64))


def test_error_over_the_whole_float_range_is_within_the_bound() -> None:
    x = float32_inputs()
    assert ulps(_exp(x), _reference(x), np.float32).max() <= ULP


def test_dense_sweep_of_the_finite_range() -> None:
    """Every 61st float32 bit pattern from LO to HI (both signs: ~36M inputs)."""
    lo = np.float32(LO).view(np.uint32)  # negative: the largest pattern of the sweep
    hi = np.float32(HI).view(np.uint32)
    pos = np.arange(0, hi + 1, 61, dtype=np.uint32)
    neg = np.arange(0x80000000, lo + 1, 61, dtype=np.uint32)
    x = np.concatenate([pos, neg]).view(np.float32)
    assert ulps(_exp(x), _reference(x), np.float32).max() <= ULP


def test_special_values() -> None:
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    big = float(np.finfo(np.float32).max)
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 88.72283,
                  88.72284, 89.0, 1e30, -103.96, -103.98, -104.0, -1e30], dtype=np.float32)  # fmt: skip
    got = _exp(x)
    assert np.isnan(got[:2]).all()
    assert got[2] == np.inf and got[3] == 0.0
    assert (got[4:8] == 1.0).all()
    assert 0.99999 * big < got[8] <= big  # the largest finite result
    assert (got[9:12] == np.inf).all()
    assert got[12] == tiny and got[13] == 0.0  # gradual underflow to the last denormal
    assert (got[14:] == 0.0).all() and not np.signbit(got[14:]).any()


def test_denormal_results_round_once() -> None:
    x = np.linspace(-103.9, -87.0, 100_003, dtype=np.float32)
    want = _reference(x).astype(np.float32)  # correctly rounded (float64 is exact enough)
    got = _exp(x)
    assert ulps(got, _reference(x), np.float32).max() <= ULP
    assert np.abs(got.view(np.int32) - want.view(np.int32)).max() <= 1


def test_inline_ir_has_no_exp_call() -> None:
    text = "def sm(float(N) A, float(N) b) -> (O) { O() +=! exp(A(i)) * b(i) }"
    ir = _ir(text)
    assert "expf" not in ir and "_ZGV" not in ir and "llvm.fmuladd" in ir


def test_the_scalar_switch_keeps_libm() -> None:
    with vector_math(False):
        ir = _ir("def sm_libm(float(N) A) -> (B) { B(i) = exp(A(i)) }")
    assert "llvm.fmuladd" not in ir and "exp" in ir


def test_float64_exp_is_not_inlined() -> None:
    ir = _ir("def sm64(double(N) A) -> (B) { B(i) = exp(A(i)) }")
    assert "llvm.fmuladd" not in ir


EXPMV = "def expmv(float(M, N) A, float(N) b) -> (C) { C(i) +=! exp(A(i, j)) * b(j) }"
SOFTMAX = (
    "def softmax(float(N, D) X) -> (mx, s, Y) {\n"
    "    mx(n) max=! X(n, d)\n"
    "    s(n) +=! exp(X(n, d) - mx(n))\n"
    "    Y(n, d) = exp(X(n, d) - mx(n)) / s(n)\n}"
)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (13, 7), (31, 37), (3, 2053)])
@pytest.mark.parametrize("source", [EXPMV, SOFTMAX], ids=["expmv", "softmax"])
def test_kernels_match_the_reference_evaluator(source: str, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    a = (rng.standard_normal(shape) * 4).astype(np.float32)
    args = [a] if source is SOFTMAX else [a, rng.standard_normal(shape[1]).astype(np.float32)]
    native = compiler.define(source, options=Options(threads=2), cache=False)
    reference = compiler.define(source, target="interp")
    for got, want in zip(native(*args), reference(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
