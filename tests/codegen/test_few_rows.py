"""cpu.rows: a register tile's versions for fewer rows than its row block.

The versions are compared with the interpreter for every row count around them (1 to
the block and beyond), and the loops are inspected for the run-time tests."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.loops import If, print_expr, walk
from compiler.options import Options

CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}"
)


def _row_tests(source: str, grad: bool = False) -> list[str]:
    # 512-bit vectors: a convolution's tile has 8 rows (4 with 256)
    lowered = pipeline.run(source, upto="lower", options=Options(vector_bits=512), grad=grad)
    return [print_expr(n.cond) for n in walk(lowered.function.body) if isinstance(n, If)]


def test_the_convolution_gradient_has_versions_for_few_channels() -> None:
    tests = [t.replace(" - 0", "") for t in _row_tests(CONV, grad=True)]
    assert "C == 2" in tests and "C == 3" in tests
    assert any("C >= 4" in t and "C < 8" in t for t in tests)
    forward = [t.replace(" - 0", "") for t in _row_tests(CONV)]
    assert "M == 3" in forward and "C == 3" not in forward  # its rows: output channels


def test_versions_need_a_row_block() -> None:
    # one row variable only: no register tile rows, no versions
    assert not any("C ==" in t for t in _row_tests(
        "def colsum(float(N, C) X) -> (S) {\n    S(c) +=! X(n, c)\n}"))  # fmt: skip


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 11])
def test_every_row_count_equals_the_interpreter(rows: int) -> None:
    # the forward convolution's row block is its output channels `m`
    rng = np.random.default_rng(rows)
    dtype = np.float64 if rows % 2 else np.float32
    src = CONV.replace("float", "double") if dtype is np.float64 else CONV
    i = rng.standard_normal((2, 3, 9, 21)).astype(dtype)
    w = rng.standard_normal((rows, 3, 3, 2)).astype(dtype)
    for bits in (256, 512):
        options = Options(threads=1 + rows % 2, vector_bits=bits)
        got = compiler.define(src, options=options)(i, w)[0]
        want = compiler.define(src, target="interp")(i, w)[0]
        tol = 1e-4 if dtype is np.float32 else 1e-11
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(("channels", "threads"), [(3, 2), (2, 1), (6, 2)])
def test_the_first_layer_convolution_gradient_equals_the_interpreter(
    channels: int, threads: int
) -> None:
    rng = np.random.default_rng(5)
    i = rng.standard_normal((2, channels, 11, 13)).astype(np.float32)
    w = rng.standard_normal((19, channels, 3, 5)).astype(np.float32)
    k = compiler.define(CONV, options=Options(threads=threads))
    ref = compiler.define(CONV, target="interp")
    out = ref(i, w)[0]
    np.testing.assert_allclose(k(i, w)[0], out, rtol=1e-4, atol=1e-4)
    cot = (rng.standard_normal(out.shape).astype(np.float32),)
    for a, b in zip(k.vjp(i, w, grad_outputs=cot), ref.vjp(i, w, grad_outputs=cot), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
