"""Second derivatives through a TC layer are exact (the backward under create_graph=True
is the gradient def's own TC layer), and torch.compile runs TC layers as graph breaks without Dynamo warnings."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.torch as tct  # noqa: E402

SRC = "def cube(double(N) A, double(N) B) -> (O) { O(i) = A(i) * B(i) * A(i) }"


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    return a, b


def test_gradgradcheck_passes_through_the_derived_backward() -> None:
    layer = tct.define(SRC, training=True)
    a, b = _inputs()
    assert torch.autograd.gradcheck(lambda x, y: layer(x, y)[0], (a, b))
    assert torch.autograd.gradgradcheck(lambda x, y: layer(x, y)[0], (a, b))


def test_create_graph_second_derivatives_are_exact() -> None:
    layer = tct.define(SRC, training=True)
    a, b = _inputs()
    (g,) = torch.autograd.grad(layer(a, b)[0].sum(), a, create_graph=True)
    torch.testing.assert_close(g, 2 * a.detach() * b.detach())
    # d/db sum(2ab) = 2a, d/da sum(2ab) = 2b: through the output gradient's path too
    ga, gb = torch.autograd.grad(g.sum(), (a, b))
    torch.testing.assert_close(ga, 2 * b.detach())
    torch.testing.assert_close(gb, 2 * a.detach())


PRODUCTS = {
    "product": "def f(double(N, M) A, double(N) B) -> (O) { O(i) *=! A(i, j) * B(i) }",
    "into previous contents": (
        "def f(double(N, M) A, double(N) B) -> (O) { O(i) +=! A(i, j)\n O(i) *= A(i, j) * B(i) }"
    ),
}


@pytest.mark.parametrize("zeros", [0, 1, 2, 3])
@pytest.mark.parametrize("case", sorted(PRODUCTS))
def test_products_gradgradcheck_with_zero_terms(case: str, zeros: int) -> None:
    """A product is smooth: its second derivatives are exact where terms are 0 too."""
    layer = tct.define(PRODUCTS[case], training=True)
    g = torch.Generator().manual_seed(1)
    a = torch.rand(3, 5, dtype=torch.float64, generator=g) + 0.5
    a[1, :zeros] = 0.0
    b = torch.rand(3, dtype=torch.float64, generator=g) + 0.5
    args = (a.requires_grad_(), b.requires_grad_())
    assert torch.autograd.gradcheck(lambda x, y: layer(x, y)[0], args)
    assert torch.autograd.gradgradcheck(lambda x, y: layer(x, y)[0], args)


def test_torch_compile_runs_the_layer_without_dynamo_warnings() -> None:
    layer = tct.define(SRC, training=True)
    a, b = _inputs()
    compiled = torch.compile(lambda x, y: layer(x, y)[0] * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            out = compiled(a, b)
    assert not [w for w in caught if "Dynamo" in str(w.message)], [str(w.message) for w in caught]
    torch.testing.assert_close(out, 2 * a.detach() ** 2 * b.detach())
    out.sum().backward()
    torch.testing.assert_close(a.grad, 4 * a.detach() * b.detach())
