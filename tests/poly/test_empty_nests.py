"""A nest whose domain is empty at every size a call may have gets no loops.

The gradient of `O1(i) = A(min(1, N - 1), 0)` next to a read `A(0, i + j)` with
`j in 0:4` has a version of the clamp for `N == 1`, while its input `O3_grad` has the
extent `N - 3`, so every call has N >= 4 (the schedule's size context): isl builds no
AST for that nest's empty domain (a raw isl error before). Oracle: the cotangents
scattered by hand with NumPy, and central differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.cpu.model import schedule
from compiler.pipeline import run

SRC = """def f(double(N, N) A) -> (O1, O3) {
    O1(i) = A(min(1, N - 1), 0) where i in 1:8
    O3(i) +=! A(0, i + j) where j in 0:4
}"""


def _vjp(a: np.ndarray, c1: np.ndarray, c3: np.ndarray) -> np.ndarray:
    n = a.shape[0]
    out = np.zeros_like(a)
    for i in range(1, 8):
        out[min(1, n - 1), 0] += c1[i]
    for i in range(n - 3):
        for j in range(4):
            out[0, i + j] += c3[i]
    return out


@pytest.mark.parametrize("target", ("interp", "llvm", "cuda-emulated"))
@pytest.mark.parametrize("n", (4, 6))
def test_gradient_with_a_version_no_call_runs(target: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    k = compiler.define(SRC, target=target)
    o1, o3 = k(a)
    c1, c3 = rng.standard_normal(o1.shape), rng.standard_normal(o3.shape)
    (got,) = k.vjp(a, grad_outputs=(c1, c3))
    np.testing.assert_allclose(got, _vjp(a, c1, c3), rtol=1e-12, atol=1e-12)


def test_gradcheck() -> None:
    a = np.random.default_rng(0).standard_normal((5, 5))
    compiler.gradcheck(compiler.define(SRC, options=Options(threads=2)), a)


def test_the_nest_is_dropped() -> None:
    gradient = run(SRC, grad=True, upto="gather")
    sched = schedule(gradient)
    assert sched.nests
    for nest in sched.nests:
        assert not nest.domain.intersect_params(sched.context).is_empty()
    # the statement is still in the def: only its nest is gone
    scheduled = {n.index for n in sched.nests}
    assert len(scheduled) < len(gradient.checked.stmts)


# The summed `k in M:N` implies M < N, under which isl drops `i < N` beside `i < M`.
ACCUMULATE = """def f(double(N) A, double(M) B) -> (O) {
  O(i) = A(i) where i in 0:N
  O(i) += B(i) * A(k) where i in 0:N, M - 1 - i in 0:M, k in M:N
}"""


def _accumulate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n, m = a.size, b.size
    out = a.copy()
    for i in range(min(n, m)):
        out[i] += sum(b[i] * a[k] for k in range(m, n))
    return out


@pytest.mark.parametrize(("n", "m"), [(2, 7), (7, 2), (3, 3), (1, 1)])
def test_a_register_sum_runs_only_where_its_domain_is_not_empty(n: int, m: int) -> None:
    """A register accumulator is loaded and stored outside the summed loops, which isl
    lets run over outer iterations with no statement instance: with M > N - 1 the loop
    over `i` ran to M, past O's end (fuzz seed 61918 corrupted the heap). The lowered
    loops run in the loop-IR interpreter, which raises on any access outside a buffer,
    and on llvm and cuda-emulated against NumPy."""
    from compiler.loops.interp import run_function
    from compiler.pipeline import lower

    a, b = np.arange(1.0, n + 1), np.arange(1.0, m + 1) * 0.5
    want = _accumulate(a, b)
    lowered = lower(run(ACCUMULATE, None, upto="ranges"), Options(threads=1))
    out = np.zeros(n)
    run_function(lowered.function, {"A": a, "B": b, "O": out}, {"N": n, "M": m})
    np.testing.assert_array_equal(out, want)
    for target in ("llvm", "cuda-emulated"):
        (got,) = compiler.define(ACCUMULATE, target=target)(a, b)
        np.testing.assert_array_equal(got, want)


# Reduced from a gradient of fuzz seed 71871 (a heap overflow on llvm and cuda-emulated):
# isl runs the loop over `y` up to `5 * M - 5`, each iteration under a guard that is the
# hull of its pieces' guards, while the domain ends at `3 * N + 2 * M - 9` for N == M.
HULL = """def g(double(N, M) A) -> (double(3 * N + 2 * M - 8) O) {
    O(y) min=! A(k2, (y + k2) / 2 - 2 * k2) where y in 3:min(min(5 * N - 4, 3 * N + 2 * M - 8), 5 * M - 5), k2 in max(y + 2 * (-y / 2) + 2, y - 2 * ((y + M) / 3) + 2):min(y + 2 * ((M - y) / 2) + 1, y + 2 * (-y / 3) + 1), (y + k2) % 2 in 0:1
}"""  # noqa: E501


def _hull(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """O by plain loops (floor division and a non-negative `%`, as TC's), and which of
    its elements the statement writes."""
    n, m = a.shape
    out = np.full(3 * n + 2 * m - 8, np.inf)
    written = np.zeros(out.shape, dtype=bool)
    for y in range(3, min(5 * n - 4, 3 * n + 2 * m - 8, 5 * m - 5)):
        lo = max(y + 2 * (-y // 2) + 2, y - 2 * ((y + m) // 3) + 2)
        hi = min(y + 2 * ((m - y) // 2) + 1, y + 2 * (-y // 3) + 1)
        for k2 in range(lo, hi):
            if (y + k2) % 2 == 0:
                out[y] = min(out[y], a[k2, (y + k2) // 2 - 2 * k2])
                written[y] = True
    return out, written


@pytest.mark.parametrize(("n", "m"), [(3, 3), (2, 5), (4, 4), (6, 5), (8, 7)])  # A read in bounds
def test_a_register_sum_stores_only_where_an_iteration_has_instances(n: int, m: int) -> None:
    """The accumulator's store at the `reduce` mark runs under isl's condition that the
    enclosing loops' iteration has instances (`ast_tree._annotated`), not in every
    iteration of loops whose guards isl hoisted as a hull. The lowered loops run in
    the loop-IR interpreter, which raises on any access outside a buffer (O[7] of 7
    elements before), then llvm and cuda-emulated against plain loops."""
    from compiler.loops.interp import run_function
    from compiler.pipeline import lower
    from compiler.poly.astgen import ERROR_BUFFER

    a = np.random.default_rng(n * 10 + m).standard_normal((n, m))
    want, written = _hull(a)
    lowered = lower(run(HULL, None, upto="ranges"), Options(threads=1))
    out, error = np.zeros(want.shape), np.zeros(2, np.int64)  # its reads are checked
    run_function(lowered.function, {"A": a, "O": out, ERROR_BUFFER: error}, {"N": n, "M": m})
    assert not error.any()
    np.testing.assert_array_equal(out[written], want[written])
    for target in ("llvm", "cuda-emulated"):
        (got,) = compiler.define(HULL, target=target)(a)
        np.testing.assert_array_equal(got[written], want[written])
        np.testing.assert_array_equal(got, out)  # the unwritten ones as the loops leave them
