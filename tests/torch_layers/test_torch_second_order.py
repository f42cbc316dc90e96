"""Second derivatives through a TC layer are a clear error (never silent zeros), and
torch.compile runs TC layers as graph breaks without Dynamo warnings."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.torch as tct  # noqa: E402
from compiler import TCError  # noqa: E402

SRC = "def cube(double(N) A, double(N) B) -> (O) { O(i) = A(i) * B(i) * A(i) }"


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    return a, b


def test_gradgradcheck_says_the_backward_is_not_differentiable() -> None:
    layer = tct.define(SRC, training=True)
    a, b = _inputs()
    assert torch.autograd.gradcheck(lambda x, y: layer(x, y)[0], (a, b))
    with pytest.raises(TCError, match="the backward of a TC layer is not itself differentiable"):
        torch.autograd.gradgradcheck(lambda x, y: layer(x, y)[0], (a, b))


def test_create_graph_first_derivatives_still_work() -> None:
    layer = tct.define(SRC, training=True)
    a, b = _inputs()
    (g,) = torch.autograd.grad(layer(a, b)[0].sum(), a, create_graph=True)
    torch.testing.assert_close(g, 2 * a.detach() * b.detach())
    with pytest.raises(TCError, match="cannot differentiate twice"):
        torch.autograd.grad(g.sum(), b)  # through the output gradient's path too


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
