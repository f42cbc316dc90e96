"""tools/ukernel.py: each measured tile computes its share of a matmul, and bad shapes
are refused."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tools import ukernel


@pytest.mark.parametrize(("rows", "vectors"), [(8, 2), (6, 4), (3, 1)])
def test_tile_kernel_accumulates_a_times_the_panel(rows: int, vectors: int) -> None:
    lanes, lda = 4, 300  # 128-bit vectors run everywhere
    width = vectors * lanes
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ukernel.ROWS, lda)).astype(np.float32)
    panel = rng.standard_normal((ukernel.STEPS, width)).astype(np.float32)
    c = np.zeros((ukernel.ROWS, width), np.float32)
    sig = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
    )
    kernel = ukernel._jit(ukernel.tile_ir(rows, vectors, lanes), "k", sig)
    kernel(a.ctypes.data, lda, panel.ctypes.data, c.ctypes.data, 2)
    done = (ukernel.ROWS // rows) * rows  # the rows of whole blocks
    want = 2 * a[:done, : ukernel.STEPS].astype(np.float64) @ panel
    np.testing.assert_allclose(c[:done], want, rtol=1e-4, atol=1e-3)
    assert not c[done:].any()


def test_bad_shapes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ukernel.main(["--shapes", "8x2", "eight"])
    assert "'eight' is not ROWSxVECTORS" in capsys.readouterr().err
