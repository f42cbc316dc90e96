"""Device-path cases shared by the emulated tests and the GPU-only tests.

The same checks run twice: on target "cuda-emulated" here (the emulated device's memory
is host memory: `HostArray`s, `DeviceArray`s of `EMULATED_DEVICE`, CPU torch tensors),
and on target "cuda" in tests/codegen/test_cuda_gpu.py (torch CUDA tensors,
`DeviceArray`s on the GPU), so CI covers the code a GPU runs: pointers from
`__cuda_array_interface__`, outputs allocated on the device, vjp and the torch layers'
backward keeping everything there. References are the LLVM target on NumPy arrays
(kernels) and torch's own ops (layers).

A `Place` says how to put a NumPy array on the device, bring one back, and recognise
a result of the expected kind.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compiler.kernel import define

MATMUL = (Path(__file__).resolve().parents[2] / "examples" / "matmul.tc").read_text()
# an integer input, a data-dependent scatter (atomicAdd) in the gradient, a bounds check
EMBEDDING = "def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"
# two outputs (one read by the gradient), a 0-d input given as a Python number
TWO = """
def two(float(N) A, float s) -> (P, Q) {
    P(i) = A(i) * s
    Q(i) = P(i) * A(i)
}
"""
# a hand-written backward= def taking every cotangent: a None one becomes dense zeros
WITH_BACKWARD = """
def pq(float(N) A) -> (P, Q) {
    P(i) = 2.0 * A(i)
    Q(i) = A(i) * A(i)
}
def pq_grad(float(N) A, float(N) P_grad, float(N) Q_grad) -> (A_grad) {
    A_grad(i) = 2.0 * P_grad(i) + 2.0 * A(i) * Q_grad(i)
}
"""


@dataclass(frozen=True)
class Place:
    """How a test puts arrays on the device and reads them back."""

    upload: Callable[[np.ndarray], Any]
    download: Callable[[Any], np.ndarray]
    is_result: Callable[[Any], bool]  # a result of the kind the inputs promise


class HostArray:
    """A NumPy array's memory behind `__cuda_array_interface__` (the device array of a
    third-party library, as the emulation sees it: host memory). It keeps the array
    alive; it never pretends to be on a GPU."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.ascontiguousarray(array)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        a = self.array
        return {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "data": (a.ctypes.data, False),
            "strides": None,
            "version": 3,
        }


