"""The fuzzer's builtin functions: their meaning (Python's math / SciPy, never tcc's),
the argument domain the generator keeps them in, and where they have kinks.

`BUILTINS[name] = Fn(impl, arity, domain, exact, kink, smooth)`:
- `domain`: per argument, "any", "pos" (the generator writes `x * x + 0.5`), "ge1"
  (`x * x + 1.5`), "unit" (`tanh(x) * 0.75`), "small" (`tanh(x) * 4`: exp-like
  growth stays finite), "two" (`tanh(x) * 0.75 + 1.0`, inside erfcinv's (0, 2)) or
  "prob" (`tanh(x) * 0.4375 + 0.5`, inside normcdfinv's (0, 1));
- `exact`: the result of exact (dyadic) arguments is exact (so exact mode may use it);
- `kink`: the distance of the arguments to a point where the function is not smooth
  (None: smooth on the domain);
- `smooth`: differentiable on the domain (False: tcc rejects its gradient, README).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scipy import special


def _signed(f: Any) -> Any:
    """A rounding function with C's sign of zero: the result keeps `x`'s sign
    (`trunc(-0.5)`, `ceil(-0.5)`, `floor(-0.0)` are -0.0, which `copysign` sees)."""
    return lambda x: math.copysign(float(f(x)), x)


def _round_away(x: float) -> float:
    """C's `round`: half away from zero (sign applied by `_signed`). Not
    `floor(|x| + 0.5)`: that sum rounds 0.49999999999999994 up to 1 (seed 150086)."""
    a = abs(x)
    whole = math.floor(a)
    return whole + 1.0 if a - whole >= 0.5 else float(whole)  # a - whole is exact


def _logb(x: float) -> float:
    """C's `logb`: the unbiased exponent of `x` (nonzero), as a float."""
    return float(math.frexp(x)[1] - 1)


def _pow2_dist(x: float) -> float:
    """The distance of |x| to the nearest power of two (where `logb` jumps)."""
    e = math.frexp(x)[1] - 1
    return min(abs(x) - 2.0**e, 2.0 ** (e + 1) - abs(x))


def _frac_dist(x: float) -> float:
    return abs(x - round(x))


def _half_dist(x: float) -> float:
    return abs(x - math.floor(x) - 0.5)


@dataclass(frozen=True)
class Fn:
    impl: Any
    arity: int
    domain: tuple
    exact: bool = False
    kink: Any = None
    smooth: bool = True


_ANY1, _POS1, _UNIT1, _SMALL1 = ("any",), ("pos",), ("unit",), ("small",)

