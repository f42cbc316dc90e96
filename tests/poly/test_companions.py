"""Companions (`poly.schedule._with_companions`): a pointwise statement computed inside
a later reduction's nest over the same domain. Checked: which statements merge and
which may not (a conflict on the way, another domain, a register reduction), the
results against the reference evaluator at odd sizes, and bit for bit against the
same def with `Options(fuse=False)` (one nest per statement), signed zeros included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler import loops as L
from compiler import pipeline
from compiler.cpu.model import schedule
from compiler.options import Options
from compiler.poly.schedule import NestKind

# the gradient of C(i) +=! exp(A(i, j)) * b(j), as AD writes it
EXPMV_GRAD = """
def g(float(M, N) A, float(N) b, float(M) C_grad) -> (A_grad, b_grad) {
    A_grad(i, j) +=! C_grad(i) * b(j) * exp(A(i, j)) where i in 0:M, j in 0:N
    b_grad(j) +=! C_grad(i) * exp(A(i, j)) where i in 0:M, j in 0:N
}
"""


def _nests(src: str, options: Options | None = None) -> list:
    ranged = compiler.define(src, target="interp").ranged
    return list(schedule(ranged, options or Options()).nests)


def _companions(src: str) -> dict[str, list[str]]:
    """Each statement nest's target -> its companions' targets."""
    return {
        n.target: [c.target for c in n.companions] for n in _nests(src) if n.kind is NestKind.STMT
    }


def test_the_pointwise_gradient_runs_in_the_column_reduction_nest() -> None:
    assert _companions(EXPMV_GRAD) == {"b_grad": ["A_grad"]}
    f = pipeline.lower(compiler.define(EXPMV_GRAD, target="interp").ranged, Options())
    init, versions = f.function.body.stmts  # type: ignore[attr-defined]
    assert isinstance(versions, L.If)  # fused with 2 strips or more, else apart
    assert L.print_expr(versions.cond) == "floordiv(N - 1, 1024) + 1 - 0 >= 2"
    fused = L.print_stmt(versions.then)
    # both statements at each row of the 4-row jam and of its remainder loop
    assert fused.count("exp(A[i, j])") == 2 * 2 and fused.count("exp(A[i + 3, j])") == 2
    assert fused.count("parallel for") == 1
    apart = versions.otherwise
    assert isinstance(apart, L.Block) and len(apart.stmts) == 2  # A_grad's nest, b_grad's
    assert L.print_stmt(apart.stmts[0]).startswith("parallel for (i = 0")
    no_fuse = _nests(EXPMV_GRAD, Options(fuse=False))
    assert not any(n.companions for n in no_fuse)


@pytest.mark.parametrize(
    ("src", "why"),
    [
        (
            "def f(float(M, N) A) -> (B, C) {\n    B(i, j) = exp(A(i, j))\n"
            "    C(j) +=! B(i, j) where i in 0:M\n}",
            "the host reads the pointwise output",
        ),
        (
            "def f(float(M, N) A) -> (B, C) {\n    B(i, j) = A(i, j) * 2.0\n"
            "    C(j) +=! A(i, j) where i in 0:M - 1\n}",
            "another domain",
        ),
        (
            "def f(float(M, N) A) -> (B, C) {\n    B(i, j) = A(i, j) * 2.0\n"
            "    C(i) +=! A(i, j)\n}",
            "a reduction in a register",
        ),
        (
            "def f(float(M, N) A) -> (B, C, D) {\n    B(i, j) = A(i, j) * 2.0\n"
            "    D(i) +=! B(i, j)\n    C(j) +=! A(i, j)\n}",
            "a nest on the way reads the pointwise output",
        ),
        (
            "def f(float(M, N) A) -> (C, B) {\n    C(j) = A(0, j)\n"
            "    B(i, j) = A(i, j) * C(j)\n    C(j) += A(i, j) where i in 0:M\n}",
            "the host writes what the pointwise statement reads",
        ),
        (
            "def f(float(M, N) A) -> (B, C) {\n    B(i, j) = A(i, j) * 2.0\n"
            "    C(i + j) +=! A(i, j)\n}",
            "a serial host (a scatter) for a parallel statement",
        ),
        (
            "def f(float(M, N) A, int32(M) idx) -> (B, float(M) E, C) {\n"
            "    B(i, j) = idx(i) + int32(A(i, j))\n    E(B(i, 0)) +=! A(i, 0) where i in 0:M\n"
            "    C(j) +=! A(i, j) where i in 0:M\n}",
            "a nest on the way reads the pointwise output in a subscript of its left side",
        ),
        (
            "def f(float(M, N) A) -> (B, D, C) {\n    B(i, j) = A(i, j) * 2.0\n"
            "    D(i) +=! t where t = B(i, j)\n    C(j) +=! A(i, j) where i in 0:M\n}",
            "a nest on the way reads the pointwise output in a let",
        ),
    ],
)
def test_no_companion_where_it_is_not_allowed(src: str, why: str) -> None:
    nests = _nests(src)
    assert not any(n.companions for n in nests), why


def test_a_companion_after_an_unrelated_nest() -> None:
    src = (
        "def f(float(M, N) A, float(K) x) -> (B, y, C) {\n    B(i, j) = A(i, j) * 2.0\n"
        "    y(k) = x(k) + 1.0\n    C(j) +=! A(i, j) where i in 0:M\n}"
    )
    assert _companions(src) == {"y": [], "C": ["B"]}


def _arrays(m: int, n: int, seed: int, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((m, n)) / 2).astype(dtype),
        rng.standard_normal(n).astype(dtype),
        rng.standard_normal(m).astype(dtype),
    ]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.sampled_from([1, 2, 3, 5, 7, 13, 31, 1025, 1031]),
    n=st.sampled_from([1, 2, 3, 7, 17, 1023, 1025]),
    seed=st.integers(0, 2**16),
)
def test_companions_match_the_reference_and_the_unfused_nests(m: int, n: int, seed: int) -> None:
    arrays = _arrays(m, n, seed)
    want = compiler.define(EXPMV_GRAD, target="interp")(*arrays)
    fused = compiler.define(EXPMV_GRAD, cache=False)(*arrays)
    apart = compiler.define(EXPMV_GRAD, cache=False, options=Options(fuse=False))(*arrays)
    for w, f, a in zip(want, fused, apart, strict=True):
        # b_grad sums m float32 terms: its rounding grows with m
        np.testing.assert_allclose(f, w, rtol=2e-5, atol=2e-6 * (m + 10))
        np.testing.assert_array_equal(f, a)  # the same operations per element


def test_a_companion_keeps_the_sign_of_zero_the_reference_gives() -> None:
    src = EXPMV_GRAD.replace("float(", "double(")
    arrays = _arrays(9, 1031, 1, np.float64)  # two strips: the fused nest runs
    arrays[2][:] = -0.0  # every A_grad term is -0.0, and 0 + -0.0 is +0.0
    want = compiler.define(src, target="interp")(*arrays)
    fused = compiler.define(src, cache=False)(*arrays)
    apart = compiler.define(src, cache=False, options=Options(fuse=False))(*arrays)
    assert not np.signbit(want[0]).any()
    for w, f, a in zip(want, fused, apart, strict=True):
        assert f.tobytes() == w.tobytes()
        # a nest of its own adds to a register accumulator with LLVM's reduction
        # flags, which may drop `0 +` and keep -0.0: equal values all the same
        np.testing.assert_array_equal(f, a)


def test_the_expsum_gradient_through_vjp_matches_the_reference() -> None:
    src = "def e(float(M, N) A, float(N) b) -> (C) {\n    C(i) +=! exp(A(i, j)) * b(j)\n}"
    a, b, g = _arrays(37, 1031, 3)
    got = compiler.define(src, cache=False).vjp(a, b, grad_outputs=(g,))
    want = compiler.define(src, target="interp").vjp(a, b, grad_outputs=(g,))
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_a_statement_read_on_the_way_stays_in_place_and_results_hold() -> None:
    # B would join C's nest, but D reads B on the way: B stays; D (last) joins C
    src = (
        "def f(float(M, N) A) -> (B, D, C) {\n    B(i, j) = exp(A(i, j))\n"
        "    D(i, j) = B(i, j) * 2.0\n    C(j) +=! A(i, j) where i in 0:M\n}"
    )
    assert _companions(src) == {"B": [], "C": ["D"]}
    a = _arrays(5, 1031, 2)[0]
    want = compiler.define(src, target="interp")(a)
    for got, w in zip(compiler.define(src, cache=False)(a), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=1e-4)
