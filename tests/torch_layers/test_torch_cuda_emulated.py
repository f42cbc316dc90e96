"""compiler.torch layers on the device path, run in emulation (target "cuda-emulated").

There the emulated device's memory is the host's, so CPU tensors take the path CUDA
tensors take on target "cuda": handed to the kernels as they are (no NumPy
conversion), outputs and gradients allocated as tensors on their device. The same
cases run on a GPU in tests/codegen/test_cuda_gpu.py (`tests.codegen.device_cases`).
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.torch as tct  # noqa: E402
from compiler import TCError  # noqa: E402
from compiler.runtime import cuda_device  # noqa: E402
from compiler.torch.convert import on_device  # noqa: E402
from tests.codegen.device_cases import check_layers  # noqa: E402
from tests.torch_layers.tc_layers import CONV  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it is on a CUDA device (for the refusals: never run)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def _fake_cuda(t: torch.Tensor) -> torch.Tensor:
    return torch.Tensor._make_subclass(FakeCuda, t.detach())


def test_layers_forward_backward_and_double_backward_on_the_emulated_device() -> None:
    check_layers("cuda-emulated", "cpu")


def test_the_device_path_hands_tensors_to_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward and backward go through `device_call` with the tensors, never NumPy."""
    layer = tct.define(CONV, "conv", training=True, target="cuda-emulated")
    i = torch.randn(1, 2, 5, 4, requires_grad=True)
    w = torch.randn(3, 2, 2, 2, requires_grad=True)
    (o,) = layer(i, w)  # compile forward and gradient before counting
    o.sum().backward()
    calls: list[tuple[str, ...]] = []
    real = cuda_device.device_call

    def counted(kernel, arrays, out, scalar):  # type: ignore[no-untyped-def]
        calls.append(tuple(type(a).__name__ for a in arrays))
        return real(kernel, arrays, out, scalar)

    def no_numpy(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the device path converted a tensor to NumPy")

    monkeypatch.setattr(cuda_device, "device_call", counted)
    monkeypatch.setattr(tct, "tensor_to_array", no_numpy)
    monkeypatch.setattr(tct, "array_to_tensor", no_numpy)
    i.grad = w.grad = None
    (o,) = layer(i, w)
    o.sum().backward()
    assert calls == [("Tensor", "Tensor"), ("Tensor", "Tensor", "Tensor")]  # forward, gradient
    assert i.grad is not None and w.grad is not None


def test_a_cuda_tensor_to_an_emulated_layer_says_to_use_target_cuda() -> None:
    layer = tct.define(CONV, "conv", target="cuda-emulated")
    i, w = torch.randn(1, 1, 3, 3), torch.randn(1, 1, 2, 2)
    with pytest.raises(TCError, match="target='cuda' to run on CUDA tensors"):
        layer(_fake_cuda(i), w)


def test_mixed_cpu_and_cuda_tensors_on_target_cuda_are_refused() -> None:
    layer = tct.define(CONV, "conv", target="cuda-emulated")  # its infos; the rule is per target
    infos = layer.kernel.ranged.checked.inputs
    i, w = torch.randn(1, 1, 3, 3), torch.randn(1, 1, 2, 2)
    with pytest.raises(TCError, match="input 'W1' is a CPU tensor, the others are CUDA"):
        on_device("cuda", infos, [_fake_cuda(i), w])
    assert on_device("cuda", infos, [_fake_cuda(i), _fake_cuda(w)])
    assert not on_device("cuda", infos, [i, w])  # CPU tensors: the NumPy path
    assert on_device("cuda-emulated", infos, [i, w])
    assert not on_device("llvm", infos, [i, w])


def test_layer_options_are_cuda_options() -> None:
    from compiler.cuda.cuda_options import CudaOptions

    layer = tct.define(CONV, "conv", training=True, target="cuda-emulated",
                       options=CudaOptions(block=32, grid=3))  # fmt: skip
    assert layer.options == CudaOptions(block=32, grid=3)
    assert layer.gradients.derived_kernel(("I",)).options == layer.options


def test_kernel_in_emulation_refuses_tensors_without_host_memory() -> None:
    from compiler.kernel import define

    k = define("def f(float(N) A) -> (B) { B(i) = A(i) * 2.0 }", target="cuda-emulated")
    with pytest.raises(TCError, match="not in host memory \\(meta\\)"):
        k(torch.empty(3, device="meta"))
    with pytest.raises(TCError, match="not in host memory \\(cuda:0\\)"):
        k(_fake_cuda(torch.ones(3)))
    (B,) = k(torch.ones(3))  # a CPU tensor is the emulated device's memory
    assert isinstance(B, torch.Tensor)
    torch.testing.assert_close(B, torch.full((3,), 2.0))
