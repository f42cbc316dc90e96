"""Every derivative rule of TC, in tables apart from the traversal.

    vjp(op, args, g) -> one adjoint per argument of `op(*args)`, given its adjoint g
    jvp(op, args, ts) -> the tangent of `op(*args)`, given one tangent per argument
    ARITHMETIC[op](args, g)    + - * / % and unary -, and casts
    PARTIALS[fn](args)         one partial derivative per argument of builtin `fn`

`compiler.autodiff.reverse` walks an expression and asks `vjp` what flows to each
operand; it knows no derivative itself. `None` is a symbolic zero everywhere: a
partial that is None, or a product with one, contributes nothing (`algebra`).
Builtins' adjoints are `g * partial`; arithmetic states its adjoints directly, in the
form hand-written TC would use (`g / b`, not `g * (1 / b)`).

    exp(x)      -> (exp(x),)
    pow(a, b)   -> (b * pow(a, b - 1), a == 0 ? 0 : pow(a, b) * log(a))
    fmax(a, b)  -> (a >= b ? 1 : 0, a >= b ? 0 : 1)      # the selected argument

Conventions (as PyTorch where it has the function):
- min / max / fmin / fmax send the gradient to the selected argument; on a tie the
  first argument is selected (it is what `a >= b ? a : b` returns);
- fabs'(0) = 0, fdim's kink goes to the zero side; floor, ceil, round, trunc, logb
  and integer-valued results have zero derivative;
- functions whose derivative needs a function TC lacks (lgamma and tgamma need
  digamma) are in `UNSUPPORTED` with the reason; `reverse` turns that into a TCError
  with the call's span.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from compiler.autodiff.algebra import MaybeExpr, add, const, div, indicator, mul, neg, square, sub
from compiler.frontend.ast import Binary, BinOp, Call, CmpOp, Compare, Expr, Select, UnaryOp

Rule = Callable[[tuple[Expr, ...]], tuple[MaybeExpr, ...]]
VjpRule = Callable[[tuple[Expr, ...], Expr], tuple[MaybeExpr, ...]]

CAST = "cast"
"""The key of a cast's rule (`float64(x)`): not a builtin name."""

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _call(fn: str, *args: Expr) -> Expr:
    return Call(fn, tuple(args))


def _cmp(op: CmpOp, a: Expr, b: Expr) -> Expr:
    return Compare(op, a, b)


def _one_minus(a: Expr) -> Expr:
    return Binary(BinOp.SUB, const(1.0), a)


def _recip(a: Expr) -> Expr:
    return Binary(BinOp.DIV, const(1.0), a)


def _unary(f: Callable[[Expr], MaybeExpr]) -> Rule:
    return lambda args: (f(args[0]),)


def _sign(x: Expr) -> Expr:
    """sign(x) with sign(0) = 0 (PyTorch's abs'(0))."""
    return Select(
        _cmp(CmpOp.GT, x, const(0)),
        const(1),
        Select(_cmp(CmpOp.LT, x, const(0)), const(-1), const(0)),
    )


def _bessel_second(x: Expr, f0: str, f1: str) -> Expr:
    """d/dx f1(x) = f0(x) - f1(x) / x, with the limit 1/2 at x = 0 (j1, i1)."""
    return Select(
        _cmp(CmpOp.EQ, x, const(0)), const(0.5), sub(_call(f0, x), div(_call(f1, x), x)) or const(0)
    )


def _select_first(args: tuple[Expr, ...], op: CmpOp) -> tuple[MaybeExpr, ...]:
    a, b = args
    first = _cmp(op, a, b)
    return indicator(first), Select(first, const(0), const(1))


