"""A read whose subscript is not affine (`A(i % c)`, `A(i * c)`) has no gradient that
tcc can state: autodiff says so with a TCError at the subscript, instead of emitting
a scatter that the checker rejects. Quasi-affine and data-dependent subscripts still
differentiate (checked against finite differences in float64)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backward import grad
from compiler.diagnostics import TCError
from compiler.gradcheck import gradcheck
from compiler.kernel import define


@pytest.mark.parametrize(
    ("source", "subscript"),
    [
        ("def f(float(N) A) -> (O) { O(i) +=! A(i % c) where i in 0:N, c in 1:N }", "i % c"),
        ("def f(float(N) A) -> (O) { O(i) +=! A(i * c) where i in 0:N, c in 0:2 }", "i * c"),
        ("def f(float(N) A, int32(N) K) -> (O) { O(i) = A(K(i) * i) where i in 0:N }", "K(i) * i"),
    ],
)
def test_non_affine_subscript_is_not_supported(source: str, subscript: str) -> None:
    with pytest.raises(TCError) as info:
        grad(source)
    diag = info.value.diagnostics[0]
    assert "not supported" in diag.message and f"`{subscript}`" in diag.message
    assert source[diag.span.start : diag.span.end] == subscript


@pytest.mark.parametrize(
    "source",
    [
        "def f(double(N) A) -> (O) { O(i) = A(i / 2) where i in 0:N }",
        "def f(double(N) A) -> (O) { O(i) = A(i % 3) where i in 0:N }",
        "def f(double(N) A, int32(N) K) -> (O) { O(i) = A(K(i) % 3) where i in 0:N }",
    ],
)
def test_quasi_affine_and_indirect_subscripts_differentiate(source: str) -> None:
    kernel = define(source, target="interp")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(7)]
    if len(kernel.ranged.checked.inputs) == 2:
        args.append(rng.integers(0, 7, size=7).astype(np.int32))
    gradcheck(kernel, *args)
