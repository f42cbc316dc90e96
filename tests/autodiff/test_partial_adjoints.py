"""Gradients where an adjoint or a previous version covers only part of an output
(issues 43 and 50), in float64 against central differences on every CPU target.

- a zero (None) cotangent for an output that later statements read over part of it:
  `vjp(A, grad_outputs=(None, G))` of `X(i) = A(i); Y(i) = X(i) where i in 0:N - 1`;
  its accumulator is read over the whole output, so it is zero where nothing wrote;
- a `max=` / `min=` update whose previous version was written over part of the
  output (`O(i) = A(i) where i in 2:N` then `O(i) max= ...`): the selection of the
  previous value reads it only where the update writes, and a recomputed
  intermediate version starts as a copy of what the earlier writes wrote.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options

TARGETS = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}


def _numeric(k: compiler.Kernel, args: list, cot: tuple, pos: int, eps: float = 1e-6):
    """d/d args[pos] of sum(cot * outputs) (None cotangents left out), central."""
    grad = np.zeros_like(args[pos])
    for e in np.ndindex(args[pos].shape):
        vals = []
        for step in (eps, -eps):
            moved = [a.copy() for a in args]
            moved[pos][e] += step
            outs = k(*moved)
            vals.append(
                sum(float(np.sum(c * o)) for c, o in zip(cot, outs, strict=True) if c is not None)
            )
        grad[e] = (vals[0] - vals[1]) / (2 * eps)
    return grad


def _check(source: str, shapes: list, keep: tuple[int, ...] | None, target: str) -> None:
    """vjp with the cotangents of the outputs in `keep` (None: all) equals central
    differences, and the dense-zero call."""
    k = compiler.define(source, cache=False, **TARGETS[target])
    rng = np.random.default_rng(51)
    args = [rng.standard_normal(s) for s in shapes]
    outs = k(*args)
    cot = tuple(
        rng.standard_normal(np.shape(o)) if keep is None or i in keep else None
        for i, o in enumerate(outs)
    )
    got = k.vjp(*args, grad_outputs=cot)
    dense = k.vjp(
        *args,
        grad_outputs=tuple(
            np.zeros(np.shape(o)) if c is None else c for c, o in zip(cot, outs, strict=True)
        ),
    )
    for pos, g in enumerate(got):
        want = _numeric(k, args, cot, pos)
        g = np.zeros_like(want) if g is None else g
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)
        d = np.zeros_like(want) if dense[pos] is None else dense[pos]
        np.testing.assert_allclose(g, d, rtol=1e-12, atol=1e-12)


ZEROS = {
    "read of part": (
        "def f(double(N) A) -> (X, Y) {\n    X(i) = A(i)\n    Y(i) = X(i) where i in 0:N - 1\n}",
        [(4,)],
    ),
    "shifted read": (
        "def f(double(N) A) -> (X, Y) {\n"
        "    X(i) = A(i) * A(i)\n    Y(i) = X(i + 1) * A(i) where i in 0:N - 1\n}",
        [(5,)],
    ),
    "three outputs": (
        "def f(double(N) A, double(N) B) -> (X, Y, Z) {\n"
        "    X(i) = A(i) * B(i)\n"
        "    Y(i) = X(i + 1) + B(i) where i in 0:N - 2\n"
        "    Z +=! Y(i) * X(i) where i in 0:N - 2\n}",
        [(5,), (5,)],
    ),
    "update then read": (
        "def f(double(N) A) -> (X, Y) {\n"
        "    X(i) = A(i)\n    X(i) += A(i) * A(i) where i in 1:N\n"
        "    Y(i) +=! X(i + 1 + k) where i in 0:N - 2, k in 0:2\n}",
        [(5,)],
    ),
}


def _keeps(n: int) -> list[tuple[int, ...]]:
    return [tuple(j for j in range(n) if j != i) for i in range(n)]


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(ZEROS))
def test_each_zero_cotangent(case: str, target: str) -> None:
    source, shapes = ZEROS[case]
    n = len(compiler.define(source, target="interp").ranged.checked.outputs)
    for keep in _keeps(n):
        _check(source, shapes, keep, target)


def test_the_accumulator_is_zero_where_nothing_wrote() -> None:
    k = compiler.define(ZEROS["read of part"][0], target="interp", cache=False)
    (got,) = k.vjp(np.arange(4.0), grad_outputs=(None, np.array([1.0, 10.0, 100.0])))
    np.testing.assert_array_equal(got, [1.0, 10.0, 100.0, 0.0])


EXTREMA = {
    "max= over the part written": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i) where i in 2:N\n    O(i) max= A(i) * 2.0 where i in 2:N\n}",
        [(5,)],
    ),
    "min= over part of the part": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i) where i in 1:N\n    O(i) min= A(i - 1) * 0.5 where i in 2:N\n}",
        [(6,)],
    ),
    "max= reduction over part": (
        "def f(double(N, M) B) -> (O) {\n"
        "    O(i) = B(i, 0) * 0.5\n    O(i) max= B(i, j) where i in 1:N, j in 0:M\n}",
        [(4, 3)],
    ),
    "min= reduction, partial first write": (
        "def f(double(N, M) B) -> (O) {\n"
        "    O(i) = B(i, 1) where i in 1:N\n    O(i) min= B(i, j) * 1.5 where i in 1:N, j in 0:M\n}",
        [(4, 3)],
    ),
    "two max= updates over a partial write": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i) where i in 1:N\n"
        "    O(i) max= A(i - 1) where i in 1:N\n"
        "    O(i) max= A(i) * 3.0 where i in 1:N\n}",
        [(5,)],
    ),
    "min= then += over a partial write": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i) where i in 1:N\n"
        "    O(i) min= A(i) * A(i - 1) where i in 2:N\n"
        "    O(i) += O(i) * 2.0 where i in 1:N\n}",
        [(5,)],
    ),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(EXTREMA))
def test_extremum_update_over_part(case: str, target: str) -> None:
    source, shapes = EXTREMA[case]
    _check(source, shapes, None, target)


def test_extremum_update_over_part_by_hand() -> None:
    k = compiler.define(EXTREMA["max= over the part written"][0], target="interp", cache=False)
    a = np.array([3.0, -1.0, 1.0, -2.0, 0.5])
    g = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    (got,) = k.vjp(a, grad_outputs=(g,))
    # O(i) = max(A(i), 2 A(i)) for i >= 2: 2 A(i) where A(i) > 0, else A(i)
    np.testing.assert_allclose(got, [0.0, 0.0, 8.0, 8.0, 32.0])


@pytest.mark.parametrize("target", ["interp", "llvm-1"])
@pytest.mark.parametrize("case", sorted(ZEROS))
def test_hvp_through_a_partial_read(case: str, target: str) -> None:
    """Forward over reverse: the gradient's accumulator `X_grad_acc` gets a partial sum,
    then the dense cotangent over the whole shape, whose tangent is zero; the tangent
    of the accumulator still covers the whole shape. Against central differences of
    the vjp."""
    source, shapes = ZEROS[case]
    k = compiler.define(source, cache=False, **TARGETS[target])
    rng = np.random.default_rng(52)
    args = [rng.standard_normal(s) for s in shapes]
    vecs = [rng.standard_normal(s) for s in shapes]
    cot = tuple(rng.standard_normal(np.shape(o)) for o in k(*args))
    got = k.hvp(*args, vectors=vecs, grad_outputs=cot)
    eps = 1e-5
    up = k.vjp(*[a + eps * v for a, v in zip(args, vecs, strict=True)], grad_outputs=cot)
    down = k.vjp(*[a - eps * v for a, v in zip(args, vecs, strict=True)], grad_outputs=cot)
    for g, u, d in zip(got, up, down, strict=True):
        np.testing.assert_allclose(g, (u - d) / (2 * eps), rtol=1e-6, atol=1e-8)