def _pow(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    da = mul(b, _call("pow", a, sub(b, const(1)) or const(0)))
    db = Select(
        _cmp(CmpOp.EQ, a, const(0)), const(0), mul(_call("pow", a, b), _call("log", a)) or const(0)
    )
    return da, db


def _atan2(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    r2 = add(square(a), square(b)) or const(0)
    return div(b, r2), neg(div(a, r2))


def _norm(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    fn = {2: "hypot", 3: "norm3d", 4: "norm4d"}[len(args)]
    n = _call(fn, *args)
    return tuple(div(a, n) for a in args)


def _rnorm(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    fn = {2: "rhypot", 3: "rnorm3d", 4: "rnorm4d"}[len(args)]
    r = _call(fn, *args)
    r3 = mul(mul(r, r), r)
    return tuple(neg(mul(a, r3)) for a in args)


def _fmod(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    return const(1), neg(_call("trunc", Binary(BinOp.DIV, a, b)))


def _remainder(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    return const(1), neg(_call("round", Binary(BinOp.DIV, a, b)))


def _fdim(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    above = _cmp(CmpOp.GT, a, b)
    return indicator(above), Select(above, const(-1), const(0))


def _copysign(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    return mul(_call("copysign", const(1.0), a), _call("copysign", const(1.0), b)), None


def _fma(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b, _ = args
    return b, a, const(1)


def _fdivide(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    a, b = args
    return _recip(b), neg(div(a, square(b)))


def _zero(args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...]:
    return tuple(None for _ in args)


PARTIALS: dict[str, Rule] = {
    # elementary
    "exp": _unary(lambda x: _call("exp", x)),
    "exp2": _unary(lambda x: mul(_call("exp2", x), const(_LN2))),
    "exp10": _unary(lambda x: mul(_call("exp10", x), const(_LN10))),
    "expm1": _unary(lambda x: _call("exp", x)),
    "log": _unary(_recip),
    "log2": _unary(lambda x: _recip(mul(x, const(_LN2)) or const(0))),
    "log10": _unary(lambda x: _recip(mul(x, const(_LN10)) or const(0))),
    "log1p": _unary(lambda x: _recip(add(const(1.0), x) or const(0))),
    "sqrt": _unary(lambda x: mul(const(0.5), _call("rsqrt", x))),
    "rsqrt": _unary(lambda x: mul(const(-0.5), div(_call("rsqrt", x), x))),
    "cbrt": _unary(lambda x: _recip(mul(const(3.0), square(_call("cbrt", x))) or const(0))),
    "rcbrt": _unary(lambda x: neg(div(_call("rcbrt", x), mul(const(3.0), x) or const(0)))),
    "pow": _pow,
    "hypot": _norm,
    "norm3d": _norm,
    "norm4d": _norm,
    "rhypot": _rnorm,
    "rnorm3d": _rnorm,
    "rnorm4d": _rnorm,
    # trigonometric / hyperbolic
    "sin": _unary(lambda x: _call("cos", x)),
    "cos": _unary(lambda x: neg(_call("sin", x))),
    "tan": _unary(lambda x: add(const(1.0), square(_call("tan", x)))),
    "asin": _unary(lambda x: _call("rsqrt", _one_minus(square(x)))),
    "acos": _unary(lambda x: neg(_call("rsqrt", _one_minus(square(x))))),
    "atan": _unary(lambda x: _recip(add(const(1.0), square(x)) or const(0))),
    "atan2": _atan2,
    "sinh": _unary(lambda x: _call("cosh", x)),
    "cosh": _unary(lambda x: _call("sinh", x)),
    "tanh": _unary(lambda x: _one_minus(square(_call("tanh", x)))),
    "asinh": _unary(lambda x: _call("rsqrt", add(square(x), const(1.0)) or const(0))),
    "acosh": _unary(lambda x: _call("rsqrt", sub(square(x), const(1.0)) or const(0))),
    "atanh": _unary(lambda x: _recip(_one_minus(square(x)))),
    "sinpi": _unary(lambda x: mul(const(math.pi), _call("cospi", x))),
    "cospi": _unary(lambda x: mul(const(-math.pi), _call("sinpi", x))),
    # special functions
    "erf": _unary(lambda x: mul(const(_TWO_OVER_SQRT_PI), _call("exp", neg(square(x)) or x))),
    "erfc": _unary(lambda x: mul(const(-_TWO_OVER_SQRT_PI), _call("exp", neg(square(x)) or x))),
    "erfinv": _unary(
        lambda x: mul(const(_SQRT_PI_OVER_2), _call("exp", square(_call("erfinv", x))))
    ),
    "erfcinv": _unary(
        lambda x: mul(const(-_SQRT_PI_OVER_2), _call("exp", square(_call("erfcinv", x))))
    ),
    "erfcx": _unary(
        lambda x: sub(mul(mul(const(2.0), x), _call("erfcx", x)), const(_TWO_OVER_SQRT_PI))
    ),
    "normcdf": _unary(
        lambda x: div(_call("exp", mul(const(-0.5), square(x)) or x), const(_SQRT_2PI))
    ),
    "normcdfinv": _unary(
        lambda x: mul(
            const(_SQRT_2PI), _call("exp", mul(const(0.5), square(_call("normcdfinv", x))) or x)
        )
    ),
    "j0": _unary(lambda x: neg(_call("j1", x))),
    "j1": _unary(lambda x: _bessel_second(x, "j0", "j1")),
    "y0": _unary(lambda x: neg(_call("y1", x))),
    "y1": _unary(lambda x: sub(_call("y0", x), div(_call("y1", x), x))),
    "cyl_bessel_i0": _unary(lambda x: _call("cyl_bessel_i1", x)),
    "cyl_bessel_i1": _unary(lambda x: _bessel_second(x, "cyl_bessel_i0", "cyl_bessel_i1")),
    # piecewise constant: zero almost everywhere
    "ceil": _zero,
    "floor": _zero,
    "round": _zero,
    "trunc": _zero,
    "logb": _zero,
    # remainders, signs, fused
    "fmod": _fmod,
    "remainder": _remainder,
    "fdim": _fdim,
    "copysign": _copysign,
    "nextafter": lambda args: (const(1), None),
    "fabs": _unary(_sign),
    "fma": _fma,
    "fdivide": _fdivide,
    # min / max: the selected argument (ties: the first)
    "fmin": lambda args: _select_first(args, CmpOp.LE),
    "fmax": lambda args: _select_first(args, CmpOp.GE),
    "min": lambda args: _select_first(args, CmpOp.LE),
    "max": lambda args: _select_first(args, CmpOp.GE),
}

UNSUPPORTED: dict[str, str] = {
    "lgamma": "its derivative is digamma, which TC has no builtin for",
    "tgamma": "its derivative needs digamma, which TC has no builtin for",
}
"""Builtins that cannot be differentiated exactly with TC builtins, and why."""


def _mod(args: tuple[Expr, ...], g: Expr) -> tuple[MaybeExpr, ...]:
    a, b = args
    return g, neg(mul(g, _call("floor", Binary(BinOp.DIV, a, b))))


ARITHMETIC: dict[BinOp | UnaryOp | str, VjpRule] = {
    # d(a + b)/da = 1, d(a + b)/db = 1
    BinOp.ADD: lambda args, g: (g, g),
    # d(a - b)/da = 1, d(a - b)/db = -1
    BinOp.SUB: lambda args, g: (g, neg(g)),
    # d(a * b)/da = b, d(a * b)/db = a          (a zero factor: no contribution)
    BinOp.MUL: lambda args, g: (mul(g, args[1]), mul(g, args[0])),
    # d(a / b)/da = 1 / b, d(a / b)/db = -a / b^2
    BinOp.DIV: lambda args, g: (div(g, args[1]), neg(div(mul(g, args[0]), square(args[1])))),
    # float a % b = a - b * floor(a / b): d/da = 1, d/db = -floor(a / b)
    BinOp.MOD: _mod,
    # d(-a)/da = -1
    UnaryOp.NEG: lambda args, g: (neg(g),),
    # d(T(a))/da = 1: the adjoint flows through a conversion unchanged
    CAST: lambda args, g: (g,),
}
"""Arithmetic: what flows to each operand of `a op b` (or `op a`) given its adjoint g.
(`!` and the comparisons are bool-valued: nothing flows through them.)"""


def partials(fn: str, args: tuple[Expr, ...]) -> tuple[MaybeExpr, ...] | None:
    """One partial derivative per argument of `fn(*args)`; None if `fn` has no rule."""
    rule = PARTIALS.get(fn)
    return None if rule is None else rule(args)


def vjp(op: BinOp | UnaryOp | str, args: tuple[Expr, ...], g: Expr) -> tuple[MaybeExpr, ...] | None:
    """The adjoint of every argument of `op(*args)` whose adjoint is `g`: arithmetic
    (`op` a BinOp, a UnaryOp or CAST) or a builtin (`op` its name). None: no rule
    (`UNSUPPORTED` says why for the builtins that have none)."""
    rule = ARITHMETIC.get(op)
    if rule is not None:
        return rule(args, g)
    parts = partials(op, args) if isinstance(op, str) else None
    return None if parts is None else tuple(mul(g, p) for p in parts)


def jvp(
    op: BinOp | UnaryOp | str, args: tuple[Expr, ...], tangents: tuple[MaybeExpr, ...]
) -> MaybeExpr:
    """The tangent of `op(*args)` given one tangent per argument (None: zero), from
    the same rules as `vjp`: every rule is linear in its adjoint, so the k-th adjoint
    with the k-th tangent in place of the adjoint is `partial_k * tangent_k`; the
    tangent is their sum. None: a zero tangent; `NO_RULE`: `op` has no rule."""
    total: MaybeExpr = None
    for k, t in enumerate(tangents):
        if t is None:
            continue
        parts = vjp(op, args, t)
        if parts is None:
            return NO_RULE
        total = add(total, parts[k])
    return total


NO_RULE = Call("__no_rule__", ())
"""What `jvp` returns for an operator without a rule (a sentinel, never emitted)."""
