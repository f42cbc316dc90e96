"""Gradients of programs the differential random-program tester (tools/fuzz.py) found
wrong or rejected, in float64 against central differences of the interp target's
forward, on every CPU target:

- a clamp piece whose condition has `min`/`max` bounds (`i in 0:max(N, 2) - 1`), or
  that is taken only where a read is out of bounds, is empty and dropped (F2);
- a left-hand side that names one element at several points (`O(i1 + k2)`) is a
  reduction: the tangent of a `*=!` into it sums every point's term (F5);
- `max=` / `min=` as an output's first write update its initial zeros, a constant,
  in forward mode as in reverse mode (F6);
- a clamp piece empty for every size through a floor-divided bound
  (`i in 0:(N - 3) / 3 + 1`) is dropped (G1);
- a tangent whose every term is a symbolic zero (through `floor`) is a zero tangent,
  and a zero `+=` tangent still writes zeros where the output's shape is inferred (G2);
- a select's condition that reads an intermediate version (`O(i) < B(i) ? ...` between
  two writes of O) has that version recomputed (G3);
- `max=` / `min=` into a left-hand side that names one element at several points
  (`O(i1 + k2)`) has a tangent as it has a gradient: every tied point's (G4).

jvp is also checked against the interp target's central differences and the
dot-product identity <jvp(t), c> == <t, vjp(c)>.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.autodiff.emptiness import runs_never
from compiler.frontend.parser import parse
from compiler.poly.gather import check_assignments
from tests.autodiff.kit import ranged

TARGETS = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}

# name -> (source, input shapes)
VJP = {
    "clamp with piecewise extent": (
        """def f(double(N) A) -> (O) {
            O(i3) = A(min(i3, N - 1)) where i3 in 0:max(min(N, N), 2) - 1
        }""",
        [(1,)],
    ),
    "clamp with piecewise extent, N = 4": (
        """def f(double(N) A) -> (O) {
            O(i3) = A(min(i3, N - 1)) where i3 in 0:max(min(N, N), 2) - 1
        }""",
        [(4,)],
    ),
    "clamp piece out of bounds": (
        """def f(double(N) A, double(N) B) -> (O, P) {
            O(i1, i2) +=! A(k3) where i1 in 0:2 * N - 2, i2 in 0:1
            P(i5) +=! B(i5) >= 2.0 ? 1.0 : O(min(i5, 2 * N - 2 - 1), k6)
                where i5 in 0:N, k6 in 0:min(1, N)
        }""",
        [(3,), (3,)],
    ),
    "clamp piece empty through a floor-divided bound": (
        "def f(double(N) A) -> (O) { O(i) += A(min(i, N - 1)) where i in 0:(N - 3) / 3 + 1 }",
        [(3,)],
    ),
    "clamp piece empty through a floor-divided bound, N = 7": (
        "def f(double(N) A) -> (O) { O(i) += A(min(i, N - 1)) where i in 0:(N - 3) / 3 + 1 }",
        [(7,)],
    ),
    "guard reading an intermediate version": (
        """def f(double(N) A, double(N) B, double(N) C) -> (O) {
            O(i1) = A(i1) where i1 in 0:N
            O(i2) = O(i2) < B(i2) ? C(i2) * C(i2) : B(i2) where i2 in 0:N - 1
            O(i3) += C(i3) where i3 in 0:N
        }""",
        [(5,), (5,), (5,)],
    ),
}


JVP = {
    "product into colliding elements": (
        """def f(double(N) A) -> (O) {
            O(i1 + k2) *=! A(3 * i1 + k2) where i1 in 0:(N - 1 - 1) / 3 + 1, k2 in 0:2
        }""",
        [(5,)],
    ),
    "product into colliding elements, 2-d": (
        "def f(double(N, M) A) -> (O) { O(i1 + 3 * k2) *=! A(i1, k2) }",
        [(5, 3)],
    ),
    "max=! into colliding elements": (
        "def f(double(N, M) A) -> (O) { O(i1 + 3 * k2) max=! A(i1, k2) * A(i1, k2) }",
        [(5, 3)],
    ),
    "+=! into colliding elements": (
        "def f(double(N, M) A) -> (O) { O(i1 + 3 * k2) +=! A(i1, k2) * A(i1, k2) }",
        [(5, 3)],
    ),
    "max= as first write": (
        "def f(double(N) A) -> (O) { O(i1) max= A(k2) where i1 in 0:N }",
        [(4,)],
    ),
    "min= as first write": (
        "def f(double(N) A) -> (O) { O(i1) min= A(k2) * A(i1) where i1 in 0:N }",
        [(4,)],
    ),
    "+= as first write": (
        "def f(double(N) A) -> (O) { O(i1) += A(k2) * A(i1) where i1 in 0:N }",
        [(4,)],
    ),
    "zero tangent through floor": (
        """def f(double(N) A) -> (O, P) {
            O(i) = A(i) * A(i)
            P(i) += floor(O(i)) where i in 0:N
        }""",
        [(4,)],
    ),
    "zero tangent through floor, then a partial +=": (
        """def f(double(N) A) -> (P) {
            P(i) += floor(A(i)) where i in 0:N
            P(i) += A(i) * A(i) where i in 0:N - 1
        }""",
        [(4,)],
    ),
    "max= as first write into colliding elements": (
        """def f(double(N, N) A) -> (O) {
            O(i1 + k2) max= A(i1 + k2, min(k2, N - 1)) where i1 in 0:N - 3 + 1, k2 in 0:3
        }""",
        [(4, 4)],
    ),
    "max= into colliding elements after a write": (
        """def f(double(N, M) A, double(N) B) -> (O) {
            O(i) = B(i) where i in 0:N
            O(i1 + k2) max= A(i1, k2) where i1 in 0:N - M + 1
        }""",
        [(6, 3), (6,)],
    ),
    "min= into colliding elements between writes": (
        """def f(double(N, M) A, double(N) B) -> (O) {
            O(i) = B(i) where i in 0:N
            O(i1 + k2) min= A(i1, k2) where i1 in 0:N - M + 1
            O(i) = O(i) * B(i)
        }""",
        [(6, 3), (6,)],
    ),
}
VJP |= JVP


def _central(source: str, arrays: list[np.ndarray], cotangents, eps: float = 1e-6):
    """<c, d forward / d a> by central differences of the interp target's forward."""
    ref = compiler.define(source, target="interp", cache=False)
    grads = []
    for n, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[n][idx] += eps
            lo[n][idx] -= eps
            pairs = zip(ref(*hi), ref(*lo), cotangents, strict=True)
            g[idx] = sum(float(np.vdot(h - m, c)) for h, m, c in pairs) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.filterwarnings("ignore::compiler.kernel.TCWarning")
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(VJP))
def test_vjp_matches_central_differences(case: str, target: str) -> None:
    source, shapes = VJP[case]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in shapes]
    k = compiler.define(source, cache=False, **TARGETS[target])
    outputs = k(*arrays)
    cotangents = [rng.standard_normal(o.shape) for o in outputs]
    got = k.vjp(*arrays, grad_outputs=tuple(cotangents))
    for g, w in zip(got, _central(source, arrays, cotangents), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.mark.filterwarnings("ignore::compiler.kernel.TCWarning")
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(JVP))
def test_jvp_matches_central_differences_and_vjp(case: str, target: str) -> None:
    source, shapes = JVP[case]
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal(s) for s in shapes]
    tangents = [rng.standard_normal(s) for s in shapes]
    k = compiler.define(source, cache=False, **TARGETS[target])
    ref = compiler.define(source, target="interp", cache=False)
    eps = 1e-6
    plus = ref(*[a + eps * t for a, t in zip(arrays, tangents, strict=True)])
    minus = ref(*[a - eps * t for a, t in zip(arrays, tangents, strict=True)])
    outputs, dots = k.jvp(*arrays, tangents=tuple(tangents))
    for got, p, m in zip(dots, plus, minus, strict=True):
        np.testing.assert_allclose(got, (p - m) / (2 * eps), rtol=1e-6, atol=1e-7)
    cotangents = [rng.standard_normal(o.shape) for o in outputs]
    grads = k.vjp(*arrays, grad_outputs=tuple(cotangents))
    lhs = sum(float(np.vdot(d, c)) for d, c in zip(dots, cotangents, strict=True))
    rhs = sum(float(np.vdot(t, g)) for t, g in zip(tangents, grads, strict=True))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)


