"""Gradient TC text (golden, scatter form), round trips, dot-product checks, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.autodiff import grad_def
from compiler.frontend.printer import print_def
from compiler.gradcheck import numeric_jvp
from tests.autodiff.kit import ranged, reparse

EXAMPLES = Path(__file__).parents[2] / "examples"
NAMES = ["conv2d", "strided_conv", "matmul", "softmax", "maxpool", "layernorm"]
SHAPES = {
    "conv2d": [(1, 2, 4, 5), (2, 2, 2, 3), (2,)],
    "strided_conv": [(1, 2, 6, 5), (2, 2, 2, 2)],
    "matmul": [(2, 3), (3, 4)],
    "softmax": [(3, 4)],
    "maxpool": [(1, 2, 4, 4)],
    "layernorm": [(2, 5), (5,), (5,)],
}


@pytest.mark.parametrize("name", NAMES)
def test_golden_scatter_form(name: str, golden) -> None:  # type: ignore[no-untyped-def]
    text = compiler.grad((EXAMPLES / f"{name}.tc").read_text(), form="scatter")
    golden.check(f"autodiff/{name}_grad.tc", text)


@pytest.mark.parametrize("name", NAMES)
def test_gradient_round_trips(name: str) -> None:
    g = grad_def(ranged((EXAMPLES / f"{name}.tc").read_text()))
    again = reparse(print_def(g))
    assert again.checked.definition.name == f"{name}_grad"
    assert print_def(grad_def(ranged((EXAMPLES / f"{name}.tc").read_text()))) == print_def(g)


@pytest.mark.parametrize("name", NAMES)
def test_dot_product(name: str) -> None:
    """<t, vjp(c)> == <jvp(t), c> with a numeric jvp, in float64."""
    from compiler.gradcheck import as_float64

    rng = np.random.default_rng(7)
    k = as_float64(compiler.define((EXAMPLES / f"{name}.tc").read_text()))
    xs = [rng.standard_normal(s) for s in SHAPES[name]]
    if name == "maxpool":
        xs = [rng.permutation(xs[0].size).reshape(xs[0].shape) / 7.0]
    ts = [rng.standard_normal(x.shape) for x in xs]
    cs = [rng.standard_normal(o.shape) for o in k(*xs)]
    grads = k.vjp(*xs, grad_outputs=tuple(cs))
    lhs = sum(float(np.sum(t * g)) for t, g in zip(ts, grads, strict=True))
    rhs = sum(float(np.sum(j * c)) for j, c in zip(numeric_jvp(k, xs, ts), cs, strict=True))
    assert lhs == pytest.approx(rhs, rel=1e-6, abs=1e-8)


def test_matmul_gradient_text() -> None:
    text = compiler.grad((EXAMPLES / "matmul.tc").read_text(), form="scatter")
    assert "A_grad(m, k) +=! C_grad(m, n) * B(k, n)" in text
    assert "-> (float(M, K) A_grad, float(K, N) B_grad)" in text


def test_wrt_selects_inputs() -> None:
    g = grad_def(ranged((EXAMPLES / "matmul.tc").read_text()), wrt=["B"])
    assert [p.name for p in g.outputs] == ["B_grad"]


def test_zero_gradient_input_is_written() -> None:
    text = compiler.grad("def f(float(N) A, float(N) B) -> (O) { O(i) = floor(A(i)) + B(i) }")
    assert "A_grad(i0) = 0 where i0 in 0:N" in text
    reparse(text)


def test_indirect_read_gives_data_dependent_scatter() -> None:
    src = "def f(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"
    text = compiler.grad(src, form="scatter")
    assert "E_grad(idx(b), d) +=! O_grad(b, d)" in text
    reparse(text)


def test_recomputes_intermediate_versions() -> None:
    src = """
    def f(float(N) A) -> (O) {
        O(i) = A(i) * A(i)
        O(i) = O(i) * O(i)
    }"""
    text = compiler.grad(src, form="scatter")
    assert "O_v1(i) = A(i) * A(i)" in text
    assert "float(N) O_v1" in text
    reparse(text)


def test_kernel_grad_source_and_backward_override() -> None:
    src = """
    def sq(float(N) A) -> (O) { O(i) = A(i) * A(i) }
    def sq_back(float(N) A, float(N) O_grad) -> (A_grad) { A_grad(i) = 2 * O_grad(i) * A(i) }
    """
    k = compiler.define(src, "sq", backward="sq_back")
    assert k.grad_source.startswith("def sq_back(")
    a = np.arange(3, dtype=np.float32)
    (g,) = k.vjp(a, grad_outputs=(np.ones(3, dtype=np.float32),))
    np.testing.assert_allclose(g, 2 * a)
    auto = compiler.define(src, "sq")
    assert auto.grad_source.startswith("def sq_grad(")
    np.testing.assert_allclose(auto.vjp(a, grad_outputs=(np.ones(3, np.float32),))[0], 2 * a)


@pytest.mark.parametrize(
    ("src", "words"),
    [
        ("def f(float(N) A) -> (O) { O(i) = lgamma(A(i)) }", "cannot differentiate 'lgamma'"),
        ("def f(float(N) A) -> (O) { O(i) = tgamma(A(i)) }", "cannot differentiate 'tgamma'"),
        (
            "def f(float(N, M) A) -> (O) { O(i) *= A(i, j) }",
            "cannot differentiate `\\*=` without '!' as the first write of 'O'",
        ),
        (
            # over part through plain variables it is differentiated (test_partial_products)
            "def f(float(N, M) A) -> (O) { O(i) = A(i, 0)\n O(i + 1) *= A(i, j) where i in 0:2 }",
            "cannot differentiate `\\*=` without '!' over part of 'O'",
        ),
        (
            "def f(float(N) A) -> (O) { O(i) = O(i) + A(i) }",
            "'O' is read before any statement writes it",
        ),
    ],
)
def test_unsupported_constructs_are_errors(src: str, words: str) -> None:
    with pytest.raises(compiler.TCError, match=words) as info:
        compiler.grad(src, form="scatter")
    assert info.value.render()  # carries a span and renders with a caret


def test_grad_outputs_are_validated() -> None:
    k = compiler.define((EXAMPLES / "matmul.tc").read_text())
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(compiler.ShapeError, match="grad_outputs for 'C' has shape"):
        k.vjp(a, b, grad_outputs=(np.ones((4, 2), np.float32),))
    with pytest.raises(compiler.ShapeError, match="one array per output"):
        k.vjp(a, b, grad_outputs=())