BUILTINS: dict[str, Fn] = {
    "exp": Fn(math.exp, 1, _SMALL1),
    "exp2": Fn(lambda x: 2.0**x, 1, _SMALL1),
    "exp10": Fn(lambda x: 10.0**x, 1, ("unit",)),
    "expm1": Fn(math.expm1, 1, _SMALL1),
    "log": Fn(math.log, 1, _POS1),
    "log2": Fn(math.log2, 1, _POS1),
    "log10": Fn(math.log10, 1, _POS1),
    "log1p": Fn(math.log1p, 1, _POS1),
    "sqrt": Fn(math.sqrt, 1, _POS1),
    "rsqrt": Fn(lambda x: 1 / math.sqrt(x), 1, _POS1),
    "cbrt": Fn(math.cbrt, 1, _POS1),
    "rcbrt": Fn(lambda x: 1 / math.cbrt(x), 1, _POS1),
    "sin": Fn(math.sin, 1, _ANY1),
    "cos": Fn(math.cos, 1, _ANY1),
    "tan": Fn(math.tan, 1, _UNIT1),
    "asin": Fn(math.asin, 1, _UNIT1),
    "acos": Fn(math.acos, 1, _UNIT1),
    "atan": Fn(math.atan, 1, _ANY1),
    "sinh": Fn(math.sinh, 1, _SMALL1),
    "cosh": Fn(math.cosh, 1, _SMALL1),
    "tanh": Fn(math.tanh, 1, _ANY1),
    "asinh": Fn(math.asinh, 1, _ANY1),
    "acosh": Fn(math.acosh, 1, ("ge1",)),
    "atanh": Fn(math.atanh, 1, _UNIT1),
    "sinpi": Fn(lambda x: math.sin(math.pi * x), 1, _ANY1),
    "cospi": Fn(lambda x: math.cos(math.pi * x), 1, _ANY1),
    "erf": Fn(math.erf, 1, _ANY1),
    "erfc": Fn(math.erfc, 1, _ANY1),
    "erfinv": Fn(lambda x: float(special.erfinv(x)), 1, _UNIT1),
    "erfcx": Fn(lambda x: float(special.erfcx(x)), 1, _UNIT1),
    "normcdf": Fn(lambda x: 0.5 * math.erfc(-x / math.sqrt(2)), 1, _ANY1),
    "lgamma": Fn(math.lgamma, 1, _POS1, smooth=False),
    "j0": Fn(lambda x: float(special.j0(x)), 1, _ANY1),
    "j1": Fn(lambda x: float(special.j1(x)), 1, _ANY1),
    "cyl_bessel_i0": Fn(lambda x: float(special.i0(x)), 1, _ANY1),
    "fabs": Fn(abs, 1, _ANY1, True, lambda x: abs(x)),
    "floor": Fn(_signed(math.floor), 1, _ANY1, True, _frac_dist),
    "ceil": Fn(_signed(math.ceil), 1, _ANY1, True, _frac_dist),
    "trunc": Fn(_signed(math.trunc), 1, _ANY1, True, _frac_dist),
    "round": Fn(_signed(_round_away), 1, _ANY1, True, _half_dist),
    "pow": Fn(lambda x, y: x**y, 2, ("pos", "unit")),
    "hypot": Fn(math.hypot, 2, ("any", "any"), kink=lambda x, y: math.hypot(x, y)),
    "atan2": Fn(math.atan2, 2, ("any", "pos"), kink=lambda y, x: abs(y) if x < 0 else math.inf),
    "fmod": Fn(math.fmod, 2, ("any", "pos"), kink=lambda x, y: _frac_dist(x / y) * y),
    "fdim": Fn(lambda x, y: x - y if x > y else 0.0, 2, ("any", "any"), True, lambda x, y: x - y),
    "copysign": Fn(math.copysign, 2, ("any", "any"), True, lambda x, y: min(abs(x), abs(y))),
    "fdivide": Fn(lambda x, y: x / y, 2, ("any", "pos")),
    "fmin": Fn(min, 2, ("any", "any"), True, lambda x, y: x - y),
    "fmax": Fn(max, 2, ("any", "any"), True, lambda x, y: x - y),
    "min": Fn(min, 2, ("any", "any"), True, lambda x, y: x - y),
    "max": Fn(max, 2, ("any", "any"), True, lambda x, y: x - y),
    "fma": Fn(lambda x, y, z: x * y + z, 3, ("any", "any", "any"), True),
    "norm3d": Fn(
        lambda x, y, z: math.sqrt(x * x + y * y + z * z),
        3,
        ("any",) * 3,
        kink=lambda x, y, z: math.sqrt(x * x + y * y + z * z),
    ),  # fmt: skip
    "rnorm3d": Fn(lambda x, y, z: 1 / math.sqrt(x * x + y * y + z * z + 0.0), 3, ("pos",) * 3),
    "rhypot": Fn(lambda x, y: 1 / math.hypot(x, y), 2, ("pos", "any")),
    "norm4d": Fn(
        lambda x, y, z, w: math.sqrt(x * x + y * y + z * z + w * w),
        4,
        ("any",) * 4,
        kink=lambda x, y, z, w: math.sqrt(x * x + y * y + z * z + w * w),
    ),  # fmt: skip
    "rnorm4d": Fn(lambda *xs: 1 / math.sqrt(math.fsum(x * x for x in xs)), 4, ("pos",) * 4),
    "logb": Fn(_logb, 1, _POS1, True, _pow2_dist, smooth=False),
    "remainder": Fn(math.remainder, 2, ("any", "pos"), kink=lambda x, y: _half_dist(x / y) * y),
    "tgamma": Fn(math.gamma, 1, _POS1, smooth=False),
    "erfcinv": Fn(lambda x: float(special.erfcinv(x)), 1, ("two",)),
    "normcdfinv": Fn(lambda x: float(special.ndtri(x)), 1, ("prob",)),
    "nextafter": Fn(None, 2, ("any", "any"), True, smooth=False),  # in its type: `_nextafter`
}
EXACT = tuple(n for n, f in BUILTINS.items() if f.exact)
# discontinuous at their kinks: a forward value near one is not compared
JUMPS = frozenset(
    {"floor", "ceil", "trunc", "round", "fmod", "copysign", "atan2", "logb", "remainder"}
)
# interp only ("not supported by the native targets yet"): drawn rarely
NOT_NATIVE = frozenset({"cospi", "cyl_bessel_i0", "erfcx", "erfinv", "j0", "j1", "sinpi",
                        "erfcinv", "normcdfinv"})  # fmt: skip
