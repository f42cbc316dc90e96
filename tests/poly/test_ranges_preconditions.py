"""Preconditions range inference warns about are checked at every call (issues 48, 51).

A read that the inferred ranges cannot keep in bounds for every size warns "it needs
`M >= N`, which is checked at run time"; the call then checks that relation of the
sizes, on every target, and a violation is a ShapeError naming the read and the
relation (not an index error that blames an index tensor the def does not have). A
read of an output is in bounds inside what earlier statements wrote, which can be less
than the output's final shape: only the size relation catches it.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.diagnostics import ShapeError

TARGETS = ["interp", "llvm", "cuda-emulated"]

# L reads B(0:M) before the statement that widens B to max(N, M)
EARLY_READ = (
    "def f(float(N) I, float(M) J) -> (B, L) {\n"
    "    B(x) = I(x)\n"
    "    L(x) = B(x) where x in 0:M\n"
    "    B(x) = J(x) where x in 0:M\n"
    "}\n"
)
GRU = (
    "def gru(float(N, G) gates, float(N, H) h) -> (O) {\n"
    "    O(n, j) = r * tanh(gates(n, 3 * H + j)) + (1 - r) * h(n, j) where j in 0:H,\n"
    "        r = 1 / (1 + exp(-gates(n, j)))\n"
    "}\n"
)


def _warnings(src: str) -> list[str]:
    return [d.message for d in pipeline.run(src, upto="ranges").warnings]


def test_the_warnings_promise_a_check() -> None:
    (early,) = _warnings(EARLY_READ)
    assert early == (
        "cannot prove that `B(x)` stays in bounds: it needs `N >= M`, which is checked at run time"
    )
    low, high = _warnings(GRU)
    assert "`gates(n, j)`" in low and "`G >= H`, which is checked at run time" in low
    assert "`gates(n, 3 * H + j)`" in high and "`G >= 4 * H`, which is checked at" in high


@pytest.mark.parametrize("target", TARGETS)
def test_an_early_read_of_an_output_is_checked(target: str) -> None:
    k = compiler.define(EARLY_READ, target=target, cache=False)
    i, j = np.arange(1, 6, dtype=np.float32), np.arange(10, 13, dtype=np.float32)
    b, low = k(i, j)  # N = 5 >= M = 3: L reads what B(x) = I(x) wrote
    np.testing.assert_array_equal(low, i[:3])
    np.testing.assert_array_equal(b, np.concatenate([j, i[3:]]))
    with pytest.raises(ShapeError) as info:  # N = 3 < M = 5: L(3), L(4) read unwritten B
        k(j, i)
    assert "this def reads `B(x)` out of bounds with N=3, M=5: it needs `N >= M`" in str(info.value)
    assert info.value.diagnostics[0].span.line == 3


@pytest.mark.parametrize("target", TARGETS)
def test_a_size_relation_is_named(target: str) -> None:
    k = compiler.define(GRU, target=target, cache=False)
    rng = np.random.default_rng(48)
    gates, h = (
        rng.normal(size=(2, 16)).astype(np.float32),
        rng.normal(size=(2, 4)).astype(np.float32),
    )
    (got,) = k(gates, h)
    r = 1 / (1 + np.exp(-gates[:, :4]))
    np.testing.assert_allclose(got, r * np.tanh(gates[:, 12:16]) + (1 - r) * h, rtol=1e-5)
    with pytest.raises(ShapeError) as info:
        k(gates[:, :12], h)
    message = str(info.value)
    assert "reads `gates(n, 3 * H + j)` out of bounds with N=2, G=12, H=4" in message
    assert "it needs `G >= 4 * H`" in message and "index tensor" not in message


def test_a_data_dependent_guard_is_checked_read_by_read() -> None:
    # whether the read happens depends on C: no size relation is required up front
    src = "def f(float(N) C, float(M) B) -> (O) { O(i) = C(i) > 0 ? B(i) : 0 where i in 0:N }"
    (warning,) = _warnings(src)
    assert "it needs `M >= N`, which is checked at run time" in warning
    k = compiler.define(src, target="llvm", cache=False)
    c = np.array([1, 1, -1, -1], np.float32)
    (got,) = k(c, np.array([5, 6], np.float32))
    np.testing.assert_array_equal(got, [5, 6, 0, 0])
    with pytest.raises(ShapeError, match="index 2 out of range for dimension 0 of 'B'") as info:
        k(-c, np.array([5, 6], np.float32))
    assert "the subscript `i` depends on sizes and index variables only" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_the_run_time_hint_names_the_cause(target: str) -> None:
    guarded = "def f(float(N) C, float(M) B) -> (O) { O(i) = C(i) > 0 ? B(i) : 0 where i in 0:N }"
    indirect = "def f(int32(N) idx, float(M) B) -> (O) { O(i) = B(idx(i)) }"
    b = np.array([5, 6], np.float32)
    with pytest.raises(ShapeError) as info:
        compiler.define(guarded, target=target, cache=False)(np.ones(3, np.float32), b)
    assert "`i` depends on sizes and index variables only" in str(info.value)
    assert "index tensor" not in str(info.value)
    with pytest.raises(ShapeError) as info:
        compiler.define(indirect, target=target, cache=False)(np.array([0, 7], np.int32), b)
    assert "index 7 out of range" in str(info.value)
    assert "check the index tensor's values" in str(info.value)
