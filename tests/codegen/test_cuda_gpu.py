"""target="cuda" on a real GPU (NVRTC + the driver API): skipped where there is none.

Every example and gradient equals the reference evaluator on NumPy arrays (copied to
and from the device); torch CUDA tensors stay on the device (outputs are torch CUDA
tensors on the same device); a failed indirect-read check is the same ShapeError.
Kernel.vjp and the compiler.torch layers on device arrays run the cases of
`tests.codegen.device_cases`, which run in emulation everywhere else.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from compiler.cuda.cuda_options import CudaOptions
from compiler.diagnostics import ShapeError
from compiler.kernel import define
from tests.codegen.device_cases import (
    check_kernels,
    check_layers,
    device_array_place,
    torch_place,
)
from tests.codegen.test_cuda_emulated import LONG, ODD, ONES, SMALL, TILED, _inputs


def _gpu() -> bool:
    if importlib.util.find_spec("cuda") is None:
        return False
    from compiler.cuda.cuda_driver import CudaUnavailable, current_device

    try:
        current_device()
    except CudaUnavailable:
        return False
    return True


pytestmark = pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU")
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.tc"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("options", [None, SMALL, TILED], ids=["default", "small", "tiled"])
def test_example_and_gradient_match_interp_on_the_gpu(
    path: Path, options: CudaOptions | None
) -> None:
    src = path.read_text()
    for text in (src, re.sub(r"\bfloat\b", "double", src)):
        ref = define(text)
        got = define(text, target="cuda", options=options)
        for sizes in (ODD, ONES, LONG):
            args = _inputs(ref, sizes, (0, 2))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want, have = ref(*args), got(*args)
            for w, g in zip(want, have, strict=True):
                tol = 1e-4 if w.dtype == np.float32 else 1e-10
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
            rng = np.random.default_rng(1)
            seeds = [rng.standard_normal(o.shape).astype(o.dtype) for o in want]
            for w, g in zip(
                ref.vjp(*args, grad_outputs=seeds),
                got.vjp(*args, grad_outputs=seeds),
                strict=True,
            ):
                if w is not None:
                    tol = 1e-4 if w.dtype == np.float32 else 1e-10
                    np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_torch_cuda_tensors_stay_on_the_device() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    src = (Path(__file__).resolve().parents[2] / "examples" / "matmul.tc").read_text()
    k = define(src, target="cuda")
    A = torch.randn(37, 19, device="cuda")
    B = torch.randn(19, 41, device="cuda")
    (C,) = k(A, B)
    assert isinstance(C, torch.Tensor) and C.is_cuda and C.shape == (37, 41)
    torch.testing.assert_close(C, A @ B, rtol=1e-4, atol=1e-4)
    out = torch.full((37, 41), 7.0, device="cuda")
    (C2,) = k(A, B, out=(out,))
    assert C2 is out
    torch.testing.assert_close(out, A @ B, rtol=1e-4, atol=1e-4)


def test_device_array_outputs_without_torch_inputs() -> None:
    from compiler.cuda.cuda_driver import DeviceArray, current_device

    device = current_device()
    k = define("def f(float(N) A) -> (B) { B(i) = A(i) * 2.0 }", target="cuda")
    host = np.arange(11, dtype=np.float32)
    A = DeviceArray(host.shape, host.dtype, device)
    device.to_device(A.ptr, host)
    (B,) = k(A)
    assert isinstance(B, DeviceArray)
    np.testing.assert_array_equal(B.get(), host * 2)


def test_indirect_read_out_of_range_is_the_same_shape_error_on_the_gpu() -> None:
    src = "def f(float(V, D) E, int32(N) idx) -> (O) { O(n, d) = E(idx(n), d) }"
    idx = np.array([0, 9, 1], dtype=np.int32)
    E = np.ones((4, 2), np.float32)
    with pytest.raises(ShapeError) as got:
        define(src, target="cuda")(E, idx)
    assert "'E'" in got.value.message and "index 9" in got.value.message


def test_embedding_gradient_with_atomics_on_the_gpu() -> None:
    src = "def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"
    rng = np.random.default_rng(0)
    E = rng.standard_normal((50, 8)).astype(np.float32)
    idx = rng.integers(0, 50, size=1000).astype(np.int32)
    dO = rng.standard_normal((1000, 8)).astype(np.float32)
    want, _ = define(src).vjp(E, idx, grad_outputs=(dO,))
    have, _ = define(src, target="cuda").vjp(E, idx, grad_outputs=(dO,))
    np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ the device path
# The same cases as test_cuda_emulated_device.py and
# tests/torch_layers/test_torch_cuda_emulated.py (tests.codegen.device_cases), on the GPU.


def _torch_cuda():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


def test_kernels_and_vjp_on_torch_cuda_tensors_stay_on_the_device() -> None:
    _torch_cuda()
    check_kernels("cuda", torch_place("cuda"))


def test_kernels_and_vjp_on_device_arrays_stay_on_the_device() -> None:
    from compiler.cuda.cuda_driver import current_device

    check_kernels("cuda", device_array_place(current_device()))


def test_layers_on_cuda_tensors_forward_backward_and_double_backward() -> None:
    _torch_cuda()
    check_layers("cuda", "cuda")


def test_layer_runs_on_the_current_stream() -> None:
    torch = _torch_cuda()
    import compiler.torch as tct
    from tests.torch_layers.tc_layers import CONV

    layer = tct.define(CONV, "conv", training=True, target="cuda")
    i = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device="cuda", requires_grad=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        (o,) = layer(i, w)
        o.sum().backward()
    torch.cuda.current_stream().wait_stream(stream)
    F = torch.nn.functional
    ref_i, ref_w = i.detach().requires_grad_(), w.detach().requires_grad_()
    F.conv2d(ref_i, ref_w).sum().backward()
    torch.testing.assert_close(o, F.conv2d(ref_i, ref_w), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(i.grad, ref_i.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad, ref_w.grad, atol=1e-4, rtol=1e-4)


def test_cuda_layer_device_rules() -> None:
    torch = _torch_cuda()
    import compiler.torch as tct
    from compiler.diagnostics import TCError
    from tests.torch_layers.tc_layers import CONV

    layer = tct.define(CONV, "conv", training=True, target="cuda")
    i, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 2, 2)
    (o,) = layer(i, w)  # CPU tensors: the NumPy path, CPU tensors out
    assert o.device.type == "cpu"
    with pytest.raises(TCError, match="is a CPU tensor, the others are CUDA"):
        layer(i.cuda(), w)
    with pytest.raises(TCError, match="defined for target 'llvm'"):
        tct.define(CONV, "conv")(i.cuda(), w.cuda())
    with pytest.raises(TCError, match="forward-mode AD"):
        torch.func.jvp(lambda a: layer(a, w.cuda())[0], (i.cuda(),), (torch.ones_like(i.cuda()),))


def test_cupy_arrays_in_device_arrays_out_and_vjp() -> None:
    """The `__cuda_array_interface__` path a pycuda or Numba user takes: CuPy arrays in,
    DeviceArrays out (wrapped by cupy.asarray without a copy), vjp on the device."""
    cupy = pytest.importorskip("cupy")
    from compiler.cuda.cuda_driver import DeviceArray

    src = (Path(__file__).resolve().parents[2] / "examples" / "matmul.tc").read_text()
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((23, 17)), rng.standard_normal((17, 29))
    k = define(re.sub(r"\bfloat\b", "double", src), target="cuda")
    (C,) = k(cupy.asarray(A), cupy.asarray(B))
    assert isinstance(C, DeviceArray) and C.shape == (23, 29)
    C_cp = cupy.asarray(C)
    assert C_cp.data.ptr == C.ptr  # wrapped, not copied
    np.testing.assert_allclose(cupy.asnumpy(C_cp), A @ B, rtol=1e-12, atol=1e-12)
    dC = rng.standard_normal((23, 29))
    dA, dB = k.vjp(cupy.asarray(A), cupy.asarray(B), grad_outputs=(cupy.asarray(dC),))
    np.testing.assert_allclose(dA.get(), dC @ B.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dB.get(), A.T @ dC, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_warp_reductions_on_the_gpu(op: str) -> None:
    """Warp reductions (cuda.cuda_warp) with real shuffles: the same cases as in
    emulation (tests/codegen/test_cuda_emulated.py), in float64."""
    from tests.codegen.test_cuda_emulated import WARP_OPS

    stmt, want = WARP_OPS[op]
    kernel = define(f"def r(double(N, D) I, double(D) b) -> (O) {{ {stmt} }}", target="cuda")
    rng = np.random.default_rng(5)
    for n, d in [(3, 16), (5, 31), (2, 33), (300, 1000)]:
        x, b = rng.standard_normal((n, d)), rng.standard_normal(d)
        if op in ("max", "min"):
            x[1, d // 2] = np.nan
        (got,) = kernel(x, b)
        np.testing.assert_allclose(got, want(x, b), rtol=1e-12, atol=1e-12)
