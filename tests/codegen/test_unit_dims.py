"""Extent-1 dimensions and constant subscripts on every target, against NumPy.

An element's flat offset is the sum of its subscripts times the strides; a constant
subscript over a unit stride (every dimension above a trailing run of extent-1 ones) is
an LLVM constant, and it was once taken for the empty sum: `B(2, 0)` of a `float(3, 1)`
read `B(0, 0)`, `O(3, 0)` of a `[4, 1]` output stored at `O(0, 0)`
(`cpu.llvm_emit._address`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from compiler.kernel import define
from compiler.options import Options
from tests.codegen.kit import EVERY_TARGET

Ref = Callable[..., tuple[np.ndarray, ...]]


def _one_at(shape: tuple[int, ...], at: tuple[int, ...]) -> np.ndarray:
    o = np.zeros(shape, np.float32)
    o[at] = 1.0
    return o


def _two_statements(b: np.ndarray) -> tuple[np.ndarray, ...]:
    o = b[:, 0] * 2.0
    p = np.zeros((3, 1), np.float32)
    p[1:, 0] = b[2, 0] + o[1:]
    return o, p


def _row_below(b: np.ndarray) -> tuple[np.ndarray, ...]:
    o = np.zeros((3, 4), np.float32)
    o[2] = b[0] + b[0, 3]
    return (o,)


# (id, source, input shapes, NumPy reference)
CASES: list[tuple[str, str, tuple[tuple[int, ...], ...], Ref]] = [
    ("read_unit_last", "def f(float(3, 1) B) -> (O) { O = B(2, 0) }", ((3, 1),),
     lambda b: (b[2, 0],)),
    ("write_unit_last", "def f() -> (O) { O(i, j) = 1.0 where i in 3:4, j in 0:1 }", (),
     lambda: (_one_at((4, 1), (3, 0)),)),
    ("read_unit_first", "def f(float(1, 3) B) -> (O) { O = B(0, 2) }", ((1, 3),),
     lambda b: (b[0, 2],)),
    ("read_two_unit_last", "def f(float(3, 1, 1) B) -> (O) { O = B(1, 0, 0) }", ((3, 1, 1),),
     lambda b: (b[1, 0, 0],)),
    ("read_unit_middle", "def f(float(2, 1, 3) B) -> (O) { O = B(1, 0, 2) + B(1, 0, 0) }",
     ((2, 1, 3),), lambda b: (b[1, 0, 2] + b[1, 0, 0],)),
    ("read_units_between", "def f(float(3, 1, 2, 1) B) -> (O) { O = B(2, 0, 1, 0) }",
     ((3, 1, 2, 1),), lambda b: (b[2, 0, 1, 0],)),
    ("write_one_of_3d", "def f() -> (O) { O(i, j, k) = 1.0 where i in 2:3, j in 0:1, k in 0:1 }",
     (), lambda: (_one_at((3, 1, 1), (2, 0, 0)),)),
    ("write_one_of_4d",
     "def f() -> (O) { O(i, j, k, l) = 1.0 where i in 1:2, j in 0:1, k in 2:3, l in 0:1 }", (),
     lambda: (_one_at((2, 1, 3, 1), (1, 0, 2, 0)),)),
    ("column_copy", "def f(float(3, 1) B) -> (O) { O(i, j) = B(i, j) + 1.0 }", ((3, 1),),
     lambda b: (b + 1.0,)),
    ("two_statements",
     "def f(float(3, 1) B) -> (O, P) { O(i) = B(i, 0) * 2.0\n"
     "P(i, j) = B(2, 0) + O(i) where i in 1:3, j in 0:1 }", ((3, 1),), _two_statements),
    ("row_below", "def f(float(1, 4) B) -> (O) { O(i, j) = B(0, j) + B(0, 3) where i in 2:3 }",
     ((1, 4),), _row_below),
]  # fmt: skip

TARGETS = EVERY_TARGET


@pytest.mark.parametrize(("target", "options"), TARGETS)
@pytest.mark.parametrize(
    ("src", "shapes", "ref"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_unit_dims_and_constant_subscripts(
    src: str, shapes: tuple[tuple[int, ...], ...], ref: Ref, target: str, options: Options | None
) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = ref(*inputs)
    got = define(src, target=target, options=options)(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-6)