# drawn in forward programs only, so that the gradient seeds of tests/fuzz/test_ci.py
# (and their known failures) keep the programs they had before these were added
FORWARD_ONLY = frozenset({"rhypot", "norm4d", "rnorm4d", "logb", "remainder", "tgamma",
                          "erfcinv", "normcdfinv", "nextafter"})  # fmt: skip


def _slope(f: Fn, xs: list[float], k: int) -> float:
    """|d f / d x_k| by a central difference in float64 (for the error scale only)."""
    h = 1e-6 * max(1.0, abs(xs[k]))
    up, down = list(xs), list(xs)
    up[k] += h
    down[k] -= h
    try:
        return abs(f.impl(*up) - f.impl(*down)) / (2 * h)
    except (ValueError, OverflowError, ZeroDivisionError):
        return abs(f.impl(*xs)) / max(abs(xs[k]), 1e-3)


def call(oracle: Any, n: Any, args: list[tuple]) -> tuple:
    """The value of builtin call `n` on evaluated arguments (see `fuzz_ir.Oracle`)."""
    from tools.fuzz_ir import Invalid

    f = BUILTINS.get(n.fn)
    if f is None:
        raise Invalid(f"unknown builtin {n.fn}")
    xs = [a[0] for a in args]
    if n.fn == "nextafter":
        return _nextafter(oracle, n, args)
    try:
        v = float(f.impl(*xs))
    except (ValueError, OverflowError, ZeroDivisionError) as e:
        raise Invalid(f"{n.fn}{tuple(xs)}: {e}") from e
    margin = math.inf
    if f.kink is not None and n.fn in JUMPS:
        margin = oracle._kink(f.kink(*xs), *args)
    elif f.kink is not None:  # continuous: a kink for gradients only
        oracle.gap = min(oracle.gap, abs(f.kink(*xs)))
    if f.exact:
        mag = max(a[1] for a in args) if n.fn != "fma" else args[0][1] * args[1][1] + args[2][1]
        # fma(x, y, z) is on the grid of x * y and of z (fuzz seed 101905: z's binary
        # places left out, a float32 sum of normal values looked exact)
        grid = (
            max(a[3] for a in args) if n.fn != "fma" else max(args[0][3] + args[1][3], args[2][3])
        )
        cnt = max(a[2] for a in args) + 1
        return oracle._combine(v, tuple(args), cnt, max(mag, abs(v)), grid, True, margin)
    mag = abs(v) + sum(_slope(f, xs, k) * a[1] for k, a in enumerate(args))
    cnt = max(a[2] for a in args) + 8  # libm / vector math: a few ulps
    return oracle._combine(v, tuple(args), cnt, mag, 0, False, margin)


def _nextafter(oracle: Any, n: Any, args: list[tuple]) -> tuple:
    """`nextafter(x, y)` in the call's type (float32 or float64): exact for exact
    arguments, on the grid of its own value; a kink where x and y come close."""
    import numpy as np

    from tools.fuzz_ir import FLOATS, _grid_of

    t = FLOATS.get(oracle.type_of(n), np.float64)
    x, y = (float(t(a[0])) for a in args)
    v = float(np.nextafter(t(x), t(y)))
    margin = oracle._kink(x - y, *args)
    mag = max(abs(v), *(a[1] for a in args))
    exact = all(a[4] and float(t(a[0])) == a[0] for a in args)
    cnt = max(a[2] for a in args) + 1
    return (v, mag, cnt, _grid_of(v), exact, min(margin, *(a[5] for a in args)), math.inf)
