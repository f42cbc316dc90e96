"""Every math builtin, compiled in float32 and float64, against NumPy/math and the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.loops import MATH_ARITY, Call, DType
from tests.codegen.kit import F32, F64, buf, func, load, out, pfor, run_both, store

X = np.array([0.3, 0.75, 1.5, 2.5, 0.05, 3.25])  # inside every domain (acosh: moved below)
Y = np.array([1.7, -0.4, 2.0, 0.5, 3.0, -1.25])
Z = np.array([0.5, 1.0, -2.0, 0.25, 1.5, 0.0])
W = np.array([1.0, 2.0, 0.5, -1.0, 0.3, 2.2])


def _m(fn: object) -> object:
    return np.vectorize(fn, otypes=[np.float64])


REFERENCE = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: 10.0**x, "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "logb": lambda x: np.floor(np.log2(np.abs(x))), "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt, "rcbrt": lambda x: 1 / np.cbrt(x),
    "pow": np.power, "hypot": np.hypot, "rhypot": lambda x, y: 1 / np.hypot(x, y),
    "norm3d": lambda *a: np.sqrt(sum(t * t for t in a)),
    "norm4d": lambda *a: np.sqrt(sum(t * t for t in a)),
    "rnorm3d": lambda *a: 1 / np.sqrt(sum(t * t for t in a)),
    "rnorm4d": lambda *a: 1 / np.sqrt(sum(t * t for t in a)),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": lambda x: np.arcsin(x / 4),
    "acos": lambda x: np.arccos(x / 4), "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": lambda x: np.arccosh(x + 1), "atanh": lambda x: np.arctanh(x / 4),
    "erf": _m(math.erf), "erfc": _m(math.erfc), "lgamma": _m(math.lgamma),
    "tgamma": _m(math.gamma), "normcdf": _m(lambda x: 0.5 * math.erfc(-x / math.sqrt(2))),
    "ceil": np.ceil, "floor": np.floor, "round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "trunc": np.trunc, "fmod": np.fmod, "remainder": _m(math.remainder),
    "fdim": lambda x, y: np.maximum(x - y, 0), "copysign": np.copysign,
    "nextafter": None, "fabs": np.abs, "fma": lambda x, y, z: x * y + z,
    "fdivide": np.divide, "fmin": np.fmin, "fmax": np.fmax,
}  # fmt: skip
# Builtins whose test input is shifted into their domain (the reference above shifts the same way).
SHIFT = {"asin": 0.25, "acos": 0.25, "atanh": 0.25}
OFFSET = {"acosh": 1.0}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", sorted(MATH_ARITY))
def test_builtin(name: str, dtype: DType) -> None:
    arity = MATH_ARITY[name]
    ins = [buf(n, dtype, "N") for n in "XYZW"[:arity]]
    args = [load(b, "i") for b in ins]
    values = [a.astype(dtype.np) for a in (X, Y, Z, W)[:arity]]
    if name in SHIFT:
        values[0] = (X * SHIFT[name]).astype(dtype.np)
    if name in OFFSET:
        values[0] = (X + OFFSET[name]).astype(dtype.np)
    f = func(
        name,
        [*ins, out("O", dtype, "N")],
        "N",
        pfor("i", 0, "N", store(out("O", dtype, "N"), ("i",), Call(name, tuple(args)))),
    )
    arrays = {b.name: a for b, a in zip(ins, values, strict=True)} | {"O": np.zeros(6, dtype.np)}
    mine, theirs = run_both(f, arrays, {"N": 6})
    if name == "nextafter":
        expected = np.nextafter(values[0], values[1])
    else:
        ref_in = [a.astype(np.float64) for a in values]
        if name in SHIFT:
            ref_in[0] = ref_in[0] / SHIFT[name]
        if name in OFFSET:
            ref_in[0] = ref_in[0] - OFFSET[name]
        expected = REFERENCE[name](*ref_in)
    tol = 2e-6 if dtype is F32 else 1e-13
    np.testing.assert_allclose(
        theirs["O"], expected, rtol=tol, atol=tol, err_msg=f"compiled {name}"
    )
    np.testing.assert_allclose(
        mine["O"], expected, rtol=tol, atol=tol, err_msg=f"interpreted {name}"
    )
    if dtype is F32:  # single precision: the compiled code calls the float32 variant
        assert theirs["O"].dtype == np.float32
