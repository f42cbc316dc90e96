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

The report says when the check is meaningless rather than the gradient wrong: a NaN
in either gradient (the def is undefined at these inputs, e.g. `rsqrt` of a negative
number), or a kink at the worst element -- the one-sided differences
`(f(x + eps) - f(x)) / eps` and `(f(x) - f(x - eps)) / eps` disagree, which is what a
tie in a `max=`/`min=` reduction or `min`/`max`/`fabs` at equal values gives.
`progress(done, total)`, when given, is called after each element's differences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.diagnostics import TCError
from compiler.frontend import ast
from compiler.frontend.ast import Cast, ScalarType
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_module, print_stmt
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
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Check the kernel's gradient against central finite differences, in float64.

    The def is promoted to float64 (`as_float64`), a random cotangent is drawn per float
    output, and `vjp` is compared element by element with the central difference of
    `<cotangent, f(x)>` at every element of every float input.

    Args:
        kernel (Kernel): a kernel from `compiler.define` (any target; its `backward=` def
            is checked when it has one).
        *arrays: the point to check at, one array per input.
        eps (float): the finite-difference step.
        atol (float): absolute tolerance.
        rtol (float): relative tolerance.
        seed (int): the cotangents' seed.
        progress (Callable[[int, int], None] | None): called with (elements done, total).

    Raises:
        GradcheckError: the gradients disagree; the report names the input and the worst
            element, and says when a NaN or a tie (`max=`, `fmax` of equal values) makes
            the check meaningless rather than the gradient wrong.

    Example:
        ```python
        k = compiler.define(open("examples/conv2d.tc").read())
        compiler.gradcheck(k, I, W1, B)  # returns None, or raises GradcheckError
        ```
    """
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
    floats = [p for p, t in enumerate(k64.ranged.checked.inputs) if t.dtype.is_float]
    total = sum(int(np.size(inputs[p])) for p in floats)
    done = 0
    for pos in floats:
        info = k64.ranged.checked.inputs[pos]
        got = analytic[pos]
        want = _numeric_grad(k64, inputs, cot, pos, eps, progress, done, total)
        done += int(np.size(inputs[pos]))
        got = np.zeros_like(want) if got is None else np.asarray(got, dtype=np.float64)
        _compare(kernel.name, info.name, got, want, atol, rtol, (k64, inputs, cot, pos, eps))


def _objective(k64: Kernel, args: Sequence[np.ndarray], cot: Sequence[np.ndarray]) -> float:
    outs = k64(*args)
    return sum(float(np.sum(c * o)) for c, o in zip(cot, outs, strict=True))


def _moved(inputs: list[np.ndarray], pos: int, e: tuple[int, ...], step: float) -> list[Any]:
    moved = inputs[pos].copy()
    moved[e] += step
    return [*inputs[:pos], moved, *inputs[pos + 1 :]]


def _numeric_grad(
    k64: Kernel,
    inputs: list[np.ndarray],
    cot: Sequence[np.ndarray],
    pos: int,
    eps: float,
    progress: Callable[[int, int], None] | None = None,
    done: int = 0,
    total: int = 0,
) -> np.ndarray:
    x = inputs[pos]
    grad = np.zeros(x.shape, dtype=np.float64)
    for k, e in enumerate(np.ndindex(*x.shape)):
        plus = _objective(k64, _moved(inputs, pos, e, eps), cot)
        minus = _objective(k64, _moved(inputs, pos, e, -eps), cot)
        grad[e] = (plus - minus) / (2 * eps)
        if progress is not None:
            progress(done + k + 1, total)
    return grad


# what is needed to look at one element again: (k64, inputs, cot, pos, eps)
_Point = tuple[Any, list[np.ndarray], Sequence[np.ndarray], int, float]


def _compare(
    kernel: str,
    name: str,
    got: np.ndarray,
    want: np.ndarray,
    atol: float,
    rtol: float,
    point: _Point | None = None,
) -> None:
    error = np.abs(got - want) - (atol + rtol * np.abs(want))
    error = np.where(np.isnan(got) != np.isnan(want), np.inf, error)
    nans = int((np.isnan(got) | np.isnan(want)).sum())
    if error.size == 0 or not ((error > 0).any() or nans):
        return
    if nans:
        error = np.where(np.isnan(got) | np.isnan(want), np.inf, np.nan_to_num(error))
    worst = np.unravel_index(int(np.argmax(error)), error.shape)
    index = tuple(int(i) for i in worst)
    bad = int((error > 0).sum())
    report = (
        f"gradcheck failed for input '{name}' of def '{kernel}': {bad} of {error.size} "
        f"element(s) differ; worst at index {index}: analytic "
        f"{float(got[worst])!r}, numeric {float(want[worst])!r} (atol={atol}, rtol={rtol})"
    )
    note = _meaningless(got, want, point, index, atol, rtol)
    raise GradcheckError(report + (f"\n{note}" if note else ""))


def _meaningless(
    got: np.ndarray,
    want: np.ndarray,
    point: _Point | None,
    index: tuple[int, ...],
    atol: float,
    rtol: float,
) -> str:
    """Why the check says nothing at these inputs ('' when it does)."""
    if np.isnan(got).any() or np.isnan(want).any():
        which = [w for w, a in (("analytic", got), ("numeric", want)) if np.isnan(a).any()]
        has = "gradients have" if len(which) == 2 else "gradient has"
        return (
            f"note: the {' and '.join(which)} {has} NaN elements: the def is undefined at these "
            "inputs (e.g. sqrt/log/rsqrt of a negative number, 0/0), so the check is "
            "meaningless here, not a wrong gradient; choose inputs in the def's domain "
            "(tcc gradcheck --positive NAME, --range NAME=lo:hi)"
        )
    if point is None:
        return ""
    k64, inputs, cot, pos, eps = point
    tied = tied_reductions(k64, inputs)
    if tied:
        return (
            f"note: {'; '.join(tied)}: on a tie every tied element gets the full gradient "
            "(tcc's rule), which finite differences do not see, so the check is meaningless "
            "at these inputs, not a wrong gradient; retry with other inputs (--seed, "
            "--range NAME=lo:hi)"
        )
    here = _objective(k64, inputs, cot)
    right = (_objective(k64, _moved(inputs, pos, index, eps), cot) - here) / eps
    left = (here - _objective(k64, _moved(inputs, pos, index, -eps), cot)) / eps
    if abs(right - left) > atol + rtol * max(abs(right), abs(left)):
        return (
            f"note: the def is not differentiable at this point: the one-sided "
            f"differences disagree (right {right!r}, left {left!r}), as at a tie in a "
            "max=/min= reduction or min/max/fabs of equal values; the check is "
            "meaningless here, not a wrong gradient; retry with other inputs (--seed, "
            "--range NAME=lo:hi)"
        )
    return ""


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


def tied_reductions(kernel: Kernel, arrays: Sequence[Any]) -> list[str]:
    """For each `max=`/`min=` statement of the def, a sentence when some output element
    is attained by more than one reduction instance at these inputs (a tie). Counted by
    the reference evaluator: a copy of the def with `tie_k(lhs) +=! (rhs == lhs) ? 1 : 0`
    after each such statement."""
    from compiler.kernel import Kernel

    definition = parse(kernel.text).get(kernel.name)
    stmts: list[ast.Stmt] = []
    counters: list[tuple[str, ast.Stmt]] = []
    taken = {p.name for p in (*definition.params, *definition.outputs)}
    for stmt in definition.stmts:
        stmts.append(stmt)
        if stmt.op.base not in (ast.AssignOp.MIN, ast.AssignOp.MAX):
            continue
        name = _fresh_name(f"tie{len(counters)}", taken)
        lhs = ast.Access(name, stmt.lhs.args)
        equal = ast.Compare(ast.CmpOp.EQ, stmt.rhs, stmt.lhs)
        one, zero = ast.Const(1, ScalarType.INT32), ast.Const(0, ScalarType.INT32)
        where = tuple(c for c in stmt.where if not isinstance(c, ast.Exists))
        counter = ast.Stmt(lhs, ast.AssignOp.PLUS_INIT, ast.Select(equal, one, zero), where)
        stmts.append(counter)
        counters.append((name, stmt))
    if not counters:
        return []
    outputs = definition.outputs + tuple(ast.Param(n, None, None) for n, _ in counters)
    text = print_module(
        ast.Module((dataclasses.replace(definition, outputs=outputs, stmts=tuple(stmts)),))
    )
    try:
        counted = Kernel(text, kernel.name, target="interp")(*arrays)
    except TCError:
        return []  # the counting copy does not check: say nothing rather than guess
    found = []
    for (_name, stmt), counts in zip(counters, counted[len(definition.outputs) :], strict=True):
        ties = int(np.sum(np.asarray(counts) > 1))
        if ties:
            found.append(
                f"`{print_stmt(stmt).strip().split(' where ')[0]}` has ties at these inputs "
                f"({ties} of {np.size(counts)} element(s) reached by more than one term)"
            )
    return found


def _fresh_name(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


__all__ = ["GradcheckError", "as_float64", "gradcheck", "numeric_jvp", "tied_reductions"]