@pytest.mark.filterwarnings("ignore::compiler.kernel.TCWarning")
def test_product_as_first_write_is_refused_in_both_modes() -> None:
    src = "def f(double(N) A) -> (O) { O(i1) *= A(k2) where i1 in 0:N }"
    k = compiler.define(src, target="interp", cache=False)
    a = np.ones(3)
    with pytest.raises(compiler.TCError, match="first write of 'O'"):
        k.jvp(a, tangents=(a,))
    with pytest.raises(compiler.TCError, match="first write of 'O'"):
        k.vjp(a, grad_outputs=(a,))


def test_min_max_bounds_are_split_into_cases() -> None:
    """i >= N and i in 0:max(N, 2) - 1 is empty (N >= 2: i <= N - 2; N = 1: i <= 0);
    i >= N - 1 is not (N = 1, i = 0)."""
    stmt = (
        parse(
            "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:max(min(N, N), 2) - 1, "
            "i - N in 0:i - N + 1 }"
        )
        .get()
        .stmts[0]
    )
    assert runs_never(stmt.where, ("N",))
    stmt = (
        parse(
            "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:max(min(N, N), 2) - 1, "
            "i - N + 1 in 0:i - N + 2 }"
        )
        .get()
        .stmts[0]
    )
    assert not runs_never(stmt.where, ("N",))


