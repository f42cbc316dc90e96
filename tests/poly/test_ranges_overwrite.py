"""Range inference after a partial overwrite (issue 14).

A statement that reads exactly the element it writes (`B(x) = B(x) * 2`) reads inside
the output's final shape, even where earlier statements wrote less: it is not "out of
bounds for every size". Results are compared with NumPy on every target.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import RangeError

PARTIAL = (
    "def f(float(N) I) -> (B) {\n"
    "    B(x) = I(x + 1) where x in 0:N - 1\n"
    "    B(x) = B(x) * 2 where x in N - 1:N\n"
    "}\n"
)
PIECES = (
    "def f(float(N) I) -> (B) {\n"
    "    B(x) = I(x + 1) where x in 0:N - 1\n"
    "    B(x) = I(0) where x in N - 1:N\n"
    "    B(x) = B(x) * 2 where x in 0:N\n"
    "}\n"
)


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_partial_overwrite(target: str, n: int) -> None:
    a = np.arange(1, n + 1, dtype=np.float32)
    (got,) = compiler.define(PARTIAL, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, np.append(a[1:], 0.0))  # B(N - 1) was never written
    (got,) = compiler.define(PIECES, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, 2 * np.append(a[1:], a[0]))


def test_shapes_are_the_hull_of_the_writes() -> None:
    assert compiler.infer_shapes(PIECES, "f", {"I": (5,)}) == {"B": (5,)}


def test_a_different_element_is_still_checked() -> None:
    src = PARTIAL.replace("B(x) = B(x) * 2", "B(x) = B(x + 1) * 2")
    with pytest.raises(RangeError, match="out of bounds for every size"):
        compiler.define(src, target="interp")


# Issue 43: a read of an output is bounded by its extent so far (the hull of every
# earlier write), not by the latest write, which may be partial.
UPDATE = (
    "def update(double(N) I) -> (B, U, L) {\n"
    "    B(x) = I(x)\n"
    "    B(x) += I(x + 1) where x in 0:N-1\n"
    "    B(x) += I(x) where x in N-1:N\n"
    "    U(x) = I(x)\n"
    "    U(x) = U(x) * U(x) + I(x + 1) where x in 0:N-1\n"
    "    U(x) = U(x) * U(x) + I(x) where x in N-1:N\n"
    "    L +=! B(x) * B(x) + U(x)\n"
    "}\n"
)
DOUBLED_HEAD = (
    "def f(float(N) I) -> (B, L) {\n"
    "    B(x) = I(x)\n"
    "    B(x) = B(x) * 2 where x in 0:N-1\n"
    "    L(x) = B(x) + 1 where x in 0:N\n"
    "}\n"
)


def _update_oracle(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    b = a.copy()
    b[:-1] += a[1:]
    b[-1] += a[-1]
    u = a.copy()
    u[:-1] = u[:-1] ** 2 + a[1:]
    u[-1] = u[-1] ** 2 + a[-1]
    return b, u, float((b * b + u).sum())


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_a_read_after_partial_updates_sees_the_whole_extent(target: str) -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b, u, total = compiler.define(UPDATE, target=target, cache=False)(a)
    want_b, want_u, want_total = _update_oracle(a)
    np.testing.assert_allclose(b, want_b)
    np.testing.assert_allclose(u, want_u)
    assert float(total) == pytest.approx(want_total) == 190.0  # not 84: one element


def test_the_reads_range_is_the_hull_of_the_writes() -> None:
    from compiler import pipeline
    from compiler.frontend.printer import print_stmt

    ranged = pipeline.run(UPDATE, upto="ranges")
    last = print_stmt(ranged.checked.definition.stmts[-1])
    assert last.strip().endswith("where x in 0:N"), last


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_partial_overwrite_then_a_read_of_everything(target: str) -> None:
    a = np.arange(1, 5, dtype=np.float32)
    b, total = compiler.define(DOUBLED_HEAD, target=target, cache=False)(a)
    want = np.append(2 * a[:-1], a[-1])
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(total, want + 1)


def test_beyond_the_hull_of_the_writes_is_still_an_error() -> None:
    src = DOUBLED_HEAD.replace("B(x) = I(x)\n", "B(x) = I(x) where x in 0:N-1\n")
    with pytest.raises(RangeError, match="out of bounds for every size"):
        compiler.define(src, target="interp")


# An output written from 1:N holds its initial value at 0: a read over a range the def
# states may touch it (found by tools.fuzz); inference of a free index still starts at 1.
LEADING_GAP = (
    "def f(double(N) A) -> (O, P) {\n"
    "    O(i) = A(i) where i in 1:N\n"
    "    P(i) = O(i) where i in 0:N\n"
    "}\n"
)


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_a_stated_read_below_the_first_write_reads_the_initial_value(target: str) -> None:
    a = np.array([3.0, -1.5, 2.25, 0.5])
    o, p = compiler.define(LEADING_GAP, target=target, cache=False)(a)
    want = np.append(0.0, a[1:])
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(p, want)
    g = np.array([1.0, 10.0, 100.0, 1000.0])
    (a_grad,) = compiler.define(LEADING_GAP, target=target, cache=False).vjp(
        a, grad_outputs=(g, 2 * g)
    )
    np.testing.assert_array_equal(a_grad, np.append(0.0, 3 * g[1:]))


def test_an_inferred_read_range_starts_at_the_first_write() -> None:
    from compiler import pipeline
    from compiler.frontend.printer import print_stmt

    src = LEADING_GAP.replace("P(i) = O(i) where i in 0:N", "P max=! O(i)")
    ranged = pipeline.run(src, upto="ranges")
    assert print_stmt(ranged.checked.definition.stmts[-1]).strip().endswith("where i in 1:N")
    a = np.array([-3.0, -1.5, -2.25, -0.5])
    _, p = compiler.define(src, target="interp")(a)
    assert float(p) == -0.5  # not the initial 0 of O(0)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_partial_reset_reduction_has_a_gradient(target: str) -> None:
    src = (
        "def f(double(N, M) A) -> (O) {\n"
        "    O(i1, 2 * i2 + k3) min=! A(k3, min(i1, M - 1)) where i1 in 1:N, i2 in 1:M\n"
        "}\n"
    )
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4))
    k = compiler.define(src, target=target, cache=False)
    (o,) = k(a)
    g = rng.standard_normal(o.shape)
    g[~np.isfinite(o)] = 0.0  # elements no candidate reached stay +inf
    (got,) = k.vjp(a, grad_outputs=(g,))
    want = np.zeros_like(a)
    # brute force: each output element's winner gets that element's cotangent
    for i1 in range(1, 3):
        best: dict[int, tuple[float, tuple[int, int]]] = {}
        for i2 in range(1, 4):
            for k3 in range(3):
                col, v = 2 * i2 + k3, a[k3, min(i1, 3)]
                if col not in best or v < best[col][0]:
                    best[col] = (v, (k3, min(i1, 3)))
        for col, (_, idx) in best.items():
            want[idx] += g[i1, col]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
