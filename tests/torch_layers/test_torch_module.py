"""compiler.torch.Layer: TC defs as nn.Modules with nn.Parameters, and the example model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")
F = torch.nn.functional

import compiler.torch as tct  # noqa: E402
from compiler import ShapeError, TCError  # noqa: E402
from tests.torch_layers.tc_layers import CONV_BIAS, SCALE  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tc_model.py"
CONV_B = CONV_BIAS.split("def conv_bias_grad")[0]


def test_layer_parameters_train_in_an_optimiser_step() -> None:
    torch.manual_seed(0)
    bias = torch.randn(4)
    layer = tct.Layer(CONV_B, params={"W1": (4, 3, 3, 3), "B": bias})
    assert [n for n, _ in layer.named_parameters()] == ["W1", "B"]
    assert layer.B.data_ptr() != bias.data_ptr()  # a tensor is copied into the Parameter
    w0, b0 = layer.W1.detach().clone(), layer.B.detach().clone()
    x = torch.randn(2, 3, 6, 6)
    target = torch.randn(2, 4, 4, 4)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    _, out = layer(x)
    loss = ((out - target) ** 2).mean()
    loss.backward()
    ref_w = w0.clone().requires_grad_()
    ref_b = b0.clone().requires_grad_()
    ref_loss = ((F.conv2d(x, ref_w, ref_b) - target) ** 2).mean()
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
    opt.step()
    torch.testing.assert_close(layer.W1.detach(), w0 - 0.1 * ref_w.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.B.detach(), b0 - 0.1 * ref_b.grad, atol=1e-5, rtol=1e-5)


def test_forward_takes_the_inputs_that_are_not_parameters_in_declared_order() -> None:
    layer = tct.Layer(CONV_B, params={"W1": (2, 1, 2, 2)})
    assert layer.argument_names == ("I", "B")
    x, b = torch.randn(1, 1, 3, 3), torch.randn(2)
    _, out = layer(x, b)
    torch.testing.assert_close(out, F.conv2d(x, layer.W1, b), atol=1e-5, rtol=1e-5)
    with pytest.raises(ShapeError, match=r"takes 2 tensor\(s\) \(I, B\), got 1"):
        layer(x)


def test_one_output_def_returns_a_tensor_and_shape_init_is_bounded() -> None:
    src = "def lin(float(N, I) X, float(O, I) Wt) -> (Y) { Y(n, o) +=! X(n, i) * Wt(o, i) }"
    layer = tct.Layer(src, params={"Wt": (5, 16)})
    assert layer.Wt.detach().abs().max().item() <= 0.25  # 1 / sqrt(fan_in = 16)
    y = layer(torch.randn(3, 16))
    assert isinstance(y, torch.Tensor) and y.shape == (3, 5) and y.grad_fn is not None


def test_bad_params_are_tc_errors() -> None:
    with pytest.raises(TCError, match="not an input") as err:
        tct.Layer(CONV_B, params={"W11": (1, 1, 1, 1)})
    assert "did you mean 'W1'" in err.value.render()
    with pytest.raises(TCError, match="only float inputs"):
        tct.Layer(SCALE, params={"K": (3,)})
    with pytest.raises(ShapeError, match="rank 1"):
        tct.Layer(CONV_B, params={"B": torch.zeros(2, 2)})
    with pytest.raises(ShapeError, match="shape of 1"):
        tct.Layer(CONV_B, params={"B": (2, "x")})


def _load_example():
    spec = importlib.util.spec_from_file_location("train_tc_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_model_loss_curve_matches_torch_nn() -> None:
    example = _load_example()
    tc_losses, torch_losses = example.compare(steps=20)
    assert len(tc_losses) == len(torch_losses) == 20
    assert tc_losses[-1] < tc_losses[0]  # it trains
    assert max(abs(a - b) for a, b in zip(tc_losses, torch_losses, strict=True)) < 1e-4


def test_example_models_gradcheck_in_float64() -> None:
    example = _load_example()
    torch.manual_seed(0)
    cases = [
        (example.CONV, [(1, 2, 4, 4), (2, 2, 3, 3), (2,)]),
        (example.RELU, [(1, 2, 3, 3)]),
        (example.MAXPOOL, [(1, 2, 4, 4)]),
        (example.LINEAR, [(2, 2, 2, 2), (3, 2, 2, 2), (3,)]),
    ]
    for src, shapes in cases:
        layer = tct.define(src.replace("float(", "double("), training=True)
        args = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
        assert torch.autograd.gradcheck(lambda *a, layer=layer: layer(*a)[0], args)
    xent = tct.define(example.CROSS_ENTROPY.replace("float(", "double("), training=True)
    logits = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    onehot = F.one_hot(torch.tensor([0, 2, 1, 2]), 3).double()
    assert torch.autograd.gradcheck(lambda x: xent(x, onehot)[2], [logits])
    torch.testing.assert_close(xent(logits, onehot)[2], F.cross_entropy(logits, onehot.argmax(1)))
