"""Call-time limits of Kernel (issue 14): broadcast views, typed scalars, huge outputs.

A zero-stride view whose contiguous copy would exceed `BROADCAST_COPY_LIMIT` is a
ShapeError saying how to avoid it (smaller views are copied and computed right); a
NumPy scalar follows the array dtype rule (a Python number is accepted); an output
no process could allocate is a ShapeError, not NumPy's error.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
import compiler.arguments as arguments_module
from compiler.diagnostics import ShapeError

SCALE = "def f(float(N, M) A) -> (B) { B(i, j) = A(i, j) * 2.0 }"
SCALAR = "def f(float a, int32 n) -> (b) { b = a * float(n) }"


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_huge_broadcast_view_is_refused(target: str) -> None:
    k = compiler.define(SCALE, target=target, cache=False)
    view = np.broadcast_to(np.float32(1), (2**16, 2**15))  # 8 GiB if copied
    with pytest.raises(ShapeError, match="broadcast view.*BROADCAST_COPY_LIMIT") as err:
        k(view)
    assert "np.ascontiguousarray" in err.value.render()


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_small_broadcast_view_is_computed(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    k = compiler.define(SCALE, target=target, cache=False)
    view = np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5))
    np.testing.assert_array_equal(k(view)[0], 2 * np.asarray(view))
    monkeypatch.setattr(arguments_module, "BROADCAST_COPY_LIMIT", view.nbytes - 1)
    with pytest.raises(ShapeError, match="broadcast view"):
        k(view)
    np.testing.assert_array_equal(k(np.ascontiguousarray(view))[0], 2 * np.asarray(view))


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_numpy_scalars_follow_the_dtype_rule(target: str) -> None:
    k = compiler.define(SCALAR, target=target, cache=False)
    assert k(np.float32(1.5), np.int32(2))[0] == 3.0
    assert k(1.5, 2)[0] == 3.0  # Python numbers carry no dtype
    with pytest.raises(ShapeError, match="NumPy scalar of dtype float64"):
        k(np.float64(1.5), 2)
    with pytest.raises(ShapeError, match="NumPy scalar of dtype int64"):
        k(1.5, np.int64(2))


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_an_output_too_large_for_any_process_is_a_shape_error(target: str) -> None:
    src = "def f(float(N) A) -> (B) { B(i, j, k) +=! A(i) where j in 0:N, k in 0:N }"
    k = compiler.define(src, target=target, cache=False)
    with pytest.raises(ShapeError, match="output 'B' would have shape"):
        k(np.ones(2**17, np.float32))
