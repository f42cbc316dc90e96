"""The builtin functions TC accepts, with their arities.

TC forwards these to CUDA's math library; the list is CUDA's single-argument and
multi-argument float functions as TC's semantic checker knew them, plus `min` and
`max`, which TC spells as keywords. Derivative rules live in `compiler.autodiff.rules`.
"""

from __future__ import annotations

from compiler.diagnostics import close_names

ARITY: dict[str, int] = {
    # elementary
    "exp": 1, "exp2": 1, "exp10": 1, "expm1": 1,
    "log": 1, "log2": 1, "log10": 1, "log1p": 1, "logb": 1,
    "sqrt": 1, "rsqrt": 1, "cbrt": 1, "rcbrt": 1,
    "pow": 2, "hypot": 2, "rhypot": 2,
    "norm3d": 3, "norm4d": 4, "rnorm3d": 3, "rnorm4d": 4,
    # trigonometric / hyperbolic
    "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "atan2": 2,
    "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "sinpi": 1, "cospi": 1,
    # special functions
    "erf": 1, "erfc": 1, "erfinv": 1, "erfcinv": 1, "erfcx": 1,
    "lgamma": 1, "tgamma": 1, "normcdf": 1, "normcdfinv": 1,
    "j0": 1, "j1": 1, "y0": 1, "y1": 1, "cyl_bessel_i0": 1, "cyl_bessel_i1": 1,
    # rounding and remainders
    "ceil": 1, "floor": 1, "round": 1, "trunc": 1,
    "fmod": 2, "remainder": 2, "fdim": 2, "copysign": 2, "nextafter": 2,
    "fabs": 1, "fma": 3, "fdivide": 2,
    # min / max
    "fmin": 2, "fmax": 2, "min": 2, "max": 2,
}  # fmt: skip

# Functions whose result is integral-valued and whose derivative is zero almost everywhere.
PIECEWISE_CONSTANT = frozenset({"ceil", "floor", "round", "trunc"})


# Functions users expect that TC has no builtin for, and how to write them.
WRITE_INSTEAD: dict[str, str] = {
    "sigmoid": "1 / (1 + exp(-x))",
    "relu": "fmax(x, 0)",
    "abs": "fabs(x)",
    "softplus": "log1p(exp(x))",
    "ln": "log(x)",
    "square": "x * x",
    "sign": "x > 0 ? 1 : (x < 0 ? -1 : 0)",
    "clamp": "fmin(fmax(x, lo), hi)",
}


def unknown_function_hint(name: str) -> str | None:
    """For a name read like a function that is neither a tensor nor a builtin: how to
    write it, or the close builtins; None when nothing is close."""
    if name in WRITE_INSTEAD or name.lower() in WRITE_INSTEAD:
        formula = WRITE_INSTEAD.get(name, WRITE_INSTEAD.get(name.lower()))
        return f"tcc has no builtin '{name}': write `{formula}`"
    close = close_names(name, ARITY)
    if not close:
        return None
    listed = ", ".join(f"'{c}'" for c in close)
    return f"did you mean '{close[0]}'? ('{name}' is no builtin; close ones: {listed})"


def arity(name: str) -> int | None:
    """The number of arguments of builtin `name`, or None if it is not a builtin."""
    return ARITY.get(name)
