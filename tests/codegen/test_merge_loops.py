"""cpu.merge: adjacent whole-dimension loops merged before the CPU model's choices.

Every merged form is compared with the interpreter (forward, and the gradient kernel's
values: the gradient def is merged too) on odd sizes, and the loops are inspected to
show the merge happened (or, where it must not, did not)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.diagnostics import OptionsError
from compiler.loops import For, print_function, walk
from compiler.options import Options

CONV1X1 = (
    "def conv1x1(float(N, C, H, W) I, float(M, C) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h, w) * W1(m, c)\n}"
)
TENSORDOT = (
    "def tensordot(float(N, C1, C2, H, W) I0, float(N, C2, C3, H, W) I1) -> (O) {\n"
    "    O(n, c1, c3, h, w) +=! I0(n, c1, c2, h, w) * I1(n, c2, c3, h, w)\n}"
)


def _loops(source: str, options: Options) -> list[str]:
    lowered = pipeline.run(source, upto="lower", options=options)
    return [n.var for n in walk(lowered.function.body) if isinstance(n, For)]


def _arrays(kernel: compiler.Kernel, sizes: dict[str, int], dtype: type) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = []
    for t in kernel.ranged.checked.inputs:
        shape = tuple(sizes[d.name] for d in t.dims)  # every dim is a size name here
        out.append(rng.standard_normal(shape).astype(dtype))
    return out


def _check(source: str, sizes: dict[str, int], dtype: type, threads: int, grad: bool) -> None:
    options = Options(threads=threads)
    k = compiler.define(source, options=options)
    ref = compiler.define(source, target="interp")
    arrays = _arrays(k, sizes, dtype)
    got, want = k(*arrays), ref(*arrays)
    tol = 1e-4 if dtype is np.float32 else 1e-11
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    if grad:
        rng = np.random.default_rng(3)
        cot = tuple(rng.standard_normal(w.shape).astype(dtype) for w in want)
        for g, w in zip(k.vjp(*arrays, grad_outputs=cot), ref.vjp(*arrays, grad_outputs=cot),
                        strict=True):  # fmt: skip
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("sizes", "dtype", "threads"),
    [
        ({"N": 1, "C": 1, "H": 1, "W": 1, "M": 1}, np.float32, 1),
        ({"N": 2, "C": 5, "H": 14, "W": 14, "M": 67}, np.float32, 2),
        ({"N": 3, "C": 17, "H": 7, "W": 13, "M": 11}, np.float64, 2),
        ({"N": 1, "C": 3, "H": 5, "W": 1, "M": 129}, np.float64, 1),
    ],
)
def test_merged_1x1_convolution_and_its_gradient_equal_the_interpreter(
    sizes: dict[str, int], dtype: type, threads: int
) -> None:
    _check(CONV1X1.replace("float", "double") if dtype is np.float64 else CONV1X1,
           sizes, dtype, threads, grad=True)  # fmt: skip


def test_merged_tensordot_equals_the_interpreter() -> None:
    sizes = {"N": 2, "C1": 3, "C2": 5, "C3": 7, "H": 3, "W": 11}
    _check(TENSORDOT, sizes, np.float32, 2, grad=True)
    _check(TENSORDOT.replace("float", "double"), sizes, np.float64, 1, grad=False)


def test_the_1x1_convolution_runs_one_hw_loop_and_merge_false_keeps_two() -> None:
    merged = _loops(CONV1X1, Options())
    assert "hw" in merged and "h" not in merged and "w" not in merged
    plain = _loops(CONV1X1, Options(merge=False))
    assert "hw" not in plain and "h" in plain


def test_its_weight_gradient_merges_the_reduction_loops() -> None:
    wgrad = (
        "def wgrad(float(N, M, H, W) G, float(N, C, H, W) I) -> (WG) {\n"
        "    WG(m, c) +=! G(n, m, h, w) * I(n, c, h, w)\n}"
    )
    loops = _loops(wgrad, Options())
    assert "h" not in loops and "w" not in loops and any("hw" in v for v in loops)
    _check(wgrad, {"N": 3, "M": 5, "H": 7, "W": 3, "C": 2}, np.float32, 2, grad=False)


def test_three_whole_dimensions_become_one_loop() -> None:
    copy = "def scale(float(A, B, C) X) -> (Y) {\n    Y(a, b, c) = X(a, b, c) * 2\n}"
    loops = _loops(copy, Options())
    assert loops == ["abc"]
    _check(copy, {"A": 3, "B": 1, "C": 5}, np.float32, 2, grad=True)


@pytest.mark.parametrize(
    "source",
    [
        # a window on h, w: not whole dimensions of I
        "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {\n"
        "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}",
        # T is read through a window in the first statement: no one view of T for both
        "def cb(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B) -> (T, O) {\n"
        "    T(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n"
        "    O(n, m, h, w) = T(n, m, h, w) + B(m)\n}",
        # w is a value, not only a subscript
        "def ramp(float(H, W) X) -> (Y) {\n    Y(h, w) = X(h, w) * w\n}",
        # the transposed read: w, h are not in the same order everywhere
        "def tr(float(H, W) X) -> (Y) {\n    Y(h, w) = X(h, w) + X(w, h)\n}",
    ],
)
def test_no_merge_where_the_dimensions_are_not_whole_and_adjacent(source: str) -> None:
    loops = _loops(source, Options())
    assert "hw" not in loops and "h" in loops


def test_not_merged_cases_still_equal_the_interpreter() -> None:
    ramp = "def ramp(float(H, W) X) -> (Y) {\n    Y(h, w) = X(h, w) * w + X(h, 0)\n}"
    assert "hw" not in _loops(ramp, Options())
    _check(ramp, {"H": 5, "W": 3}, np.float32, 1, grad=True)


def test_a_slice_of_the_rows_merges_only_the_whole_dimensions() -> None:
    # h covers H - 1 of the H rows: (h, w) is not a whole pair of I's dimensions
    src = "def rows(float(N, H, W) I) -> (O) {\n    O(n, h, w) = I(n, h, w) + I(n, h + 1, w)\n}"
    loops = _loops(src, Options())
    assert "hw" not in loops
    _check(src, {"N": 2, "H": 4, "W": 3}, np.float32, 2, grad=True)


def test_the_loops_print_with_the_callers_shapes() -> None:
    lowered = pipeline.run(CONV1X1, upto="lower", options=Options())
    text = print_function(lowered.function)
    assert "I[N, C, H, W]" in text and "O[N, M, H, W]" in text
    assert "H_W" not in text and lowered.function.size_params == ("N", "C", "H", "W", "M")


def test_merge_must_be_a_bool() -> None:
    with pytest.raises(OptionsError, match="merge"):
        Options(merge="yes")  # type: ignore[arg-type]
