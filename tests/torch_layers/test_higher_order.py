"""Double backward and forward-mode AD through TC layers, in float64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.torch as tct  # noqa: E402
from compiler import TCError  # noqa: E402
from compiler.torch.grad import MAX_SPECIALISED  # noqa: E402
from tests.autodiff.test_forward import CASES  # noqa: E402


def _inputs(case: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(16)
    shapes = CASES[case][1]
    if case == "maxpool":  # distinct values far apart: no ties within the FD step
        n = 1
        for d in shapes[0]:
            n *= d
        x = torch.randperm(n, generator=g).reshape(shapes[0]).double() / n
        return [x.requires_grad_()]
    return [
        torch.rand(s, generator=g, dtype=torch.float64).mul(2).sub(1).requires_grad_()
        for s in shapes
    ]


@pytest.mark.parametrize("case", ["conv2d", "layernorm", "matmul", "maxpool", "mlp", "softmax"])
def test_gradgradcheck(case: str) -> None:
    layer = tct.define(CASES[case][0], training=True)
    inputs = _inputs(case)
    assert torch.autograd.gradgradcheck(lambda *xs: layer(*xs), inputs)
    # the many (inputs, zero cotangents) requests share a bounded set of compiled kernels
    for runner in _runners(layer):
        assert len(runner._derived) <= MAX_SPECIALISED + 1


def _runners(layer: tct.TCLayer) -> list:
    found, todo = [], [layer]
    while todo:
        current = todo.pop()
        found.append(current.gradients)
        todo.extend(current.__dict__.get("_gradient_layers", {}).values())
    return found


def test_grad_of_grad_has_a_grad_fn_and_third_order_works() -> None:
    layer = tct.define("def f(double(N) A) -> (O) { O() +=! exp(A(i)) * A(i) }", training=True)
    a = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(layer(a)[0], a, create_graph=True)
    assert g.grad_fn is not None
    (h,) = torch.autograd.grad(g.sum(), a, create_graph=True)
    (t,) = torch.autograd.grad(h.sum(), a)
    e = torch.exp(a.detach())
    torch.testing.assert_close(g.detach(), e * (a.detach() + 1))
    torch.testing.assert_close(h.detach(), e * (a.detach() + 2))
    torch.testing.assert_close(t, e * (a.detach() + 3))


@pytest.mark.parametrize("case", ["conv2d", "layernorm", "mlp", "softmax"])
def test_forward_mode_matches_reverse_mode(case: str) -> None:
    layer = tct.define(CASES[case][0], training=True)
    primals = tuple(x.detach() for x in _inputs(case))
    g = torch.Generator().manual_seed(1)
    tangents = tuple(torch.randn(x.shape, generator=g, dtype=torch.float64) for x in primals)
    outs, dots = torch.func.jvp(lambda *xs: layer(*xs), primals, tangents)
    # the same directional derivatives by reverse mode, one output at a time
    for k, dot in enumerate(dots):
        _, vjp = torch.func.vjp(lambda *xs, k=k: layer(*xs)[k], *primals)
        eye = torch.eye(dot.numel(), dtype=torch.float64)
        rows = [
            sum((gi * ti).sum() for gi, ti in zip(vjp(e.reshape(dot.shape)), tangents, strict=True))
            for e in eye
        ]
        torch.testing.assert_close(dot.reshape(-1), torch.stack(rows))
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        duals = [fwad.make_dual(p, t) for p, t in zip(primals, tangents, strict=True)]
        got = [fwad.unpack_dual(o).tangent for o in layer(*duals)]
    for a, b in zip(got, dots, strict=True):
        torch.testing.assert_close(a, b)


def test_forward_mode_needs_a_training_layer() -> None:
    layer = tct.define(CASES["matmul"][0], training=False)
    x = torch.ones(3, 5, dtype=torch.float64)
    y = torch.ones(5, 2, dtype=torch.float64)
    with pytest.raises(TCError, match="training=False"):
        torch.func.jvp(lambda a: layer(a, y)[0], (x,), (x,))