def test_colliding_assignment_of_a_generated_def_is_an_error() -> None:
    """The defs AD generates are checked as the gather pass checks `=` scatters, so an
    `O_dot(i1 + k2) = ...` is an error on the interp target too (which would keep one
    of the values)."""
    colliding = ranged("def f(double(N) A) -> (O) { O(i + k) = A(i) where i in 0:N, k in 0:2 }")
    with pytest.raises(compiler.TCError, match="more than once"):
        check_assignments(colliding)
    check_assignments(ranged("def f(double(N) A) -> (O) { O(2 * i + 1) = A(i) }"))


def test_floor_divided_bounds_are_split_into_quotients() -> None:
    """i >= N and i in 0:(N - 3) / 3 + 1 is empty (i <= (N - 3) / 3 < N); i equal to the
    quotient is not; i >= 1 and i in 0:N % 2 is empty (N % 2 <= 1)."""
    defs = {
        "i - N in 0:i - N + 1": True,
        "i - (N - 3) / 3 in 0:1": False,
    }
    for clause, empty in defs.items():
        src = f"def f(double(N) A) -> (O) {{ O(i) = A(i) where i in 0:(N - 3) / 3 + 1, {clause} }}"
        assert runs_never(parse(src).get().stmts[0].where, ("N",)) is empty, clause
    src = "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:N % 2, i in 1:2 }"
    assert runs_never(parse(src).get().stmts[0].where, ("N",))
    src = "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:N % 2 + 1, i in 1:2 }"
    assert not runs_never(parse(src).get().stmts[0].where, ("N",))


@pytest.mark.filterwarnings("ignore::compiler.kernel.TCWarning")
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_colliding_max_ties_follow_reverse_mode(target: str) -> None:
    """Every point tied at an element's maximum contributes its whole tangent, as each
    receives the whole adjoint in reverse mode: with A constant every point ties."""
    src = "def f(double(N, M) A) -> (O) { O(i1 + k2) max=! A(i1, k2) }"
    src_first = "def f(double(N, M) A) -> (O) { O(i1 + k2) max= A(i1, k2) }"
    a = np.ones((4, 3))
    t = np.random.default_rng(3).standard_normal(a.shape)
    want = np.zeros(6)
    for i, k in np.ndindex(a.shape):
        want[i + k] += t[i, k]
    for source in (src, src_first):
        k = compiler.define(source, cache=False, **TARGETS[target])
        (out,), (dot,) = k.jvp(a, tangents=(t,))
        np.testing.assert_array_equal(out, np.ones(6))
        np.testing.assert_allclose(dot, want, rtol=1e-12)
        c = np.random.default_rng(4).standard_normal(6)
        (g,) = k.vjp(a, grad_outputs=(c,))
        assert float(np.vdot(dot, c)) == pytest.approx(float(np.vdot(t, g)), rel=1e-12)
