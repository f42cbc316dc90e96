"""The parity split (compiler/cpu/parity.py): which scatters the CPU schedule splits
into residue classes, that each class is a gather (one writer per element, no partial
scatter), and that forward user scatters (transposed convolutions) and the gradients
of strided convolutions equal the reference evaluator's, at odd sizes (primes, 1,
windows of 1..5, strides 2 and 3, classes that are empty for some residues), in
float64 and float32, with 1 and 2 threads (alternating over the cases); one gradient
against central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.cpu.model import schedule
from compiler.cpu.parity import split_parities
from compiler.frontend.printer import print_def
from compiler.options import Options
from compiler.pipeline import run
from compiler.poly.schedule import scatter_notes


@pytest.fixture(autouse=True)
def _split_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split is off by default (`parity.ENABLED`, measured slower): on for these tests."""
    monkeypatch.setattr("compiler.cpu.parity.ENABLED", True)


def test_the_split_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("compiler.cpu.parity.ENABLED", False)
    ranged = run(STRIDED_GRAD, upto="ranges")
    assert split_parities(ranged).ranged is ranged


def _transposed(rank: int, strides: tuple[int, ...], dtype: str = "double", op: str = "+=!") -> str:
    """`O(n, m, s * h + kh, ...) op I(n, c, h, ...) * W1(c, m, kh, ...)`."""
    sp = ["h", "w", "d"][:rank]
    ks = [f"k{v}" for v in sp]
    subs = ", ".join(
        f"{s} * {v} + {k}" if s != 1 else f"{v} + {k}"
        for s, v, k in zip(strides, sp, ks, strict=True)
    )
    sizes = ", ".join(v.upper() for v in sp)
    ksizes = ", ".join(k.upper() for k in ks)
    return (
        f"def t({dtype}(N, C, {sizes}) I, {dtype}(C, M, {ksizes}) W1) -> (O) {{\n"
        f"    O(n, m, {subs}) {op} I(n, c, {', '.join(sp)}) * W1(c, m, {', '.join(ks)})\n}}\n"
    )


def _conv(rank: int, stride: int, dtype: str = "double") -> str:
    sp = ["h", "w", "d"][:rank]
    ks = [f"k{v}" for v in sp]
    subs = ", ".join(f"{stride} * {v} + {k}" for v, k in zip(sp, ks, strict=True))
    sizes = ", ".join(v.upper() for v in sp)
    ksizes = ", ".join(k.upper() for k in ks)
    return (
        f"def conv({dtype}(N, C, {sizes}) I, {dtype}(M, C, {ksizes}) W1) -> (O) {{\n"
        f"    O(n, m, {', '.join(sp)}) +=! I(n, c, {subs}) * W1(m, c, {', '.join(ks)})\n}}\n"
    )


STRIDED_GRAD = (
    "def g(float(N, M, HO, WO) G, float(M, C, KH, KW) W1) -> (IG) {\n"
    "    IG(n, c, 2 * h + kh, 2 * w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw)\n}\n"
)


def test_the_split_has_one_gather_per_residue_class() -> None:
    ranged = run(STRIDED_GRAD, upto="ranges")
    split = split_parities(ranged)
    stmts = split.ranged.checked.definition.stmts
    text = print_def(split.ranged.checked.definition)
    # an explicit zero, four classes, and the partial scatter for the sizes where
    # the windows are longer than twice the output (KH > 4 * HO): guarded apart
    assert len(stmts) == 6 and stmts[0].op.value == "=" and len(split.classes) == 4
    assert "IG(n, c, 2 * h_kh + 1, 2 * w_kw) += G(n, m, h_kh - kh_t, w_kw - kw_t)" in text
    assert "W1(m, c, 1 + 2 * kh_t, 2 * kw_t)" in text
    assert "kh_t in max(0, h_kh - HO + 1):min(KH / 2, h_kh + 1)" in text
    assert split.origins == (0,) * 6
    sched = schedule(ranged, Options(factor=False), pad=True)  # the fallback unfactored
    notes = scatter_notes(sched)
    assert sum("strided gather (cpu.parity)" in n for n in notes) == 4
    assert sum("partial scatter" in n for n in notes) == 1  # the guarded fallback
    # the classes read zero-padded copies: constant window bounds
    assert len(sched.scratch) == 4
    # with gather="partial" the scatter stays whole
    whole = Options(gather="partial", factor=False)
    assert len(schedule(ranged, whole, pad=True).ranged.checked.stmts) == 1


def test_what_is_not_split() -> None:
    for text in (
        # a unit-stride scatter is gathered by the gather pass; `3 * i` alone is injective
        "def f(float(N, K) B) -> (A) { A(3 * i) +=! B(i, k) where k in 0:K }",
        # no unit coefficient: 2 * i + 3 * k
        "def f(float(N, K, P) B) -> (A) { A(p, 2 * i + 3 * k) +=! B(i, k, p) }",
        # max= is not split (a partial scatter)
        "def f(float(N, K, P) B) -> (A) { A(p, 2 * i + k) max=! B(i, k, p) }",
        # a variable in two subscripts
        "def f(float(N, K) B) -> (A) { A(k, 2 * i + k) +=! B(i, k) }",
    ):
        ranged = run(text, upto="ranges")
        assert split_parities(ranged).ranged is ranged, text


