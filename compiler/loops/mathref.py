"""Reference values of the loop IR's math builtins, one scalar at a time.

Each function takes float64 arguments and returns a float64 that the interpreter then
rounds to the call's dtype (a correctly rounded float32 result in practice, which libm's
`expf` & co. match to an ulp or two). `nextafter` is the exception: it steps in the
call's own dtype. Domain errors give NaN and overflows give infinities, as in C.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Scalar = Callable[..., float]


def _safe(fn: Callable[..., float], pole: float = math.nan) -> Scalar:
    def apply(*args: float) -> float:
        try:
            return fn(*args)
        except OverflowError:
            return math.inf
        except ValueError:
            return pole

    return apply


def _round(x: float) -> float:
    if not math.isfinite(x):
        return x
    t = float(math.trunc(x))
    return t + math.copysign(1.0, x) if abs(x - t) >= 0.5 else t


def _logb(x: float) -> float:
    if math.isnan(x):
        return x
    if x == 0:
        return -math.inf
    if math.isinf(x):
        return math.inf
    return float(math.frexp(x)[1] - 1)


def _tgamma(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return _safe(math.gamma)(x)


def _fdim(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return math.nan
    return x - y if x > y else 0.0


def _norm(*xs: float) -> float:
    return math.sqrt(sum(x * x for x in xs))


def _np(fn: np.ufunc) -> Scalar:
    return lambda *args: float(fn(*(np.float64(a) for a in args)))


MATH: dict[str, Scalar] = {
    "exp": _np(np.exp), "exp2": _np(np.exp2), "exp10": lambda x: float(np.power(10.0, x)),
    "expm1": _np(np.expm1), "log": _np(np.log), "log2": _np(np.log2),
    "log10": _np(np.log10), "log1p": _np(np.log1p), "logb": _logb,
    "sqrt": _np(np.sqrt), "rsqrt": lambda x: float(1.0 / np.sqrt(np.float64(x))),
    "cbrt": _np(np.cbrt), "rcbrt": lambda x: float(1.0 / np.cbrt(np.float64(x))),
    "pow": _np(np.power), "hypot": _np(np.hypot),
    "rhypot": lambda x, y: float(1.0 / np.hypot(np.float64(x), y)),
    "norm3d": _norm, "norm4d": _norm,
    "rnorm3d": lambda *xs: float(1.0 / np.float64(_norm(*xs))),
    "rnorm4d": lambda *xs: float(1.0 / np.float64(_norm(*xs))),
    "sin": _np(np.sin), "cos": _np(np.cos), "tan": _np(np.tan),
    "asin": _np(np.arcsin), "acos": _np(np.arccos), "atan": _np(np.arctan),
    "atan2": _np(np.arctan2), "sinh": _np(np.sinh), "cosh": _np(np.cosh),
    "tanh": _np(np.tanh), "asinh": _np(np.arcsinh), "acosh": _np(np.arccosh),
    "atanh": _np(np.arctanh), "erf": math.erf, "erfc": math.erfc,
    "lgamma": _safe(math.lgamma, math.inf), "tgamma": _tgamma,
    "normcdf": lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0)),
    "ceil": _np(np.ceil), "floor": _np(np.floor), "round": _round, "trunc": _np(np.trunc),
    "fmod": _np(np.fmod), "remainder": _safe(math.remainder), "fdim": _fdim,
    "copysign": _np(np.copysign), "fabs": _np(np.abs), "fdivide": _np(np.divide),
    "fma": lambda x, y, z: float(np.float64(x) * y + z) if not all(
        map(math.isfinite, (x, y, z))) else _fma_exact(x, y, z),
    "fmin": _np(np.fmin), "fmax": _np(np.fmax),
}  # fmt: skip


def _fma_exact(x: float, y: float, z: float) -> float:
    from fractions import Fraction

    return float(Fraction(x) * Fraction(y) + Fraction(z))


def call(name: str, args: list[np.generic], dtype: np.dtype[np.generic]) -> np.generic:
    """The builtin `name` applied to scalars of `dtype`, rounded to `dtype`."""
    if name == "nextafter":
        return np.nextafter(dtype.type(args[0]), dtype.type(args[1]))
    with np.errstate(all="ignore"):
        return dtype.type(MATH[name](*(float(a) for a in args)))
