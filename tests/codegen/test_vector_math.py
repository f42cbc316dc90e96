"""Vector math on the LLVM target: libmvec's variants where present, the scalar libm
path where not (forced here with `vector_math(False)`), both against NumPy in float64.

Errors are in ulps of the result's own type (`ulps`); float32 inputs are bit patterns
spread evenly over all 2^32 (every sign, denormals, infinities, NaNs, overflow and
underflow ranges) plus a dense grid where the functions are interesting; float64
inputs are random bit patterns plus the same grid. NumPy's float64 result is the
reference: for float32 it is exact to far below an ulp; for float64 it is itself
within about an ulp, so the float64 bound gets one ulp more.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import compiler
from compiler.cpu.llvm_math import MVEC, ULP_BOUND, vector_math, vector_math_available
from compiler.options import Options

ONE_THREAD = Options(threads=1)
REFERENCE = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt, "pow": np.power,
    "atan2": np.arctan2, "hypot": np.hypot, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
}  # fmt: skip
# Trigonometric functions of huge arguments need an exact argument reduction; the
# float32 variants are measured where |x| < 2^20 (beyond it, see the xfail-free check
# that results are finite and in [-1, 1]).
TRIG = {"sin", "cos", "tan"}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 88.72, 88.73, -87.3,
           -103.98, -104.0, 709.78, 709.79, -745.2, 1e-45, 1e-40, 1e-310, 2.0**-1022]  # fmt: skip


def ulps(got: np.ndarray, ref64: np.ndarray, dtype: type) -> np.ndarray:
    """|got - ref| in ulps of `dtype` at the reference (0 where both are the same
    infinity or both NaN; inf where only one is NaN)."""
    with np.errstate(all="ignore"):
        ref = ref64.astype(dtype)
        g = got.astype(np.float64)
        wide = ref64 if dtype is np.float32 else ref.astype(np.float64)
        spacing = np.spacing(np.abs(ref)).astype(np.float64)
        tiny = np.finfo(dtype).smallest_subnormal
        spacing = np.maximum(np.where(np.isfinite(spacing), spacing, 0), float(tiny))
        err = np.abs(g - wide) / spacing
        same = (g == ref.astype(np.float64)) | (np.isnan(g) & np.isnan(ref))
        err[same] = 0.0
        err[np.isnan(err)] = np.inf
    return err


def float32_inputs(step: int = 4099) -> np.ndarray:
    spread = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    grid = np.linspace(-30, 30, 200_001, dtype=np.float32)
    return np.concatenate([spread, grid, np.array(SPECIAL, dtype=np.float32)])


def float64_inputs(n: int = 1 << 18, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spread = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False).view(np.float64)
    grid = np.linspace(-30, 30, 100_001)
    return np.concatenate([spread, grid, np.array(SPECIAL)])


def source(fn: str, tag: str) -> str:
    if fn == "sigmoid":
        body = "B(i) = 1 / (1 + exp(-A(i)))"
    elif fn == "rsqrt":
        body = "B(i) = rsqrt(A(i))"
    elif fn in ("pow", "atan2", "hypot"):
        return f"def {fn}_{tag}(float(N) A, float(N) C) -> (B) {{ B(i) = {fn}(A(i), C(i)) }}"
    else:
        body = f"B(i) = {fn}(A(i))"
    return f"def {fn}_{tag}(float(N) A) -> (B) {{ {body} }}"


def kernel(fn: str, dtype: type, tag: str) -> compiler.Kernel:
    text = source(fn, tag)
    if dtype is np.float64:
        text = text.replace("float(N)", "double(N)")
    return compiler.define(text, target="llvm", options=ONE_THREAD, cache=False)


def measure(fn: str, dtype: type, tag: str) -> float:
    """The largest error in ulps of `fn` over the inputs of `dtype`."""
    x = float32_inputs() if dtype is np.float32 else float64_inputs()
    args = [x]
    if fn in ("pow", "atan2", "hypot"):
        rng = np.random.default_rng(7)
        half = len(x) // 2
        with np.errstate(all="ignore"):  # NaN bit patterns cast between float types
            y = np.concatenate([rng.permutation(x[:half]), rng.uniform(-8, 8, len(x) - half)])
            args.append(y.astype(dtype))
    (got,) = kernel(fn, dtype, tag)(*args)
    with np.errstate(all="ignore"):
        wide = [a.astype(np.float64) for a in args]
        if fn == "sigmoid":  # the formula in `dtype`, with exp correctly rounded
            ref = 1 / (1 + np.exp(-wide[0]).astype(dtype).astype(np.float64))
        else:
            ref = REFERENCE[fn](*wide)
    err = ulps(got, ref, dtype)
    if fn in TRIG and dtype is np.float32:
        err = err[np.abs(x) < 2.0**20]
    return float(err.max())


VECTOR = pytest.mark.skipif(not vector_math_available(), reason="no libmvec on this host")
MEASURED = [*MVEC, "sqrt", "rsqrt", "sigmoid"]
FALLBACK = ["exp", "log", "tanh", "pow", "sqrt", "rsqrt", "sigmoid"]


def bound(dtype: type) -> float:
    return ULP_BOUND if dtype is np.float32 else ULP_BOUND + 1  # NumPy's own ulp


@VECTOR
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("fn", MEASURED)
def test_vector_variant_error_in_ulps(fn: str, dtype: type) -> None:
    assert measure(fn, dtype, "vec") <= bound(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("fn", FALLBACK)
def test_scalar_fallback_error_in_ulps(fn: str, dtype: type) -> None:
    with vector_math(False):
        assert measure(fn, dtype, "scalar") <= bound(dtype)


def _ir(text: str) -> str:
    from compiler.cpu import emit_llvm
    from compiler.cpu.model import lower

    kernel = compiler.define(text, target="interp")
    return emit_llvm(lower(kernel.ranged))


@VECTOR
def test_the_vectoriser_calls_libmvec() -> None:
    # float32 exp is inline IR (test_fast_exp.py); log still calls libmvec
    text = "def sm(float(N) A, float(N) b) -> (O) { O() +=! log(A(i)) * b(i) }"
    assert "_ZGV" in _ir(text)


def test_the_fallback_is_scalar() -> None:
    text = "def sm_scalar(float(N) A) -> (O) { O(i) = tanh(A(i)) + exp(A(i)) }"
    with vector_math(False):
        ir = _ir(text)
    assert "_ZGV" not in ir and "tanhf" in ir


def test_trig_of_huge_float32_arguments_stays_in_range() -> None:
    x = float32_inputs()
    x = x[np.isfinite(x) & (np.abs(x) >= 2.0**20)]
    for fn in ("sin", "cos"):
        (got,) = kernel(fn, np.float32, "huge")(x)
        assert np.all(np.abs(got) <= 1)
