"""The tie rule of `max=` / `min=` gradients (docs/language.md): where one value can be
several candidates of an element (a clamped read's edge, a term without the summed
variable, the previous value), the adjoint is split among the candidates equal to the
result, so the gradient is that value's derivative; forward mode takes their
tangents' mean, so <jvp(t), c> == <t, vjp(c)>. The references are NumPy, differenced
centrally in float64."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.autodiff.products import distinct_terms
from compiler.frontend.parser import parse

N = 7


def _edge_pool(a: np.ndarray) -> np.ndarray:  # replicate padding, window 3
    idx = np.clip(np.arange(N)[:, None] + np.arange(3)[None, :] - 1, 0, N - 1)
    return a[idx].max(axis=1)


def _repeated(a: np.ndarray) -> np.ndarray:  # the same term three times
    return a.copy()


def _after_previous(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # O = B, then max=
    idx = np.clip(np.arange(N)[:, None] + np.arange(3)[None, :], 0, N - 1)
    return np.maximum(b, a[idx].max(axis=1))


def _scatter_same(a: np.ndarray) -> np.ndarray:  # O(i + k) max=! A(0)
    return np.full(N + 2, a[0])


def _suffix_max(a: np.ndarray) -> np.ndarray:  # O(i) = max of A(k) over k >= i
    return np.maximum.accumulate(a[::-1])[::-1]


def _previous_suffix_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(b, _suffix_max(a))


CASES = {
    "clamped edge": (
        "def f(double(N) A) -> (O) {\n"
        "  O(i) max=! A(min(max(i + k - 1, 0), N - 1)) where i in 0:N, k in 0:3\n}",
        _edge_pool,
    ),
    "term without the summed variable": (
        "def f(double(N) A) -> (O) { O(i) max=! A(i) where i in 0:N, k in 0:3 }",
        _repeated,
    ),
    "previous value and a clamp": (
        "def f(double(N) A, double(N) B) -> (O) {\n"
        "  O(i) = B(i)\n"
        "  O(i) max= A(min(i + k, N - 1)) where i in 0:N, k in 0:3\n}",
        _after_previous,
    ),
    # the written index ranged through the summed variable (`i in 0:k + 1`): its
    # tangent's first write covers the output's bounds (fuzz seed 61308)
    "triangular range": (
        "def f(double(N) A) -> (O) { O(i) max=! A(k) where k in 0:N, i in 0:k + 1 }",
        _suffix_max,
    ),
    "previous value and a triangular range": (
        "def f(double(N) A, double(N) B) -> (O) {\n"
        "  O(i) = B(i)\n"
        "  O(i) max= A(k) where k in 0:N, i in 0:k + 1\n}",
        _previous_suffix_max,
    ),
    "scatter of one value": (
        "def f(double(N) A) -> (O) { O(i + k) max=! A(0) where i in 0:N, k in 0:3 }",
        _scatter_same,
    ),
}


def _arrays(case: str) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.permutation(N).astype(np.float64)  # distinct values: no tie of two values
    if "previous" in case:
        # B ties with A's edge value at row N - 1 (the clamp reads A(N - 1) three times)
        b = rng.standard_normal(N) - 10.0
        b[N - 1] = a[N - 1]
        return [a, b]
    return [a]


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_vjp_is_the_derivative_where_one_value_is_several_candidates(
    case: str, target: str
) -> None:
    src, ref = CASES[case]
    arrays = _arrays(case)
    if "previous" in case:
        arrays[1][N - 1] = -100.0  # here: no tie with B, so the function is smooth
    kernel = compiler.define(src, target=target)
    (out,) = kernel(*arrays)
    np.testing.assert_array_equal(out, ref(*arrays))
    c = np.random.default_rng(1).standard_normal(out.shape)
    grads = kernel.vjp(*arrays, grad_outputs=(c,))
    grads = grads if isinstance(grads, tuple) else (grads,)
    h = 1e-6
    for i, g in enumerate(grads):
        fd = np.zeros_like(arrays[i])
        for j in range(arrays[i].size):
            up = [a.copy() for a in arrays]
            down = [a.copy() for a in arrays]
            up[i][j] += h
            down[i][j] -= h
            fd[j] = np.vdot(ref(*up) - ref(*down), c) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("case", sorted(CASES))
def test_jvp_and_vjp_stay_adjoint_at_ties(case: str) -> None:
    src, _ = CASES[case]
    arrays = _arrays(case)  # "previous": B ties with the edge value: a three-way tie
    kernel = compiler.define(src, target="llvm")
    rng = np.random.default_rng(3)
    tangents = [rng.standard_normal(a.shape) for a in arrays]
    _, (dot,) = kernel.jvp(*arrays, tangents=tuple(tangents))
    c = rng.standard_normal(dot.shape)
    grads = kernel.vjp(*arrays, grad_outputs=(c,))
    grads = grads if isinstance(grads, tuple) else (grads,)
    pairing = sum(float(np.vdot(t, g)) for t, g in zip(tangents, grads, strict=True))
    assert float(np.vdot(dot, c)) == pytest.approx(pairing, rel=1e-12, abs=1e-12)


def test_a_previous_value_tied_with_a_term_shares_the_adjoint() -> None:
    """B(N - 1) equals the only candidate value of A at the last row (A(N - 1), read
    three times by the clamp): four candidates, the adjoint split in four shares."""
    src, _ = CASES["previous value and a clamp"]
    a, b = _arrays("previous value and a clamp")
    c = np.zeros(N)
    c[N - 1] = 1.0
    ga, gb = compiler.define(src, target="llvm").vjp(a, b, grad_outputs=(c,))
    assert gb[N - 1] == 0.25 and ga[N - 1] == 0.75


def test_the_pieces_of_a_clamped_min_with_elements_of_no_term() -> None:
    """Fuzz seed 40260, reduced: the clamp's second piece (`k >= N`) has terms only
    when M > N, so for N = 13, M = 2 its auxiliary reduction has no element; the
    gradient was refused with a ShapeError. The comparison now starts from the
    previous value there."""
    src = (
        "def f(double(N, M, 1) A) -> (O) {\n"
        "  O(i1, i2, i3) min=! A(min(k4, N - 1), min(i2, M - 1), 0)"
        " where i1 in 0:N, k4 in 0:M, i2 in 0:1, i3 in 0:i1 + 1\n}"
    )
    rng = np.random.default_rng(0)
    for n, m in ((13, 2), (2, 3)):
        a = rng.standard_normal((n, m, 1))

        def ref(x: np.ndarray, n: int = n, m: int = m) -> np.ndarray:
            rows = np.minimum(np.arange(m), n - 1)
            out = np.full((n, 1, n), np.inf)
            tri = np.arange(n)[None, :] <= np.arange(n)[:, None]
            out[:, 0, :] = np.where(tri, x[rows, 0, 0].min(), np.inf)
            return out

        kernel = compiler.define(src, target="llvm")
        (out,) = kernel(a)
        np.testing.assert_array_equal(np.isfinite(out), np.isfinite(ref(a)))
        c = rng.standard_normal(out.shape) * np.isfinite(ref(a))
        (g,) = kernel.vjp(a, grad_outputs=(c,))
        want = np.zeros_like(a)
        rows = np.minimum(np.arange(m), n - 1)
        want[rows[np.argmin(a[rows, 0, 0])], 0, 0] = c.sum()
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def _stmt(src: str):  # noqa: ANN202
    return parse(src).defs[0].stmts[-1]


@pytest.mark.parametrize(
    "src, distinct",
    [
        ("def f(float(N, H) I) -> (O) { O(n, h) max=! I(n, 2 * h + kh) where kh in 0:3 }", True),
        ("def f(float(N) A) -> (O) { O(i) max=! A(min(i + k, N - 1)) where k in 0:3 }", False),
        ("def f(float(N) A) -> (O) { O(i) max=! A(i) where i in 0:N, k in 0:3 }", False),
        ("def f(float(N) A) -> (O) { O(i + k) max=! A(i) where i in 0:N, k in 0:3 }", True),
        ("def f(float(N) A) -> (O) { O(i + k) max=! A(0) where i in 0:N, k in 0:3 }", False),
        ("def f(float(N) A) -> (O) { O(i) max=! A((i + k) / 2) where k in 0:3 }", False),
        # an index tensor's distinct elements may hold one value (fuzz seed 50080)
        ("def f(float(N) A, int32(N) X) -> (O) { O(i) max=! A(X(k)) where k in 0:N }", False),
        # an intermediate's distinct elements too
        ("def f(float(N) A) -> (T, O) { T(k) = A(0)\n O(i) max=! T(k) where k in 0:N }", False),
        ("def f(float(N, N) S, float(N) M) -> (O) { O(i) max=! S(i, k) - M(i) }", True),
        ("def f(float(N) A) -> (O) { O(i) max=! -A(k) * 2.0 }", True),
        # a factor may be zero, a ternary may skip the read (fuzz seed 50381)
        ("def f(float(N) A, float(N) B) -> (O) { O(i) max=! B(min(k, 2)) * A(k) }", False),
        ("def f(float(N) A, float(N) B) -> (O) { O(i) max=! B(i) > 0 ? 2.0 : A(k) }", False),
    ],
)
def test_distinct_terms(src: str, distinct: bool) -> None:
    assert distinct_terms(_stmt(src), ("N", "H"), {"I", "A", "B", "S", "M"}) is distinct


def test_max_pooling_keeps_its_one_pass_gradient() -> None:
    """A one-to-one window read needs no count: the printed gradient is unchanged."""
    text = compiler.grad((Path(__file__).parents[2] / "examples" / "maxpool.tc").read_text())
    assert "_tmp" not in text and "max(" not in text


@pytest.mark.parametrize(
    "src, distinct",
    [
        # attention's scores: t told apart by Q's read, s by K's
        ("def f(float(B, T, D) Q, float(B, S, D) K) -> (C) "
         "{ C(b, t, s) +=! Q(b, t, d) * K(b, s, d) * 0.5 }", True),
        ("def f(float(N) A) -> (C) { C(k) = A(0) where k in 0:N }", False),  # one value
        ("def f(float(N) A) -> (C) { C(k) = fmax(A(k), 0.0) }", False),  # zero on a region
        ("def f(float(N) A) -> (C) { C(k) = A(k) > 0 ? A(k) : 1.0 }", False),  # a constant
    ],
)  # fmt: skip
def test_distinct_tensors(src: str, distinct: bool) -> None:
    from compiler.autodiff.products import distinct_tensors

    d = parse(src).defs[0]
    names = distinct_tensors(d.stmts, ("B", "T", "D", "S", "N"), frozenset({"Q", "K", "A"}))
    assert ("C" in names) is distinct


def _rows_after_previous(a: np.ndarray) -> np.ndarray:
    """O(i, j) = A(i, 0), then max= A(min(j, 1), k) for j < N + 1 (N = a.shape[1])."""
    n = a.shape[1]
    out = np.repeat(a[:, :1], n + 2, axis=1)
    for j in range(n + 1):
        out[:, j] = np.maximum(out[:, j], a[min(j, 1)].max())
    return out


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_a_clamp_split_over_a_written_index_divides_the_previous_values_share(
    target: str,
) -> None:
    """The clamp `min(j, 1)` splits the `max=` into pieces over `j` (0:2 and 2:N + 1)
    that write different elements; at row 1 the previous value A(1, 0) is also a term,
    and the largest: the adjoint goes half to each candidate, one value, so A(1, 0)'s
    gradient is the whole adjoint. The second piece's pass-through into the previous
    value kept the whole adjoint (1.5 times the derivative, fuzz seed 61545)."""
    src = (
        "def f(double(2, N) A) -> (O) {\n"
        "  O(i, j) = A(i, 0) where i in 0:2, j in 0:N + 2\n"
        "  O(i, j) max= A(min(j, 1), k) where i in 0:2, j in 0:N + 1, k in 0:N\n}"
    )
    a = np.array([[0.5, -1.25, 0.25, -0.75, 0.125], [3.0, 1.5, -2.0, 0.75, 2.25]])
    kernel = compiler.define(src, target=target)
    (out,) = kernel(a)
    np.testing.assert_array_equal(out, _rows_after_previous(a))
    c = np.random.default_rng(5).standard_normal(out.shape)
    (g,) = kernel.vjp(a, grad_outputs=(c,))
    fd = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[idx] += 1e-6
        down[idx] -= 1e-6
        fd[idx] = np.vdot(_rows_after_previous(up) - _rows_after_previous(down), c) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-8)


def _recomputed_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = b @ np.exp(a)
    return a.copy(), np.sqrt(o * o + 0.5)


RECOMPUTED_SUM = (
    "def f(double(N) A, double(N, N) B) -> (O, P) {\n"
    "  O(i) +=! B(i, k) * exp(A(k))\n"
    "  P(i) max=! sqrt(O(i) * O(i) + 0.5) where j in 0:3\n"
    "  O(i) = A(i)\n}"
)


def test_candidates_of_a_recomputed_sum_are_compared_with_a_recomputed_result() -> None:
    """`O` is overwritten, so the gradient recomputes its sum, in its own order: the
    candidates may round apart from the forward's result `P`. The tie count and the
    seeds compare them with `P` recomputed from the same reads (fuzz seed 61890: the
    count compared with the forward's `P` and found no candidate, the pieces with the
    recomputed one, and N equal terms each kept the whole adjoint). Without a
    recomputed sum the forward's result is compared, as before."""
    text = compiler.grad(RECOMPUTED_SUM)
    assert "double(N) P," not in text.splitlines()[0]
    assert "== P_tmp1(i)" in text and "== P(i)" not in text
    kept = compiler.grad(RECOMPUTED_SUM.replace("  O(i) = A(i)\n", ""))
    assert "== P(i)" in kept


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_the_ties_of_a_recomputed_sum_share_the_adjoint(target: str) -> None:
    """Three equal terms per element (`j` is not in the term): each gets a third."""
    rng = np.random.default_rng(61890)
    a, b = rng.standard_normal(11), rng.standard_normal((11, 11))
    kernel = compiler.define(RECOMPUTED_SUM, target=target)
    for got, want in zip(kernel(a, b), _recomputed_sum(a, b), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    c = (rng.standard_normal(11), rng.standard_normal(11))
    ga, gb = kernel.vjp(a, b, grad_outputs=c)
    for x, g in ((a, ga), (b, gb)):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[idx] += 1e-6
            down[idx] -= 1e-6
            args_up = (up, b) if x is a else (a, up)
            args_down = (down, b) if x is a else (a, down)
            fd[idx] = (
                sum(
                    np.vdot(u - d, ci)
                    for u, d, ci in zip(
                        _recomputed_sum(*args_up), _recomputed_sum(*args_down), c, strict=True
                    )
                )
                / 2e-6
            )
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


CLAMPED_OVER_A_SUM = (
    "def f(double(N) A, double(M) C) -> (P) {\n"
    "  P(i) max=! C(min(k, M - 1)) * A(i) where i in 0:N - 2, k in 0:3\n}"
)


def test_a_piece_over_the_whole_output_needs_no_select() -> None:
    """The clamp splits the summed `k`: both pieces write every element of `P`, so the
    second piece's pass-through into the first's result is whole, and is printed so
    (not `0 <= i && i < N - 2 ? v : v / count`, a select that always takes `v`)."""
    text = compiler.grad(CLAMPED_OVER_A_SUM)
    (line,) = [s for s in text.splitlines() if s.strip().startswith("P_v1_grad(i) +=!")]
    assert "?" not in line.split("*", 1)[0] and "max(P_tmp" not in line


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_a_clamp_over_a_sum_with_ties_is_the_derivative(target: str) -> None:
    """M = 2: `k` = 1 and 2 read C(1), one value twice; at each element it ties with
    itself, and the shares add up to its derivative."""
    kernel = compiler.define(CLAMPED_OVER_A_SUM, target=target)
    rng = np.random.default_rng(7)
    a, c = rng.standard_normal(9), np.array([0.25, 1.5])
    compiler.gradcheck(kernel, a, c)


# fuzz seed 71290, reduced: `O` is overwritten, so the gradient recomputes its sum; `P`'s
# scatter `max=!` is split by the clamp of `k9`, and the last piece's pass-through into
# the earlier pieces compared the recomputed `P_v2` with the forward's `P`
SCATTER_PIECES = """def f(double(N, N) A, double(M) B) -> (O, P) {
    O(i1, i2, i3) +=! t0 where i1 in 0:N, i2 in 0:N, k5 in 0:min(N, M),
        t0 = A(max(i2 - 1, 0), k4) <= B(i3) ? A(0, k5) : double(i3)
    P(i6 + k8, i7) max=! !(0.375 >= 0.5) ? O(i6, N - 1 - i7, k8) : O(k9, 0, max(k9 - 2, 0))
        where i6 in 0:N, i7 in 0:N, k8 in 0:M, k9 in 1:N
    O(i10, i11, i12) +=! A(i11, k13) where i10 in 0:N, i11 in 1:N, i12 in 0:M, k13 in 1:N
}"""


def test_a_scatter_piece_passes_through_by_the_recomputed_result() -> None:
    text = compiler.grad(SCATTER_PIECES)
    assert "== P(" not in text
    assert "P_v1(i0, i1) == P_tmp1(i0, i1)" in text


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_scatter_piece_over_a_recomputed_sum_keeps_its_share(target: str) -> None:
    """With these values the recomputed `P_v1(1, 0)` is 2.2e-16 below the forward's
    `P(1, 0)`: compared with `P`, that element's winner lost half its adjoint."""
    a = np.array(
        [
            [-0.66934916, -0.49300262, 0.32166146],
            [0.49228761, -2.2544478, 2.16611442],
            [1.02527245, -1.40856631, -0.32588299],
        ]
    )
    b = np.array([-0.60392196, 0.59762283, -1.03011607])
    kernel = compiler.define(SCATTER_PIECES, target=target)
    c = np.random.default_rng(3).standard_normal((5, 3))
    ga, _ = kernel.vjp(a, b, grad_outputs=(None, c))
    fd = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        step = np.zeros_like(a)
        step[idx] = 1e-6
        fd[idx] = np.sum((kernel(a + step, b)[1] - kernel(a - step, b)[1]) * c) / 2e-6
    np.testing.assert_allclose(ga, fd, atol=1e-7)