def _rng_inputs(rng, shapes, dtype):  # type: ignore[no-untyped-def]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# rank, strides, N, C, M, spatial extents, window extents
FORWARD = [
    (1, (2,), 2, 3, 5, (11,), (3,)),
    (1, (3,), 1, 2, 3, (13,), (1,)),  # KH = 1 < s: two classes are empty
    (1, (3,), 2, 1, 2, (7,), (5,)),
    (2, (2, 2), 2, 3, 5, (7, 5), (3, 4)),
    (2, (3, 2), 1, 2, 3, (5, 11), (2, 1)),  # KH = 2 < 3: one class empty
    (2, (2, 1), 2, 2, 3, (7, 3), (5, 3)),  # a stride 1 dimension beside a stride 2 one
    (2, (2, 2), 1, 1, 1, (1, 1), (1, 1)),  # every size 1
    (3, (2, 2, 3), 1, 2, 2, (3, 5, 2), (3, 2, 4)),
]


def _alternated(cases: list) -> list:  # type: ignore[type-arg]
    """Each case once, the dtype and the thread count alternating over the cases (every
    case compiles its own kernels: running each in both dtypes and thread counts would
    compile four times as much for the same coverage of the split)."""
    return [
        pytest.param(case, ("double", "float")[i % 2], 1 + (i // 2) % 2, id=f"case{i}")
        for i, case in enumerate(cases)
    ]


@pytest.mark.parametrize(("case", "dtype", "threads"), _alternated(FORWARD))
def test_transposed_convolution_equals_the_evaluator(case: tuple, dtype: str, threads: int) -> None:  # type: ignore[type-arg]
    rank, strides, n, c, m, xs, ks = case
    np_dtype = np.float64 if dtype == "double" else np.float32
    tol = 1e-12 if dtype == "double" else 2e-5
    rng = np.random.default_rng(threads)
    text = _transposed(rank, strides, dtype)
    cpu = compiler.define(text, options=Options(threads=threads), cache=False)
    ref = compiler.define(text, target="interp")
    notes = cpu.info()["notes"]
    assert any("strided gather (cpu.parity)" in note for note in notes)
    i, w = _rng_inputs(rng, [(n, c, *xs), (c, m, *ks)], np_dtype)
    (got,) = cpu(i, w)
    (want,) = ref(i, w)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_transposed_convolution_accumulates_without_init() -> None:
    """`+=` (no `!`): the classes add to the output as given (an input-output)."""
    text = _transposed(2, (2, 3), op="+=")
    cpu = compiler.define(text, cache=False)
    ref = compiler.define(text, target="interp")
    rng = np.random.default_rng(3)
    i, w = rng.standard_normal((2, 3, 5, 7)), rng.standard_normal((3, 2, 3, 4))
    (got,) = cpu(i, w)
    (want,) = ref(i, w)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


GRADIENT = [
    # rank, stride, N, C, M, spatial extent, window extent
    (1, 2, 2, 3, 5, 11, 3),
    (1, 3, 1, 2, 3, 13, 2),
    (2, 2, 2, 3, 5, 7, 3),
    (2, 3, 1, 2, 3, 11, 5),
    (2, 2, 2, 2, 3, 8, 1),  # KH = 1: the odd classes are empty
    (2, 3, 1, 1, 1, 1, 1),  # every size 1
    (2, 2, 1, 2, 2, 5, 4),
]


@pytest.mark.parametrize(
    ("case", "threads"),
    [pytest.param(case, 1 + i % 2, id=f"case{i}") for i, case in enumerate(GRADIENT)],
)
def test_strided_gradient_equals_the_evaluator(case: tuple, threads: int) -> None:  # type: ignore[type-arg]
    rank, stride, n, c, m, x, k = case
    text = _conv(rank, stride)
    rng = np.random.default_rng(rank * 100 + stride * 10 + k)
    i = rng.standard_normal((n, c, *([x] * rank)))
    w = rng.standard_normal((m, c, *([k] * rank)))
    ref = compiler.define(text, target="interp")
    (out,) = ref(i, w)
    cot = (rng.standard_normal(out.shape),)
    want = ref.vjp(i, w, grad_outputs=cot)
    cpu = compiler.define(text, options=Options(threads=threads), cache=False)
    notes = cpu.grad.info()["notes"]
    assert any("strided gather (cpu.parity)" in note for note in notes), notes
    got = cpu.vjp(i, w, grad_outputs=cot)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_strided_gradient_in_float32() -> None:
    text = _conv(2, 2, "float")
    rng = np.random.default_rng(11)
    i = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 5)).astype(np.float32)
    ref = compiler.define(text, target="interp")
    (out,) = ref(i, w)
    cot = (rng.standard_normal(out.shape).astype(np.float32),)
    want = ref.vjp(i, w, grad_outputs=cot)
    got = compiler.define(text, cache=False).vjp(i, w, grad_outputs=cot)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)


def test_strided_gradient_and_transposed_convolution_pass_gradcheck() -> None:
    rng = np.random.default_rng(7)
    k = compiler.define(_conv(2, 3), cache=False)
    compiler.gradcheck(k, rng.standard_normal((1, 2, 8, 7)), rng.standard_normal((2, 2, 2, 3)))
    t = compiler.define(_transposed(2, (2, 3)), cache=False)
    compiler.gradcheck(t, rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((2, 2, 3, 2)))
