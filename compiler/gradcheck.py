"""Finite-difference checks of gradients, in float64.

    gradcheck(kernel, *arrays, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0) -> None
    as_float64(kernel) -> Kernel
    numeric_jvp(kernel, arrays, tangents, eps=1e-6) -> tuple of arrays

`gradcheck` does what `torch.autograd.gradcheck` does for a vjp: the kernel is
rebuilt with every float type promoted to float64 (`float(N) A` -> `double(N) A`,
`float(x)` casts too), random output gradients `c` are drawn, and for every element
`x_e` of every float input the analytic `vjp(c)[e]` is compared with the central
difference `(<c, f(x + eps e)> - <c, f(x - eps e)>) / (2 eps)`. A mismatch
(`|a - n| > atol + rtol |n|`) raises `GradcheckError` naming the input, the worst
element and both values. A user-supplied `backward=` def is checked the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.frontend import ast
from compiler.frontend.ast import Cast, ScalarType
from compiler.frontend.diagnostics import TCError
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_module
from compiler.frontend.visit import Mutator

if TYPE_CHECKING:
    from compiler.kernel import Kernel


class GradcheckError(TCError):
    """Analytic and numeric gradients disagree; the message is the report."""


def gradcheck(
    kernel: Kernel,
    *arrays: Any,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    seed: int = 0,
) -> None:
    """Raise GradcheckError unless the kernel's vjp matches finite differences."""
    k64 = as_float64(kernel)
    inputs = [_to64(a, t.dtype) for a, t in zip(arrays, k64.ranged.checked.inputs, strict=True)]
    outputs = k64(*inputs)
    rng = np.random.default_rng(seed)
    cot = tuple(
        rng.standard_normal(np.shape(o)).astype(o.dtype)
        if np.issubdtype(o.dtype, np.floating)
        else np.zeros(np.shape(o), dtype=o.dtype)  # no gradient flows through integers
        for o in outputs
    )
    analytic = k64.vjp(*inputs, grad_outputs=cot)
    for pos, info in enumerate(k64.ranged.checked.inputs):
        if not info.dtype.is_float:
            continue
        got = analytic[pos]
        want = _numeric_grad(k64, inputs, cot, pos, eps)
        got = np.zeros_like(want) if got is None else np.asarray(got, dtype=np.float64)
        _compare(kernel.name, info.name, got, want, atol, rtol)


def _numeric_grad(
    k64: Kernel, inputs: list[np.ndarray], cot: Sequence[np.ndarray], pos: int, eps: float
) -> np.ndarray:
    x = inputs[pos]
    grad = np.zeros(x.shape, dtype=np.float64)
    for e in np.ndindex(*x.shape):
        values = []
        for sign in (1.0, -1.0):
            moved = x.copy()
            moved[e] += sign * eps
            args = [*inputs[:pos], moved, *inputs[pos + 1 :]]
            outs = k64(*args)
            values.append(sum(float(np.sum(c * o)) for c, o in zip(cot, outs, strict=True)))
        grad[e] = (values[0] - values[1]) / (2 * eps)
    return grad


def _compare(
    kernel: str, name: str, got: np.ndarray, want: np.ndarray, atol: float, rtol: float
) -> None:
    error = np.abs(got - want) - (atol + rtol * np.abs(want))
    error = np.where(np.isnan(got) != np.isnan(want), np.inf, error)
    if error.size == 0 or not (error > 0).any():
        return
    worst = np.unravel_index(int(np.argmax(error)), error.shape)
    bad = int((error > 0).sum())
    raise GradcheckError(
        f"gradcheck failed for input '{name}' of def '{kernel}': {bad} of {error.size} "
        f"element(s) differ; worst at index {tuple(int(i) for i in worst)}: analytic "
        f"{float(got[worst])!r}, numeric {float(want[worst])!r} (atol={atol}, rtol={rtol})"
    )


def numeric_jvp(
    kernel: Kernel, arrays: Sequence[np.ndarray], tangents: Sequence[np.ndarray], eps: float = 1e-6
) -> tuple[np.ndarray, ...]:
    """Central-difference directional derivative of every output along `tangents`."""
    plus = kernel(*[a + eps * t for a, t in zip(arrays, tangents, strict=True)])
    minus = kernel(*[a - eps * t for a, t in zip(arrays, tangents, strict=True)])
    return tuple((p - m) / (2 * eps) for p, m in zip(plus, minus, strict=True))


def as_float64(kernel: Kernel) -> Kernel:
    """The same kernel (and backward def) with every float type made float64."""
    from compiler.kernel import Kernel

    module = parse(kernel.text)
    text = print_module(ast.Module(tuple(_promote_def(d) for d in module.defs)))
    return Kernel(text, kernel.name, target=kernel.target, backward=kernel.backward)


def _promote_def(d: ast.Def) -> ast.Def:
    def param(p: ast.Param) -> ast.Param:
        return dataclasses.replace(p, dtype=_f64(p.dtype)) if p.dtype is not None else p

    def expr(e: ast.Expr) -> ast.Expr:
        return _promote_casts(e)

    stmts = tuple(
        dataclasses.replace(
            s,
            rhs=expr(s.rhs),
            where=tuple(
                dataclasses.replace(c, value=expr(c.value)) if isinstance(c, ast.Let) else c
                for c in s.where
            ),
        )
        for s in d.stmts
    )
    return dataclasses.replace(
        d,
        params=tuple(param(p) for p in d.params),
        outputs=tuple(param(p) for p in d.outputs),
        stmts=stmts,
    )


class _Float64(Mutator):
    """Float casts and float literals -> float64, everywhere in an expression."""

    def mutate_Const(self, e: ast.Const) -> ast.Expr:
        return dataclasses.replace(e, dtype=ScalarType.FLOAT64) if e.dtype.is_float else e

    def mutate_Cast(self, e: Cast) -> ast.Expr:
        inner = self.generic(e)
        return dataclasses.replace(inner, dtype=_f64(e.dtype)) if e.dtype.is_float else inner


def _promote_casts(e: ast.Expr) -> ast.Expr:
    return _Float64().expr(e)


def _f64(t: ScalarType) -> ScalarType:
    return ScalarType.FLOAT64 if t.is_float else t


def _to64(a: Any, dtype: ScalarType) -> Any:
    if dtype.is_float:
        return np.asarray(a, dtype=np.float64).copy()
    return a


__all__ = ["GradcheckError", "as_float64", "gradcheck", "numeric_jvp"]
