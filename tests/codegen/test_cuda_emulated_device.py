"""The device path on target "cuda-emulated": device arrays whose memory is host memory.

In emulation the device's memory is the host's (`cuda.cuda_emulation.EmulatedDevice`),
so the code that runs on a GPU -- pointers from `__cuda_array_interface__`, outputs
allocated as `DeviceArray`s, `Kernel.vjp` keeping forward outputs, zeros and
gradients on the device -- runs here, on `HostArray`s (a NumPy array behind the
interface), the emulated device's `DeviceArray`s and CPU torch tensors. No GPU runs:
the same cases run on one in test_cuda_gpu.py (`tests.codegen.device_cases`).
"""

from __future__ import annotations

import gc
import shutil

import numpy as np
import pytest

from compiler.cuda.cuda_driver import DeviceArray
from compiler.cuda.cuda_emulation import EMULATED_DEVICE
from compiler.diagnostics import ShapeError, TCError
from compiler.kernel import define
from tests.codegen.device_cases import (
    EMBEDDING,
    MATMUL,
    HostArray,
    Place,
    check_kernels,
    device_array_place,
    torch_place,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
EMULATED = "cuda-emulated"


def test_kernels_and_vjp_on_emulated_device_arrays() -> None:
    check_kernels(EMULATED, device_array_place(EMULATED_DEVICE))


def test_kernels_and_vjp_on_host_memory_behind_the_interface() -> None:
    place = device_array_place(EMULATED_DEVICE)
    check_kernels(EMULATED, Place(HostArray, place.download, place.is_result))


def test_kernels_and_vjp_on_cpu_torch_tensors() -> None:
    pytest.importorskip("torch")
    check_kernels(EMULATED, torch_place("cpu"))


def test_vjp_stays_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """No copy between host and device, temporaries freed, results DeviceArrays."""
    k = define(MATMUL, target=EMULATED)
    rng = np.random.default_rng(0)
    A, B = (
        rng.standard_normal((4, 3)).astype(np.float32),
        rng.standard_normal((3, 5)).astype(np.float32),
    )
    dC = rng.standard_normal((4, 5)).astype(np.float32)
    k.vjp(A, B, grad_outputs=(dC,))  # compile the gradient before counting
    copies: list[str] = []
    monkeypatch.setattr(EMULATED_DEVICE, "to_host", lambda *a: copies.append("to_host"))
    monkeypatch.setattr(EMULATED_DEVICE, "to_device", lambda *a: copies.append("to_device"))
    live = EMULATED_DEVICE.allocated()
    dA, dB = k.vjp(HostArray(A), HostArray(B), grad_outputs=(HostArray(dC),))
    assert copies == []
    assert isinstance(dA, DeviceArray) and isinstance(dB, DeviceArray)
    assert EMULATED_DEVICE.allocated() == live + 2  # the two gradients, nothing else
    monkeypatch.undo()
    np.testing.assert_allclose(dA.get(), dC @ B.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dB.get(), A.T @ dC, rtol=1e-5, atol=1e-5)
    del dA, dB
    assert EMULATED_DEVICE.allocated() == live


def test_out_on_the_device_is_written_and_returned() -> None:
    k = define(MATMUL, target=EMULATED)
    A, B = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    out = HostArray(np.full((2, 4), 9, np.float32))
    (C,) = k(HostArray(A), HostArray(B), out=(out,))
    assert C is out
    np.testing.assert_array_equal(out.array, np.full((2, 4), 3, np.float32))


def test_mixing_host_and_device_arrays_is_a_shape_error() -> None:
    k = define(MATMUL, target=EMULATED)
    A, B = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(ShapeError, match="all arrays must be on the device, or all NumPy"):
        k(HostArray(A), B)
    with pytest.raises(ShapeError, match="host value \\(ndarray\\)"):
        k.vjp(HostArray(A), HostArray(B), grad_outputs=(np.ones((2, 4), np.float32),))
    with pytest.raises(ShapeError, match="all arrays must be on the device"):
        k(A, B, out=(HostArray(np.zeros((2, 4), np.float32)),))


def test_device_shape_and_dtype_errors_name_the_parameter() -> None:
    k = define(MATMUL, target=EMULATED)
    with pytest.raises(
        ShapeError, match="'A' is declared float32, got a device array of dtype float64"
    ):
        k(HostArray(np.ones((2, 3))), HostArray(np.ones((3, 4), np.float32)))
    with pytest.raises(ShapeError, match="grad_outputs for 'C' has shape \\(4, 2\\)"):
        k.vjp(HostArray(np.ones((2, 3), np.float32)), HostArray(np.ones((3, 2), np.float32)),
              grad_outputs=(HostArray(np.ones((4, 2), np.float32)),))  # fmt: skip


def test_bounds_check_on_the_device_path_is_the_same_shape_error() -> None:
    k = define(EMBEDDING, target=EMULATED)
    E = HostArray(np.ones((4, 2), np.float32))
    idx = HostArray(np.array([0, 9, 1], np.int32))
    k(E, HostArray(np.array([0, 3, 1], np.int32)))  # allocates the pooled error record
    gc.collect()
    live = EMULATED_DEVICE.allocated()
    with pytest.raises(ShapeError) as got:
        k(E, idx)
    assert "'E'" in got.value.message and "index 9" in got.value.message
    del got  # its traceback holds the call's frame, and so the output
    gc.collect()
    assert EMULATED_DEVICE.allocated() == live  # the output is freed, the record pooled


def test_gpu_memory_is_refused_in_emulation() -> None:
    class GpuArray(HostArray):  # what the emulation knows to be GPU memory (CuPy)
        pass

    GpuArray.__module__ = "cupy._core.core"
    k = define(MATMUL, target=EMULATED)
    with pytest.raises(
        TCError, match="not in host memory .GpuArray.; target .cuda-emulated. runs on the CPU"
    ):
        k(GpuArray(np.ones((2, 3), np.float32)), GpuArray(np.ones((3, 4), np.float32)))


def test_jvp_and_hvp_refuse_device_arrays() -> None:
    k = define(MATMUL, target=EMULATED)
    A, B = HostArray(np.ones((2, 3), np.float32)), HostArray(np.ones((3, 4), np.float32))
    with pytest.raises(TCError, match="Kernel.jvp of def 'matmul' takes NumPy arrays"):
        k.jvp(A, B, tangents=(A, None))
    with pytest.raises(TCError, match="Kernel.hvp"):
        k.hvp(A, B, vectors=(A, None), grad_outputs=(None,))
