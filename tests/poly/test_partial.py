"""Partial scatters (compiler/poly/partial.py): the cost rule of the gather pass, the
schedule (parallel over the plain variables only, memory accumulation), and the
gradients of strided and dilated convolutions of every rank computed on the CPU
against the reference evaluator, in float64, at odd sizes (0, 1, primes)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler.cpu.model import schedule
from compiler.cpu.scatter_order import partial_order
from compiler.diagnostics import OptionsError
from compiler.options import Options
from compiler.pipeline import run
from compiler.poly.gather import remaining_scatters, scatter_to_gather
from compiler.poly.partial import (
    keep_partial,
    needs_divisibility,
    plain_vars,
    strided,
)


def _facts(text: str):  # type: ignore[no-untyped-def]
    ranged = run(text, upto="ranges")
    return ranged, ranged.checked.stmts[0]


STRIDED = (
    "def g(float(N, M, HO, WO) G, float(M, C, KH, KW) W1) -> (IG) {\n"
    "    IG(n, c, 2 * h + kh, 2 * w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw)\n}\n"
)
UNIT = STRIDED.replace("2 * h", "h").replace("2 * w", "w")
DILATED = STRIDED.replace("2 * h + kh", "h + 2 * kh").replace("2 * w + kw", "w + 2 * kw")


def test_plain_variables_and_the_cost_rule() -> None:
    ranged, facts = _facts(STRIDED)
    params = ranged.checked.size_params
    assert plain_vars(facts) == ("n", "c")
    # kh and kw have unit coefficients: the gather needs no divisibility, but it is
    # strided, and the CPU runs it as a partial scatter (its schedule choice)
    assert strided(facts, params) and not needs_divisibility(facts, params)
    assert keep_partial(facts, params, "auto") and keep_partial(facts, params, "partial")
    assert not keep_partial(facts, params, "auto", printed=True)
    assert not keep_partial(facts, params, "full")
    ranged, facts = _facts(UNIT)  # a stride-1 convolution's gather needs no modulo
    assert not needs_divisibility(facts, ranged.checked.size_params)
    assert not strided(facts, ranged.checked.size_params)
    assert not keep_partial(facts, ranged.checked.size_params, "auto")
    assert keep_partial(facts, ranged.checked.size_params, "partial")
    ranged, facts = _facts(DILATED)
    assert keep_partial(facts, ranged.checked.size_params, "auto")
    assert not keep_partial(facts, ranged.checked.size_params, "auto", printed=True)


def test_no_unit_coefficient_needs_divisibility() -> None:
    # no variable of 2 * i + 3 * k has coefficient 1; a floor division is not affine;
    # two inner variables in one subscript (2 * h + 3 * w + kh) count as needing it
    for text in (
        "def f(float(N, K, P) B) -> (A) { A(p, 2 * i + 3 * k) +=! B(i, k, p) }",
        "def f(float(N, P) B) -> (A) { A(p, i / 2) +=! B(i, p) }",
        "def f(float(N, P, K) B) -> (A) { A(p, 2 * i + 3 * j + k) +=! B(i, p, k) * B(j, p, k) }",
    ):
        ranged, facts = _facts(text)
        params = ranged.checked.size_params
        assert needs_divisibility(facts, params), text
        assert keep_partial(facts, params, "auto", printed=True), text


def test_no_plain_variable_means_a_gather() -> None:
    # i occurs twice; 3 * i has no plain variable: both are gathered as before
    for text in (
        "def f(float(N) B) -> (A) { A(i, i) +=! B(i) }",
        "def f(float(N) B) -> (A) { A(3 * i) +=! B(i) }",
        "def f(float(N, K) B) -> (A) { A(2 * i + k, 2 * i) +=! B(i, k) where k in 0:K }",
    ):
        ranged, facts = _facts(text)
        assert plain_vars(facts) == ()
        assert not keep_partial(facts, ranged.checked.size_params, "partial")
        assert remaining_scatters(scatter_to_gather(ranged, mode="auto")) == ()


def test_a_plain_variable_is_not_used_elsewhere_in_the_lhs() -> None:
    _, facts = _facts("def f(float(N, K) B) -> (A) { A(i, 2 * i + k) +=! B(i, k) }")
    assert plain_vars(facts) == ()
    _, facts = _facts("def f(float(N, K) B) -> (A) { A(k, 2 * i + k) +=! B(i, k) }")
    assert plain_vars(facts) == ()
    _, facts = _facts("def f(float(N, K, P) B) -> (A) { A(p, 2 * i + k) +=! B(i, k, p) }")
    assert plain_vars(facts) == ("p",)


def test_gather_modes() -> None:
    ranged, _ = _facts(STRIDED)
    assert scatter_to_gather(ranged, mode="auto") is ranged  # nothing to rewrite
    assert remaining_scatters(scatter_to_gather(ranged, mode="full")) == ()
    unit, _ = _facts(UNIT)
    assert remaining_scatters(scatter_to_gather(unit, mode="auto")) == ()
    assert scatter_to_gather(unit, mode="partial") is unit
    with pytest.raises(OptionsError, match="Options.gather"):
        Options(gather="sometimes")


def test_schedule_is_parallel_over_the_plain_variables_only() -> None:
    ranged, facts = _facts(STRIDED)
    order = partial_order(facts, ranged.checked.size_params)
    assert order.outer == ("n", "c")
    assert order.inner[-1] == "w" and set(order.inner) == {"m", "h", "kh", "kw", "w"}
    assert order.jams == (("m", 4), ("kw", 2))  # kw by the stride: full store groups
    init, main = schedule(ranged).nests
    assert init.parallel and main.parallel and not main.accumulate
    assert main.outer == ("n", "c")
    # fused, `n` joins the init's loop; "auto" would split it by parity (cpu.parity)
    f = compiler.pipeline.lower(ranged, Options(fuse=False, gather="partial", factor=False))
    loops = [s for s in _walk(f.function.body) if isinstance(s, L.For)]
    parallel = [s.var for s in loops if s.kind is L.LoopKind.PARALLEL]
    assert "n" in parallel and "w" not in parallel and "m" not in parallel
    assert any("partial scatter: parallel over n, c" in note for note in f.notes)


def _walk(stmt: L.Stmt):  # type: ignore[no-untyped-def]
    yield stmt
    for name in ("body", "then", "otherwise"):
        child = getattr(stmt, name, None)
        if isinstance(child, L.Stmt):
            yield from _walk(child)
    for child in getattr(stmt, "stmts", ()):
        yield from _walk(child)


# ------------------------------------------------------------ gradients, any rank


def _conv(rank: int, stride: int, dilation: int) -> str:
    sp = ["h", "w", "d"][:rank]
    ks = [f"k{v}" for v in sp]
    sizes = [v.upper() for v in sp]
    ksizes = [k.upper() for k in ks]
    subs = ", ".join(
        f"{stride} * {v} + {dilation} * {k}" if dilation != 1 else f"{stride} * {v} + {k}"
        for v, k in zip(sp, ks, strict=True)
    )
    return (
        f"def conv(double(N, C, {', '.join(sizes)}) I, double(M, C, {', '.join(ksizes)}) W1)"
        f" -> (O) {{\n    O(n, m, {', '.join(sp)}) +=! I(n, c, {subs}) * W1(m, c, {', '.join(ks)})\n}}\n"
    )


CASES = [
    # rank, stride, dilation, N, C, M, spatial extent, kernel extent
    (1, 2, 1, 2, 3, 5, 11, 3),
    (1, 3, 1, 1, 2, 3, 13, 2),
    (1, 2, 2, 2, 1, 2, 7, 3),
    (2, 2, 1, 2, 3, 5, 7, 3),
    (2, 3, 1, 1, 2, 3, 11, 2),
    (2, 2, 2, 1, 2, 2, 9, 2),
    (2, 3, 1, 1, 1, 1, 1, 1),  # every size 1
    (2, 2, 1, 2, 2, 3, 8, 3),  # the last row and column are never read (sizes of 0 are errors)
    (3, 2, 1, 1, 2, 3, 5, 2),
]


@pytest.mark.parametrize(("rank", "stride", "dilation", "n", "c", "m", "x", "k"), CASES)
def test_strided_gradient_matches_the_evaluator(
    rank: int, stride: int, dilation: int, n: int, c: int, m: int, x: int, k: int
) -> None:
    text = _conv(rank, stride, dilation)
    rng = np.random.default_rng(rank * 100 + stride * 10 + dilation)
    i = rng.standard_normal((n, c, *([x] * rank)))
    w = rng.standard_normal((m, c, *([k] * rank)))
    ref = compiler.define(text, target="interp")
    (out,) = ref(i, w)
    cot = (rng.standard_normal(out.shape),)
    want = ref.vjp(i, w, grad_outputs=cot)
    cpu = compiler.define(text, options=Options(threads=2, gather="partial"), cache=False)
    assert any("partial scatter" in note for note in cpu.grad.info()["notes"])
    got = cpu.vjp(i, w, grad_outputs=cot)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_partial_and_full_gather_agree_on_a_stride_one_convolution() -> None:
    text = _conv(2, 1, 1)
    rng = np.random.default_rng(5)
    i, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((5, 3, 3, 2))
    cot = (rng.standard_normal((2, 5, 5, 5)),)
    full = compiler.define(text, options=Options(gather="full"), cache=False)
    partial = compiler.define(text, options=Options(gather="partial"), cache=False)
    for a, b in zip(
        full.vjp(i, w, grad_outputs=cot), partial.vjp(i, w, grad_outputs=cot), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_strided_gradient_passes_gradcheck() -> None:
    k = compiler.define(_conv(2, 2, 1), cache=False)
    rng = np.random.default_rng(7)
    compiler.gradcheck(
        k,
        rng.standard_normal((1, 2, 7, 5)),
        rng.standard_normal((3, 2, 3, 3)),
    )
