"""Factoring a scatter (compiler/cpu/factor.py): which statements the CPU schedule
splits into a contraction into a scratch tensor and a plain scatter, that the
contraction's loops merge through a view of the scratch tensor (cpu.merge), and that
the results equal a NumPy scatter written here (transposed convolutions at odd sizes:
1, primes, strides 2 and 3, windows wider and narrower than the stride, float32 and
float64, 1 and 2 threads), with the reference evaluator for the other forms and
central differences for a strided convolution's gradient.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import compiler
from compiler.cpu.factor import factor_scatters
from compiler.cpu.model import schedule
from compiler.frontend.printer import print_def
from compiler.gradcheck import gradcheck
from compiler.options import Options
from compiler.pipeline import run


def _transposed(rank: int, strides: tuple[int, ...], dtype: str = "double", op: str = "+=!") -> str:
    sp = ["h", "w", "d"][:rank]
    ks = [f"k{v}" for v in sp]
    subs = ", ".join(f"{s} * {v} + {k}" for s, v, k in zip(strides, sp, ks, strict=True))
    sizes = ", ".join(v.upper() for v in sp)
    ksizes = ", ".join(k.upper() for k in ks)
    return (
        f"def t({dtype}(N, C, {sizes}) I, {dtype}(C, M, {ksizes}) W1) -> (O) {{\n"
        f"    O(n, m, {subs}) {op} I(n, c, {', '.join(sp)}) * W1(c, m, {', '.join(ks)})\n}}\n"
    )


def _numpy_transposed(i: np.ndarray, w: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """The scatter itself, one window offset at a time (nothing of tcc's)."""
    n, _, *xs = i.shape
    _, m, *ks = w.shape
    out = np.zeros((n, m, *[s * (x - 1) + k for s, x, k in zip(strides, xs, ks, strict=True)]))
    for offs in itertools.product(*[range(k) for k in ks]):
        part = np.einsum(
            "nc...,cm->nm...", i.astype(np.float64), w[(..., *offs)].astype(np.float64)
        )
        where = tuple(
            slice(o, o + s * (x - 1) + 1, s) for o, s, x in zip(offs, strides, xs, strict=True)
        )
        out[(slice(None), slice(None), *where)] += part
    return out


def test_a_transposed_convolution_is_factored_and_its_contraction_merged() -> None:
    ranged = run(_transposed(2, (2, 2), "float"), upto="ranges")
    factored = factor_scatters(ranged)
    text = print_def(factored.ranged.checked.definition)
    assert factored.scratch == ("O_part",)
    assert "O_part(n, m, kh, kw, h, w) +=! I(n, c, h, w) * W1(c, m, kh, kw)" in text
    assert "O(n, m, 2 * h + kh, 2 * w + kw) +=! O_part(n, m, kh, kw, h, w)" in text
    assert factored.origins == (0, 0)
    sched = schedule(ranged, pad=True)
    assert sched.scratch == ("O_part",)
    # the contraction sees the scratch tensor through a view of its own, merged twice
    assert dict(sched.views.aliases) == {"O_part_view": "O_part"}
    contraction = sched.ranged.checked.definition.stmts[0]
    assert contraction.lhs.name == "O_part_view" and len(contraction.lhs.args) == 3
    off = schedule(ranged, Options(factor=False), pad=True)
    assert off.scratch == () and len(off.ranged.checked.stmts) == 1


def test_what_is_not_factored() -> None:
    for text in (
        # injective: a plain contraction already
        "def f(float(N, K) A, float(K, M) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }",
        # no reduction variable of its own: nothing to contract
        "def f(float(N, K) B) -> (A) { A(2 * i + k) +=! B(i, k) }",
        # max= does not split into partial sums here
        "def f(float(N, K, P) B) -> (A) { A(2 * i + k) max=! B(i, k, p) }",
        # the right-hand side reads the output
        "def f(float(N, K, P) B) -> (A) { A(i) = 1.0 where i in 0:2 * N + K - 1\n"
        " A(2 * i + k) += B(i, k, p) * A(0) }",
    ):
        ranged = run(text, upto="ranges")
        assert factor_scatters(ranged).ranged is ranged, text


# rank, strides, N, C, M, spatial extents, window extents
FORWARD = [
    (1, (2,), 2, 3, 5, (11,), (3,)),
    (1, (3,), 1, 2, 3, (13,), (1,)),  # a window narrower than the stride
    (2, (2, 2), 2, 3, 5, (7, 5), (3, 4)),
    (2, (3, 2), 1, 2, 3, (5, 11), (2, 1)),
    (2, (2, 2), 1, 1, 1, (1, 1), (1, 1)),  # every size 1
    (2, (2, 2), 3, 17, 7, (13, 13), (3, 3)),  # rows of 13: the merged 169-wide loop
    (3, (2, 2, 3), 1, 2, 2, (3, 5, 2), (3, 2, 4)),
]


@pytest.mark.parametrize("dtype", ["double", "float"])
@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_convolution_equals_numpy(dtype: str, threads: int) -> None:
    np_dtype = np.float64 if dtype == "double" else np.float32
    tol = 1e-12 if dtype == "double" else 1e-4
    rng = np.random.default_rng(threads)
    for rank, strides, n, c, m, xs, ks in FORWARD:
        text = _transposed(rank, strides, dtype)
        cpu = compiler.define(text, options=Options(threads=threads), cache=False)
        i = rng.standard_normal((n, c, *xs)).astype(np_dtype)
        w = rng.standard_normal((c, m, *ks)).astype(np_dtype)
        (got,) = cpu(i, w)
        np.testing.assert_allclose(got, _numpy_transposed(i, w, strides), rtol=tol, atol=tol)


def test_accumulating_and_guarded_scatters_equal_the_evaluator() -> None:
    """`+=` into an output an earlier statement wrote, and a condition on the
    left-hand side's variables only (kept by the scatter) beside one that also uses
    the reduction variable (the contraction's alone)."""
    text = (
        "def f(double(N, C) I, double(C, K) W) -> (O) {\n"
        "    O(y) = double(1) where y in 0:2 * N + K - 1\n"
        "    O(2 * i + k) += I(i, c) * W(c, k) where i + k in 1:N, c + i in 0:C + N - 1\n"
        "}\n"
    )
    ranged = run(text, upto="ranges")
    assert factor_scatters(ranged).scratch == ("O_part",)
    # a condition with the reduction variable that bounds the left-hand side's
    # variables (`c + i in 0:C`: i < C) would change what the scatter writes: kept whole
    bounded = run(text.replace("0:C + N - 1", "0:C"), upto="ranges")
    assert factor_scatters(bounded).ranged is bounded
    ref = compiler.define(text, target="interp")
    rng = np.random.default_rng(5)
    for n, c, k in ((7, 5, 3), (1, 1, 1), (11, 2, 4)):
        i, w = rng.standard_normal((n, c)), rng.standard_normal((c, k))
        for threads in (1, 2):
            cpu = compiler.define(text, options=Options(threads=threads), cache=False)
            np.testing.assert_allclose(cpu(i, w)[0], ref(i, w)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_convolution_gradient_against_central_differences(stride: int) -> None:
    text = (
        "def sconv(double(N, C, H, W) I, double(M, C, KH, KW) W1) -> (O) {\n"
        f"    O(n, m, h, w) +=! I(n, c, {stride} * h + kh, {stride} * w + kw) * W1(m, c, kh, kw)\n"
        "}\n"
    )
    k = compiler.define(text, options=Options(threads=2), cache=False)
    rng = np.random.default_rng(stride)
    i, w = rng.standard_normal((2, 3, 7, 8)), rng.standard_normal((5, 3, 3, 2))
    assert any("I_grad_part" in note for note in k.grad.info()["notes"])
    gradcheck(k, i, w)
