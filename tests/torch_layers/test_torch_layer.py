"""compiler.torch.define: TC training layers against torch.nn.functional, in autograd."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")
F = torch.nn.functional

import compiler.torch as tct  # noqa: E402
from compiler import OptionsError, ShapeError, TCError  # noqa: E402
from compiler.torch.convert import array_to_tensor, tensor_to_array  # noqa: E402
from tests.torch_layers.tc_layers import CONV, CONV_BIAS, SCALE, as_double  # noqa: E402

TOL = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def conv_ad() -> tct.TCLayer:
    return tct.define(CONV, "conv", training=True)


@pytest.fixture(scope="module")
def conv_user() -> tct.TCLayer:
    return tct.define(CONV, "conv", training=True, backward="conv_grad")


@pytest.fixture(scope="module")
def conv_bias() -> tct.TCLayer:
    return tct.define(
        CONV_BIAS,
        "conv_bias",
        training=True,
        backward="conv_bias_grad",
        reorder_function=lambda grads: [grads[1]],
    )


def _conv_inputs(dtype: torch.dtype = torch.float32, bias: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 3, 7, 6), (4, 3, 3, 2)] + ([(4,)] if bias else [])
    return [torch.randn(s, generator=g, dtype=dtype, requires_grad=True) for s in shapes]


def _grads(out: torch.Tensor, inputs: list[torch.Tensor], seed: int = 1) -> tuple:
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, cot)


# ------------------------------------------------------------------ importing


def test_import_without_torch_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    monkeypatch.delitem(sys.modules, "compiler.torch")
    with pytest.raises(ImportError, match=r"pip install torch==2\.13\.0"):
        importlib.import_module("compiler.torch")


def test_import_does_not_load_dynamo() -> None:
    # torch._dynamo costs seconds to import; only a call that torch.compile traces needs it
    code = "import compiler.torch, sys; print('torch._dynamo' in sys.modules)"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ------------------------------------------------- forward and gradients vs torch


@pytest.mark.parametrize("layer", ["conv_ad", "conv_user"])
def test_conv_layer_matches_torch(layer: str, request: pytest.FixtureRequest) -> None:
    conv = request.getfixturevalue(layer)
    inputs = _conv_inputs()
    (out,) = conv(*inputs)
    ref = F.conv2d(*inputs)
    assert out.grad_fn is not None
    torch.testing.assert_close(out, ref, **TOL)
    for mine, theirs in zip(_grads(out, inputs), _grads(ref, inputs), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_two_output_conv_with_reorder_function(conv_bias: tct.TCLayer) -> None:
    inputs = _conv_inputs(bias=True)
    tmp, out = conv_bias(*inputs)
    torch.testing.assert_close(tmp, F.conv2d(*inputs[:2]), **TOL)
    ref = F.conv2d(*inputs)
    torch.testing.assert_close(out, ref, **TOL)
    for mine, theirs in zip(_grads(out, inputs), _grads(ref, inputs), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_reorder_function_given_per_call() -> None:
    conv = tct.define(CONV_BIAS, "conv_bias", training=True, backward="conv_bias_grad")
    seen: list[int] = []

    def reorder(grads: list[torch.Tensor]) -> list[torch.Tensor]:
        seen.append(len(grads))
        return [grads[1]]

    inputs = _conv_inputs(bias=True)
    _, out = conv(*inputs, reorder_function=reorder)
    mine = _grads(out, inputs)
    assert seen == [2]
    torch.testing.assert_close(mine[2], _grads(F.conv2d(*inputs), inputs)[2], **TOL)


def test_backward_def_that_does_not_fit_the_gradients_is_refused() -> None:
    conv = tct.define(CONV_BIAS, "conv_bias", training=True, backward="conv_bias_grad")
    _, out = conv(*_conv_inputs(bias=True))  # no reorder_function: 2 gradients, 1 taken
    with pytest.raises(TCError, match="has 4 parameter.*then 2 output gradient") as err:
        out.sum().backward()
    assert "reorder_function=" in err.value.render()
    with pytest.raises(TCError, match="has 2 parameter"):
        tct.define(CONV, "conv", training=True, backward="conv")  # not a backward def


MUL = """
def mul(double(N) A, int32(N) K, double(N) B) -> (O) { O(i) = A(i) * float(K(i)) * B(i) }
def mul_a(double(N) A, int32(N) K, double(N) B, double(N) O_grad) -> (A_grad) {
    A_grad(i) = O_grad(i) * float(K(i)) * B(i)
}
def mul_ab(double(N) A, int32(N) K, double(N) B, double(N) O_grad)
    -> (A_grad, K_ignored, B_grad) {
    A_grad(i) = O_grad(i) * float(K(i)) * B(i)
    K_ignored(i) = K(i)
    B_grad(i) = O_grad(i) * float(K(i)) * A(i)
}
def mul_f32(double(N) A, int32(N) K, double(N) B, double(N) O_grad)
    -> (A_grad, K_ignored, B_grad) {
    A_grad(i) = O_grad(i) * float(K(i)) * B(i)
    K_ignored(i) = K(i)
    B_grad(i) = float(O_grad(i))
}
"""


def test_backward_def_missing_a_gradient_is_refused_at_define_time() -> None:
    with pytest.raises(TCError, match=r"produces no gradient for input\(s\) 'B' of 'mul'") as e:
        tct.define(MUL, "mul", backward="mul_a")
    assert "def mul_a(A, K, B, [O,] O_grad) -> (A_grad, K_ignored, B_grad)" in e.value.render()
    with pytest.raises(ShapeError, match="output 'B_grad' .* is float32 of rank 1, but input"):
        tct.define(MUL, "mul", backward="mul_f32")


def test_backward_def_with_an_integer_input_between_floats() -> None:
    layer = tct.define(MUL, "mul", backward="mul_ab")
    g = torch.Generator().manual_seed(5)
    a, b = (torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True) for _ in "ab")
    k = torch.tensor([1, -2, 3, 0], dtype=torch.int32)
    (out,) = layer(a, k, b)
    cot = torch.randn(4, dtype=torch.float64, generator=g)
    ga, gb = torch.autograd.grad(out, (a, b), cot)
    torch.testing.assert_close(ga, cot * k.double() * b.detach())
    torch.testing.assert_close(gb, cot * k.double() * a.detach())


def test_reorder_function_without_backward_def_is_refused() -> None:
    with pytest.raises(OptionsError, match="backward="):
        tct.define(CONV, "conv", training=True, reorder_function=lambda g: g)


# ------------------------------------------------------------- gradcheck (f64)


def _gradcheck(layer: tct.TCLayer, inputs: list[torch.Tensor], output: int = 0) -> None:
    assert torch.autograd.gradcheck(lambda *a: layer(*a)[output], inputs, eps=1e-6, atol=1e-6)


def test_gradcheck_conv_derived_and_user_backward() -> None:
    inputs = [x.detach()[:1, :2, :5, :4].double().requires_grad_() for x in _conv_inputs()]
    inputs[1] = inputs[1].detach()[:2].requires_grad_()
    _gradcheck(tct.define(as_double(CONV), "conv", training=True), inputs)
    _gradcheck(tct.define(as_double(CONV), "conv", training=True, backward="conv_grad"), inputs)


def test_gradcheck_conv_bias_with_reorder() -> None:
    layer = tct.define(
        as_double(CONV_BIAS),
        "conv_bias",
        training=True,
        backward="conv_bias_grad",
        reorder_function=lambda grads: [grads[1]],
    )
    inputs = [torch.randn(1, 2, 4, 4), torch.randn(2, 2, 2, 2), torch.randn(2)]
    _gradcheck(layer, [x.double().requires_grad_() for x in inputs], output=1)


def test_gradcheck_with_an_integer_input() -> None:
    layer = tct.define(as_double(SCALE), training=True)
    a = torch.randn(5, dtype=torch.float64, requires_grad=True)
    k = torch.tensor([1, -2, 0, 3, 4], dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda x: layer(x, k)[0], [a])


# ------------------------------------------------------ what autograd asks for


def test_only_the_needed_gradients_are_compiled_and_returned() -> None:
    conv = tct.define(CONV, "conv", training=True)
    i, w = _conv_inputs()
    w = w.detach()  # no gradient wanted for the weights
    (out,) = conv(i, w)
    out.sum().backward()
    assert w.grad is None
    torch.testing.assert_close(i.grad, torch.autograd.grad(F.conv2d(i, w).sum(), i)[0], **TOL)
    assert list(conv.gradients._derived) == [(("I",), ())]  # (wanted, zero cotangents)
    assert "W1_grad" not in conv.gradients._derived[(("I",), ())].text


def test_integer_input_gets_no_gradient_and_integer_output_none() -> None:
    layer = tct.define(SCALE, training=True)
    a = torch.randn(4, requires_grad=True)
    k = torch.tensor([1, 2, 0, -1], dtype=torch.int32)
    out, kc = layer(a, k)
    assert kc.dtype == torch.int32 and not kc.requires_grad
    torch.testing.assert_close(kc, k + 1)
    (ga,) = torch.autograd.grad(out, [a], torch.ones(4))
    torch.testing.assert_close(ga, k.float())


def test_no_grad_inference_mode_and_retain_graph(conv_ad: tct.TCLayer) -> None:
    inputs = _conv_inputs()
    with torch.no_grad():
        (out,) = conv_ad(*inputs)
    assert out.grad_fn is None and not out.requires_grad
    with torch.inference_mode():
        (inf,) = conv_ad(*inputs)
    assert inf.grad_fn is None
    torch.testing.assert_close(inf, out)
    (out,) = conv_ad(*inputs)
    loss = (out * out).sum()
    loss.backward(retain_graph=True)
    first = [x.grad.clone() for x in inputs]
    loss.backward()
    for x, g in zip(inputs, first, strict=True):
        torch.testing.assert_close(x.grad, 2 * g)


CUBE = "def cube(double(N) A, double(N) B) -> (O) { O(i) = A(i) * A(i) * B(i) }"


def _cube_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return tuple(
        torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2)
    )


def test_default_layer_is_differentiable_when_an_input_requires_grad() -> None:
    layer = tct.define(CUBE)  # training=None: automatic
    assert repr(layer).endswith("automatic>")
    a, b = _cube_inputs()
    (layer(a, b)[0] + a).sum().backward()  # the program: the graph is not cut
    ra, rb = (x.detach().clone().requires_grad_() for x in (a, b))
    (ra * ra * rb + ra).sum().backward()  # the same expression in torch
    torch.testing.assert_close(a.grad, ra.grad)
    torch.testing.assert_close(b.grad, rb.grad)
    assert torch.autograd.gradcheck(lambda x, y: layer(x, y)[0], (a, b))
    (plain,) = layer(a.detach(), b.detach())  # nothing requires grad: no autograd node
    assert plain.grad_fn is None
    with torch.no_grad():
        assert layer(a, b)[0].grad_fn is None


def test_default_module_layer_trains_its_parameters() -> None:
    layer = tct.Layer(CUBE, params={"B": torch.full((6,), 2.0, dtype=torch.float64)})
    a = torch.arange(6, dtype=torch.float64, requires_grad=True)
    layer(a).sum().backward()
    torch.testing.assert_close(a.grad, 4 * a.detach())
    torch.testing.assert_close(layer.B.grad, a.detach() ** 2)


def test_inference_layer_refuses_inputs_that_require_grad() -> None:
    layer = tct.define(CUBE, training=False)
    a, b = _cube_inputs()
    with pytest.raises(TCError, match="training=False.*input 'B' requires grad") as err:
        layer(a.detach(), b)
    assert "torch.no_grad()" in err.value.render()
    assert err.value.span.col == CUBE.index("double(N) B") + 1  # at B's declaration
    with pytest.raises(TCError, match="inputs 'A', 'B' require grad"):
        layer(a, b)
    with torch.no_grad():
        (out,) = layer(a, b)
    assert out.grad_fn is None
    torch.testing.assert_close(out, (a * a * b).detach())
    torch.testing.assert_close(layer(a.detach(), b.detach())[0], out)


def test_training_must_be_a_bool_or_none() -> None:
    with pytest.raises(OptionsError, match="training= must be None"):
        tct.define(CUBE, training="yes")  # type: ignore[arg-type]


def test_backward_needs_training() -> None:
    with pytest.raises(OptionsError, match="training=False"):
        tct.define(CONV, "conv", backward="conv_grad", training=False)
    assert tct.define(CONV, "conv", backward="conv_grad").kernel.backward == "conv_grad"


# ------------------------------------------------- tensors, dtypes and devices


def test_contiguous_tensors_are_shared_not_copied() -> None:
    layer = tct.define(SCALE)
    info = layer.kernel.ranged.checked.inputs[0]
    a = torch.randn(6)
    array = tensor_to_array(info, a)
    assert array.ctypes.data == a.data_ptr()
    result = np.arange(3, dtype=np.float32)
    assert array_to_tensor(result).data_ptr() == result.ctypes.data


def test_non_contiguous_input_is_copied_and_correct(conv_ad: tct.TCLayer) -> None:
    i, w = (x.detach() for x in _conv_inputs())
    strided = i.transpose(2, 3).contiguous().transpose(2, 3)
    assert not strided.is_contiguous()
    torch.testing.assert_close(conv_ad(strided, w)[0], F.conv2d(i, w), **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_dtypes_map_to_tc_types(dtype: torch.dtype) -> None:
    tc = {torch.float32: "float", torch.float64: "double"}.get(dtype, str(dtype)[6:])
    layer = tct.define(f"def twice({tc}(N) A) -> (B) {{ B(i) = A(i) + A(i) }}")
    (out,) = layer(torch.arange(5).to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out, 2 * torch.arange(5).to(dtype))


def test_wrong_dtype_is_a_shape_error_with_a_torch_hint(conv_ad: tct.TCLayer) -> None:
    i, w = _conv_inputs(torch.float64)
    with pytest.raises(ShapeError, match="declared float32, got a tensor of dtype float64") as err:
        conv_ad(i, w)
    assert "I.to(torch.float32)" in err.value.render()


def test_cuda_tensor_is_refused_clearly(conv_ad: tct.TCLayer) -> None:
    class FakeCuda(torch.Tensor):
        @property
        def device(self) -> torch.device:  # type: ignore[override]
            return torch.device("cuda", 0)

    i, w = (x.detach() for x in _conv_inputs())
    fake = torch.Tensor._make_subclass(FakeCuda, i)
    with pytest.raises(TCError, match="defined for target 'llvm'") as err:
        conv_ad(fake, w)
    assert "target='cuda' to run on CUDA tensors" in err.value.render()


def test_other_devices_are_refused(conv_ad: tct.TCLayer) -> None:
    with pytest.raises(TCError, match="only CPU tensors"):
        conv_ad(torch.empty(1, 1, 3, 3, device="meta"), torch.empty(1, 1, 2, 2))


def test_wrong_argument_count_is_a_shape_error(conv_ad: tct.TCLayer) -> None:
    with pytest.raises(ShapeError, match="takes 2 input"):
        conv_ad(torch.zeros(1, 1, 3, 3))


def test_second_derivatives_match_torch(conv_user: tct.TCLayer) -> None:
    inputs = _conv_inputs(torch.float64)
    layer = tct.define(as_double(CONV), "conv", training=True)
    second = []
    for f in (lambda i, w: layer(i, w)[0], lambda i, w: F.conv2d(i, w)):
        (g,) = torch.autograd.grad((f(*inputs) ** 2).sum(), inputs[0], create_graph=True)
        second.append(torch.autograd.grad((g * g).sum(), inputs))
    for got, want in zip(*second, strict=True):
        torch.testing.assert_close(got, want)
    floats = _conv_inputs()
    (out,) = conv_user(*floats)
    with pytest.raises(TCError, match="hand-written def 'conv_grad'"):
        torch.autograd.grad((out * out).sum(), floats[0], create_graph=True)
