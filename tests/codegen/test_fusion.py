"""Loop fusion (`compiler/loops/fuse.py`, `Options(fuse=...)`): fused code computes what
the unfused code and the reference evaluator compute, forward and gradient, at odd
sizes (1, primes, rows longer than the blocked sum's block); loops whose iterations
depend on other iterations of the previous loop stay apart; fused sums keep the
blocked, compensated accuracy; the fused Function passes the loop-IR verifier."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler import pipeline
from compiler.loops.fuse import fuse
from compiler.loops.verify import verify
from compiler.options import Options

SOFTMAX = """
def softmax(float(N, D) X) -> (Y, mx, s) {
    mx(n) max=! X(n, d)
    s(n) +=! exp(X(n, d) - mx(n))
    Y(n, d) = exp(X(n, d) - mx(n)) / s(n)
}
"""
LAYERNORM = """
def layernorm(float(N, D) X) -> (Y, mean, var) {
    mean(n) +=! X(n, d) / D
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D
    Y(n, d) = (X(n, d) - mean(n)) / sqrt(var(n) + 1e-5)
}
"""
ATTENTION = """
def attention(float(B, T, E) Q, float(B, T, E) K, float(B, T, E) V) -> (S, mx, P, l, O) {
    S(b, i, j) +=! Q(b, i, e) * K(b, j, e)
    mx(b, i) max=! S(b, i, j)
    P(b, i, j) = exp(S(b, i, j) - mx(b, i))
    l(b, i) +=! P(b, i, j)
    O(b, i, e) +=! P(b, i, j) * V(b, j, e) / l(b, i)
}
"""
# B's element N-1-i is written by iteration N-1-i: fusing would read it too early
REVERSE = """
def rev(float(N) A) -> (B, C) {
    B(i) = A(i) * 2
    C(i) = B(N - 1 - i) + A(i)
}
"""
# a column sum after a row-wise statement: no dimension is the loop variable everywhere
COLUMNS = """
def cols(float(N, D) X) -> (Y, c) {
    Y(n, d) = X(n, d) * X(n, d)
    c(d) +=! Y(n, d)
}
"""

# the sum's term is kept in Y, which the last statement reads back (loops.keep_terms)
TANH = """
def tanh_scale(float(N, D) X) -> (Y, s) {
    s(n) +=! tanh(X(n, d))
    Y(n, d) = tanh(X(n, d)) * s(n) + X(n, d)
}
"""

CASES = {
    "tanh": (TANH, [(1, 1), (3, 7), (2, 2049)]),
    "softmax": (SOFTMAX, [(1, 1), (3, 7), (13, 31), (2, 2049)]),
    "layernorm": (LAYERNORM, [(1, 1), (5, 11), (3, 4099)]),
    "attention": (ATTENTION, [(1, 1, 1), (2, 3, 5), (3, 7, 13), (1, 17, 9)]),
    "reverse": (REVERSE, [(1,), (2,), (13,)]),
    "columns": (COLUMNS, [(1, 1), (7, 3), (5, 17)]),
}


def _inputs(src: str, shape: tuple[int, ...], dtype: str, seed: int) -> list[np.ndarray]:
    k = compiler.define(src, target="interp")
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in k.ranged.checked.inputs]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_forward_and_gradient_match_unfused_and_interp(name: str, dtype: str) -> None:
    src, shapes = CASES[name]
    src = src.replace("float(", "double(") if dtype == "float64" else src
    fused = compiler.define(src, options=Options(threads=2), cache=None)
    plain = compiler.define(src, options=Options(threads=2, fuse=False), cache=None)
    ref = compiler.define(src, target="interp")
    rtol = 2e-5 if dtype == "float32" else 1e-12
    for k, shape in enumerate(shapes):
        arrays = _inputs(src, shape, dtype, k)
        got, unfused, want = fused(*arrays), plain(*arrays), ref(*arrays)
        for g, u, w in zip(got, unfused, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
            np.testing.assert_allclose(g, u, rtol=rtol, atol=rtol)
        rng = np.random.default_rng(k + 10)
        cotangents = [rng.standard_normal(o.shape).astype(dtype) for o in want]
        grads = fused.vjp(*arrays, grad_outputs=cotangents)
        wants = ref.vjp(*arrays, grad_outputs=cotangents)
        for g, w in zip(grads, wants, strict=True):
            np.testing.assert_allclose(g, w, rtol=10 * rtol, atol=10 * rtol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_functions_verify(name: str) -> None:
    src = CASES[name][0]
    k = compiler.define(src)
    for ranged in (k.ranged, k.grad.ranged):
        f = pipeline.lower(ranged, Options()).function
        verify(f)
        assert fuse(f) == f  # a fixed point: the pipeline fused all it could


def _parallel_loops(src: str, fuse_loops: bool) -> int:
    k = compiler.define(src, options=Options(threads=2, fuse=fuse_loops), cache=None)
    return int(k.info()["parallel_loops"])


def test_row_statements_fuse_into_one_parallel_loop() -> None:
    assert _parallel_loops(SOFTMAX, False) == 3
    assert _parallel_loops(SOFTMAX, True) == 1
    assert _parallel_loops(LAYERNORM, True) == 1


def test_dependences_across_iterations_keep_loops_apart() -> None:
    assert _parallel_loops(REVERSE, True) == 2
    # the column sum (its init and strips, cpu.tiling) stays apart from Y's rows
    assert _parallel_loops(COLUMNS, True) == _parallel_loops(COLUMNS, False) == 3


def test_softmax_gradient_per_row_loops_fuse() -> None:
    """The gradient's loops over a row's elements fuse (fewer passes over the row)."""
    k = compiler.define(SOFTMAX)
    plain = pipeline.lower(k.grad.ranged, Options(fuse=False)).function
    fused = pipeline.lower(k.grad.ranged, Options()).function

    def count(f: L.Function) -> int:
        found = []

        class _V(L.Visitor):
            def visit_For(self, node: L.For) -> None:
                found.append(node)
                self.generic_visit(node)

        _V().visit(f)
        return len(found)

    assert 2 * count(fused) <= count(plain)  # at least half the row loops fused away


def test_fused_sums_stay_blocked_and_compensated() -> None:
    """A sum fused with a maximum over a long row keeps the blocked, compensated sum:
    2^20 values 0.1 sum to 104857.6 within 1e-5 (a single running float32 sum is ~1e-2
    off)."""
    src = """
    def f(float(N, D) X) -> (mx, s) {
        mx(n) max=! X(n, d)
        s(n) +=! X(n, d)
    }
    """
    k = compiler.define(src, options=Options(threads=1), cache=None)
    assert k.info()["parallel_loops"] == 1
    x = np.full((2, 1 << 20), 0.1, np.float32)
    mx, s = k(x)
    want = np.float64(np.float32(0.1)) * (1 << 20)
    np.testing.assert_allclose(s, want, rtol=1e-5)
    np.testing.assert_array_equal(mx, np.float32(0.1))


def _calls(f: L.Function, fn: str) -> int:
    found = []

    class _V(L.Visitor):
        def visit_Call(self, node: L.Call) -> None:
            if node.fn == fn:
                found.append(node)
            self.generic_visit(node)

    _V().visit(f)
    return len(found)


def test_softmax_keeps_its_exponentials_in_the_output() -> None:
    k = compiler.define(SOFTMAX)
    fused = pipeline.lower(k.ranged, Options()).function
    plain = pipeline.lower(k.ranged, Options(fuse=False)).function
    assert (_calls(plain, "exp"), _calls(fused, "exp")) == (2, 1)
    tanh = pipeline.lower(compiler.define(TANH).ranged, Options()).function
    assert _calls(tanh, "tanh") == 1


def test_options_fuse_is_validated() -> None:
    with pytest.raises(compiler.OptionsError, match="Options.fuse"):
        Options(fuse=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ random chains

_ROW = ["+=!", "max=!", "min=!"]


def _chain(rng: np.random.Generator, length: int) -> str:
    """A def of `length` statements over (N, D): row reductions, element-wise maps of
    earlier tensors (some read another row or column: `D - 1 - d`, `N - 1 - n`, which
    fusion must respect), and column sums."""
    full = ["X"]  # (N, D) tensors so far
    rows: list[str] = []  # (N) tensors
    outs: list[str] = []
    stmts: list[str] = []
    for k in range(length):
        a = full[int(rng.integers(len(full)))]
        kind = int(rng.integers(5)) if rows else int(rng.choice([0, 1, 3]))
        name = f"T{k}"
        if kind == 0:
            op = _ROW[int(rng.integers(3))]
            term = f"exp({a}(n, d) * 0.25)" if rng.random() < 0.5 else f"{a}(n, d)"
            stmts.append(f"{name}(n) {op} {term}")
            rows.append(name)
        elif kind == 1:
            b = full[int(rng.integers(len(full)))]
            stmts.append(f"{name}(n, d) = tanh({a}(n, d)) + {b}(n, D - 1 - d)")
            full.append(name)
        elif kind == 2:
            r = rows[int(rng.integers(len(rows)))]
            stmts.append(f"{name}(n, d) = exp({a}(n, d) - {r}(n)) / (1 + {r}(N - 1 - n) * {r}(n))")
            full.append(name)
        elif kind == 3:
            stmts.append(f"{name}(d) +=! {a}(n, d) * 0.5")
        else:
            r = rows[int(rng.integers(len(rows)))]
            stmts.append(f"{name}(n, d) = {a}(n, d) * {r}(n)")
            full.append(name)
        outs.append(name)
    body = "\n    ".join(stmts)
    return f"def chain(float(N, D) X) -> ({', '.join(outs)}) {{\n    {body}\n}}\n"


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_fused_match_interp(seed: int) -> None:
    rng = np.random.default_rng(seed)
    src = _chain(rng, int(rng.integers(3, 7)))
    fused = compiler.define(src, options=Options(threads=2), cache=None)
    ref = compiler.define(src, target="interp")
    for shape in [(1, 1), (2, 3), (7, 13), (3, 2053)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for g, w in zip(fused(x), ref(x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=src)
    verify(pipeline.lower(fused.ranged, Options()).function)
