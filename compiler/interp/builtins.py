"""NumPy implementations of TC's builtin functions, for the reference evaluator.

Each entry of `BUILTINS` takes NumPy arrays that are already converted to the
call's result type (TC types a builtin call as the match of its argument types
with `float`, so `exp(int32)` is float32 and `exp(double)` is float64) and returns
an array of that same dtype. The functions follow CUDA's math library, which TC
called: `round` rounds halves away from zero (not NumPy's half-to-even),
`remainder` is IEEE's (`math.remainder`), `fmin`/`fmax` ignore a NaN operand,
`logb` is the unbiased exponent, `sinpi`/`cospi` are exact at integers and halves.

Functions NumPy and the standard library cannot compute exactly (the Bessel
functions `j0 j1 y0 y1 cyl_bessel_i1`) raise a `TCError` saying so. A few are
computed in float64 and rounded to the result type (`erfinv`, `erfcinv`,
`normcdfinv` by Newton's method on `math.erf`; `erfcx` with an asymptotic series
for large arguments; float32 `fma` through float64, which may double-round in
rare ties): accurate to the last bit or two of float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from compiler.diagnostics import SemanticError
from compiler.frontend.source import NO_SPAN, Span

Fn = Callable[..., np.ndarray]

UNSUPPORTED = frozenset({"j0", "j1", "y0", "y1", "cyl_bessel_i1"})


def _via_math(fn: Callable[[float], float]) -> Fn:
    """Apply a scalar `math` function elementwise in float64, keep the input dtype."""
    vec = np.vectorize(fn, otypes=[np.float64])

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.size == 0:
            return x.copy()
        return vec(x.astype(np.float64)).astype(x.dtype)

    return apply


def _in_f64(fn: Callable[..., np.ndarray]) -> Fn:
    """Compute in float64 and round to the dtype of the first argument."""

    def apply(*args: np.ndarray) -> np.ndarray:
        dtype = np.asarray(args[0]).dtype
        return np.asarray(fn(*(np.asarray(a, dtype=np.float64) for a in args))).astype(dtype)

    return apply


def _round_half_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)


def _logb(x: np.ndarray) -> np.ndarray:
    _, e = np.frexp(x)
    out = (e - 1).astype(x.dtype)
    out = np.where(x == 0, -np.inf, out)
    out = np.where(np.isinf(x), np.inf, out)
    return np.where(np.isnan(x), np.nan, out).astype(x.dtype)


def _sinpi(x: np.ndarray) -> np.ndarray:
    r = np.remainder(x.astype(np.float64), 2.0)  # exact: the period of sin(pi x) is 2
    exact = {0.0: 0.0, 0.5: 1.0, 1.0: 0.0, 1.5: -1.0}
    out = np.sin(np.pi * r)
    for at, value in exact.items():
        out = np.where(r == at, value, out)
    return np.where(np.isfinite(x), out, np.nan).astype(x.dtype)


def _cospi(x: np.ndarray) -> np.ndarray:
    return _sinpi(np.asarray(x, dtype=np.float64) + 0.5).astype(x.dtype)


def _lgamma_scalar(x: float) -> float:
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf  # the poles at 0, -1, -2, ...


def _tgamma_scalar(x: float) -> float:
    try:
        return math.gamma(x)
    except OverflowError:
        return math.inf
    except ValueError:
        if x == 0:
            return math.copysign(math.inf, x)
        return math.nan  # negative integers and -inf


def _remainder_scalar(x: float, y: float) -> float:
    try:
        return math.remainder(x, y)
    except ValueError:
        return math.nan  # x infinite or y zero


def _erfinv_scalar(y: float) -> float:
    if math.isnan(y) or abs(y) > 1:
        return math.nan
    if abs(y) == 1:
        return math.copysign(math.inf, y)
    x = 0.0
    # Newton on erf(x) = y, started from a logarithmic guess (converges in < 40 steps).
    if abs(y) > 0.7:
        x = math.copysign(math.sqrt(-math.log((1 - abs(y)) / 2)), y)
    for _ in range(100):
        step = (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
        x -= step
        if abs(step) <= 1e-17 * max(1.0, abs(x)):
            break
    return x


def _erfcinv_scalar(y: float) -> float:
    if math.isnan(y) or y < 0 or y > 2:
        return math.nan
    if y == 0:
        return math.inf
    if y == 2:
        return -math.inf
    if y > 0.3:
        return _erfinv_scalar(1 - y)
    x = math.sqrt(-math.log(y / 2))
    # Newton on erfc(x) = y, relative to y so tiny tails converge too.
    for _ in range(100):
        d = -2 / math.sqrt(math.pi) * math.exp(-x * x)
        step = (math.erfc(x) - y) / d
        x -= step
        if abs(step) <= 1e-17 * max(1.0, abs(x)):
            break
    return x


def _erfcx_scalar(x: float) -> float:
    if x < -26.0:
        return math.inf  # exp(x^2) overflows float64
    if x < 26.0:
        return math.exp(x * x) * math.erfc(x)
    # Asymptotic series 1/(x sqrt(pi)) * sum (-1)^n (2n-1)!! / (2x^2)^n: at x >= 26
    # the first omitted term is below float64's epsilon.
    total, term = 1.0, 1.0
    for n in range(1, 8):
        term *= -(2 * n - 1) / (2 * x * x)
        total += term
    return total / (x * math.sqrt(math.pi))


def _fdim(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.where(x > y, x - y, np.zeros_like(x))
    return np.where(np.isnan(x) | np.isnan(y), np.nan, out).astype(x.dtype)


def _fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    if x.dtype != np.float64:
        # A product of two float32/float16 values is exact in float64.
        return (x.astype(np.float64) * y + z).astype(x.dtype)
    from fractions import Fraction

    def exact(a: float, b: float, c: float) -> float:
        if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
            return a * b + c
        return float(Fraction(a) * Fraction(b) + Fraction(c))

    return np.vectorize(exact, otypes=[np.float64])(x, y, z)


def _norm(*xs: np.ndarray) -> np.ndarray:
    return np.sqrt(sum(np.asarray(x, dtype=np.float64) ** 2 for x in xs))


BUILTINS: dict[str, Fn] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "logb": _logb,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x),
    "cbrt": np.cbrt,
    "rcbrt": lambda x: x.dtype.type(1) / np.cbrt(x),
    "pow": np.power,
    "hypot": np.hypot,
    "rhypot": lambda x, y: x.dtype.type(1) / np.hypot(x, y),
    "norm3d": _in_f64(_norm),
    "norm4d": _in_f64(_norm),
    "rnorm3d": _in_f64(lambda *xs: 1.0 / _norm(*xs)),
    "rnorm4d": _in_f64(lambda *xs: 1.0 / _norm(*xs)),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sinpi": _sinpi,
    "cospi": _cospi,
    "erf": _via_math(math.erf),
    "erfc": _via_math(math.erfc),
    "erfinv": _via_math(_erfinv_scalar),
    "erfcinv": _via_math(_erfcinv_scalar),
    "erfcx": _via_math(_erfcx_scalar),
    "lgamma": _via_math(_lgamma_scalar),
    "tgamma": _via_math(_tgamma_scalar),
    "normcdf": _via_math(lambda x: 0.5 * math.erfc(-x / math.sqrt(2))),
    "normcdfinv": _via_math(lambda p: -math.sqrt(2) * _erfcinv_scalar(2 * p)),
    "cyl_bessel_i0": _in_f64(np.i0),
    "ceil": np.ceil,
    "floor": np.floor,
    "round": _round_half_away,
    "trunc": np.trunc,
    "fmod": np.fmod,
    "remainder": _in_f64(np.vectorize(_remainder_scalar, otypes=[np.float64])),
    "fdim": _fdim,
    "copysign": np.copysign,
    "nextafter": np.nextafter,
    "fabs": np.abs,
    "fma": _fma,
    "fdivide": np.divide,
    "fmin": np.fmin,
    "fmax": np.fmax,
    "min": np.minimum,
    "max": np.maximum,
}


def builtin(name: str, span: Span = NO_SPAN) -> Fn:
    """The implementation of builtin `name`; a TCError if the evaluator lacks it."""
    fn = BUILTINS.get(name)
    if fn is None:
        why = "NumPy has no exact implementation" if name in UNSUPPORTED else "unknown builtin"
        raise SemanticError(
            f"builtin {name} is not supported by the reference evaluator ({why})",
            span,
            hint="use target='llvm' for this def, or rewrite it without this builtin",
        )
    return fn