def device_array_place(device: Any) -> Place:
    """`DeviceArray`s on `device` (the GPU's, or `EMULATED_DEVICE`) in and out."""
    from compiler.cuda.cuda_driver import DeviceArray

    def upload(host: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(host)
        array = DeviceArray(host.shape, host.dtype, device)
        device.to_device(array.ptr, host)
        return array

    return Place(upload, lambda a: a.get(), lambda a: isinstance(a, DeviceArray))


def torch_place(device: str) -> Place:
    """torch tensors on `device` ("cuda"; "cpu" in emulation) in and out."""
    import torch

    return Place(
        lambda host: torch.as_tensor(np.ascontiguousarray(host), device=device),
        lambda t: t.detach().cpu().numpy(),
        lambda t: isinstance(t, torch.Tensor) and t.device.type == device,
    )


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 1e-4 if want.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _up(place: Place, value: Any) -> Any:
    return (
        value if np.ndim(value) == 0 and not isinstance(value, np.ndarray) else place.upload(value)
    )


def check_call_and_vjp(source: str, args: list[Any], target: str, place: Place) -> None:
    """Forward and vjp of `source` on the device equal the LLVM target's on NumPy:
    results of the place's kind; every cotangent given, then each one None."""
    ref, k = define(source), define(source, target=target)
    device_args = [_up(place, a) for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args)
        got = k(*device_args)
    for w, g in zip(want, got, strict=True):
        assert place.is_result(g), type(g)
        _close(place.download(g), w)
    assert k.output_shapes(*device_args) == ref.output_shapes(*args)
    rng = np.random.default_rng(3)
    seeds = [rng.standard_normal(w.shape).astype(w.dtype) for w in want]
    choices = [list(seeds)] + [[None if j == i else s for j, s in enumerate(seeds)]
                               for i in range(len(seeds)) if len(seeds) > 1]  # fmt: skip
    for cotangents in choices:
        want_grads = ref.vjp(*args, grad_outputs=cotangents)
        got_grads = k.vjp(
            *device_args,
            grad_outputs=[None if s is None else place.upload(s) for s in cotangents],
        )
        for w, g in zip(want_grads, got_grads, strict=True):
            if w is None:
                assert g is None
                continue
            assert place.is_result(g), type(g)
            _close(place.download(g), w)


def kernel_cases() -> list[tuple[str, list[Any]]]:
    """(source, NumPy arguments) of every kernel case."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    return [
        (
            MATMUL,
            [rng.standard_normal((5, 3)).astype(f32), rng.standard_normal((3, 7)).astype(f32)],
        ),
        (
            EMBEDDING,
            [rng.standard_normal((6, 4)).astype(f32), rng.integers(0, 6, size=40).astype(np.int32)],
        ),  # fmt: skip
        (TWO, [rng.standard_normal(9).astype(f32), 1.5]),
        (WITH_BACKWARD, [rng.standard_normal(9).astype(f32)]),
    ]


def check_kernels(target: str, place: Place) -> None:
    """Every kernel case (see `check_call_and_vjp`)."""
    for source, args in kernel_cases():
        if source is WITH_BACKWARD:
            check_backward_def(target, place, args)
        else:
            check_call_and_vjp(source, args, target, place)


def check_backward_def(target: str, place: Place, args: list[Any]) -> None:
    """A `backward=` def on the device: a None cotangent arrives as device zeros."""
    (a,) = args
    k = define(WITH_BACKWARD, "pq", target=target, backward="pq_grad")
    dq = np.linspace(-1, 1, a.size).astype(a.dtype)
    (grad,) = k.vjp(place.upload(a), grad_outputs=(None, place.upload(dq)))
    assert place.is_result(grad)
    _close(place.download(grad), 2 * a * dq)


# ------------------------------------------------------------------ torch layers


def check_layers(target: str, device: str) -> None:
    """compiler.torch layers of `target` on tensors of `device`: forward and backward
    equal torch's, results and gradients stay on the device."""
    import torch

    from compiler.torch import Layer
    from compiler.torch import define as layer_define
    from tests.torch_layers.tc_layers import CONV, CONV_BIAS, SCALE, as_double

    F = torch.nn.functional
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device).requires_grad_()

    # derived gradient, double backward (create_graph=True) on the device
    conv = layer_define(as_double(CONV), "conv", training=True, target=target)
    i, w = rand(2, 3, 6, 5), rand(4, 3, 3, 2)
    (o,) = conv(i, w)
    assert o.device.type == device and o.grad_fn is not None
    torch.testing.assert_close(o, F.conv2d(i, w))
    got = torch.autograd.grad((o * o).sum(), (i, w), create_graph=True)
    want = torch.autograd.grad((F.conv2d(i, w) ** 2).sum(), (i, w), create_graph=True)
    for g, t in zip(got, want, strict=True):
        assert g.device.type == device
        torch.testing.assert_close(g, t)
    second = torch.autograd.grad((got[0] ** 2).sum(), (i, w))
    expected = torch.autograd.grad((want[0] ** 2).sum(), (i, w))
    for g, t in zip(second, expected, strict=True):
        torch.testing.assert_close(g, t)

    # a backward= def with reorder_function (a temporary output), float32
    bias = layer_define(CONV_BIAS, "conv_bias", training=True, target=target,
                        backward="conv_bias_grad", reorder_function=lambda g: [g[1]])  # fmt: skip
    args = [rand(2, 3, 6, 5, dtype=torch.float32), rand(4, 3, 3, 2, dtype=torch.float32),
            rand(4, dtype=torch.float32)]  # fmt: skip
    _, out = bias(*args)
    out.sum().backward()
    # float32 references in float64: on a GPU torch's float32 conv may use TF32
    ref = [a.detach().double().requires_grad_() for a in args]
    F.conv2d(ref[0], ref[1], ref[2]).sum().backward()
    for a, r in zip(args, ref, strict=True):
        assert a.grad is not None and a.grad.device.type == device
        torch.testing.assert_close(a.grad, r.grad.float(), atol=1e-4, rtol=1e-4)

    # an integer input and an integer output (no gradient for either)
    scale = layer_define(SCALE, "scale", training=True, target=target)
    a = rand(7, dtype=torch.float32)
    k = torch.arange(7, dtype=torch.int32, device=device)
    o, kc = scale(a, k)
    assert kc.device.type == device and not kc.requires_grad
    torch.testing.assert_close(kc, k + 1)
    o.sum().backward()
    torch.testing.assert_close(a.grad, k.to(torch.float32))

    # the nn.Module wrapper, moved to the device, one optimiser step
    layer = Layer(CONV, "conv", params={"W1": (4, 3, 3, 2)}, target=target).to(device)
    before = layer.W1.detach().clone()
    x = torch.randn(2, 3, 6, 5, generator=gen).to(device)
    layer(x).sum().backward()
    assert layer.W1.grad is not None and layer.W1.grad.device.type == device
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    w64 = before.double().requires_grad_()
    want_grad = torch.autograd.grad(F.conv2d(x.double(), w64).sum(), w64)[0].float()
    torch.testing.assert_close(layer.W1.detach(), before.detach() - 0.1 * want_grad,
                               atol=1e-4, rtol=1e-4)  # fmt: skip


__all__ = [
    "EMBEDDING",
    "MATMUL",
    "TWO",
    "WITH_BACKWARD",
    "HostArray",
    "Place",
    "check_backward_def",
    "check_call_and_vjp",
    "check_kernels",
    "check_layers",
    "device_array_place",
    "kernel_cases",
    "torch_place",
]
