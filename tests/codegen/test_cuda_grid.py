"""The grid variant of a band of 2-3 independent loops (`cuda.cuda_map._grid_variant`):
the innermost loop on x, the others on blockIdx.y/z, no `/` and `%` to decompose a
collapsed index; run where the innermost extent fills a block, checked against NumPy
on target "cuda-emulated" in both index widths and with a y grid smaller than the
extent (grid-stride in y)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from compiler.cuda import cuda_width
from compiler.cuda.cuda_options import CudaOptions
from compiler.kernel import define
from compiler.runtime import cuda as runtime_cuda

SOFTMAX = (Path(__file__).resolve().parents[2] / "examples" / "softmax.tc").read_text()
# the statements' own kernels: row fusion (cuda.cuda_rows) would run softmax as one
BLOCK = CudaOptions(block=32, fuse_rows=False)
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_the_grid_variant_has_no_index_division() -> None:
    program = define(SOFTMAX, target="cuda-emulated", options=BLOCK)._native
    source = program.source
    body = source[source.index("softmax_k3g(") :]
    body = body[: body.index("\n}\n")]
    assert "blockIdx.y" in body and " / " not in body.replace("/ rowsum", "")
    assert " % " not in body


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize(("n", "d", "grid_yz"), [(5, 37, 65535), (7, 33, 2), (1, 32, 1)])
def test_grid_variant_matches_numpy(
    n: int, d: int, grid_yz: int, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if width == 64:
        monkeypatch.setattr(cuda_width, "INT32_LIMIT", 1)
    monkeypatch.setattr(runtime_cuda, "MAX_GRID_YZ", grid_yz)  # fewer blocks than rows
    k = define(SOFTMAX, target="cuda-emulated", options=BLOCK)
    x = np.random.default_rng(n * d).standard_normal((n, d)).astype(np.float32)
    (y, *_) = k(x)
    np.testing.assert_allclose(y, _softmax(x), rtol=1e-5, atol=1e-6)
    ran = [kernel.name for kernel, _ in k._native.plan({"N": n, "D": d})]
    suffix = "_i32" if width == 32 else ""
    assert f"softmax_k1g{suffix}" in ran and f"softmax_k3g{suffix}" in ran
    fused = define(SOFTMAX, target="cuda-emulated", options=CudaOptions(block=32))
    np.testing.assert_allclose(fused(x)[0], _softmax(x), rtol=1e-5, atol=1e-6)
    assert [kernel.name for kernel, _ in fused._native.plan({"N": n, "D": d})] == [
        f"softmax_k0r{suffix}"
    ]


def test_below_a_block_of_columns_the_collapsed_kernel_runs() -> None:
    k = define(SOFTMAX, target="cuda-emulated", options=BLOCK)
    x = np.random.default_rng(0).standard_normal((9, 31)).astype(np.float32)
    np.testing.assert_allclose(k(x)[0], _softmax(x), rtol=1e-5, atol=1e-6)
    ran = [kernel.name for kernel, _ in k._native.plan({"N": 9, "D": 31})]
    assert "softmax_k3_i32" in ran and not any("g" in name.split("_k")[1] for name in ran)
