"""poly.gather: scatter -> gather, checked three ways.

- golden: the gather form as TC text (tests/golden/gather/), which must parse, check,
  infer ranges and evaluate by itself;
- structure: no scatter remains (every left-hand side is distinct plain index
  variables) except data-dependent ones, which `remaining_scatters` lists;
- numbers: compiler.interp on the gather form equals compiler.interp on the scatter
  form (the interpreter executes scatter left-hand sides directly) at several sizes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.diagnostics import RangeError
from compiler.frontend.ast import Access, Var
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from compiler.interp import evaluate
from compiler.pipeline import run
from compiler.poly.gather import WriteKind, remaining_scatters, scatter_to_gather, write_kind
from compiler.shapes import bind_sizes

CONV_INPUT = """
def conv_input_grad(double(N, C, H, W) I, double(M, C, KH, KW) W1, double(N, M, HO, WO) O_grad)
    -> (I_grad) {
    I_grad(n, c, h + kh, w + kw) +=! O_grad(n, m, h, w) * W1(m, c, kh, kw)
        where h in 0:H - KH + 1, w in 0:W - KW + 1
}
"""
CONV_WEIGHT = """
def conv_weight_grad(double(N, C, H, W) I, double(M, C, KH, KW) W1, double(N, M, HO, WO) O_grad)
    -> (W1_grad) {
    W1_grad(m, c, kh, kw) +=! O_grad(n, m, h, w) * I(n, c, h + kh, w + kw)
        where h in 0:H - KH + 1, w in 0:W - KW + 1
}
"""
STRIDED = """
def strided_input_grad(double(N, C, H, W) I, double(M, C, KH, KW) W1, double(N, M, HO, WO) O_grad)
    -> (I_grad) {
    I_grad(n, c, 2 * h + kh, 2 * w + kw) +=! O_grad(n, m, h, w) * W1(m, c, kh, kw)
        where h in 0:(H - KH) / 2 + 1, w in 0:(W - KW) / 2 + 1
}
"""
DILATED = """
def dilated_input_grad(double(N, H) I, double(KH) W1, double(N, HO) O_grad) -> (I_grad) {
    I_grad(n, h + 2 * kh) +=! O_grad(n, h) * W1(kh) where h in 0:H - 2 * KH + 2
}
"""
FULL = """
def full_conv(double(N) A, double(M) B) -> (C) {
    C(i + j) +=! A(i) * B(j)
}
"""
DIAGONAL = """
def diagonal_grad(double(N) D_grad) -> (A_grad) {
    A_grad(i, i) +=! D_grad(i)
}
"""
FLOOR_DIV = """
def upsample_grad(double(N) O_grad) -> (A_grad) {
    A_grad(i / 2) +=! O_grad(i)
}
"""
RANK_DEFICIENT = """
def bias_grad(double(N, M) O_grad) -> (b_grad) {
    b_grad(j) +=! O_grad(i, j)
}
"""
SHIFTED_SUM = """
def shifted_sum(double(N, M, K) X) -> (S) {
    S(i + j + 1) +=! X(i, j, k)
}
"""
STRIDE_GUARD = """
def stride3_grad(double(N) O_grad) -> (A_grad) {
    A_grad(3 * i + 1) +=! O_grad(i)
}
"""
EVEN_GUARD = """
def even_grad(double(N, M) B) -> (A) {
    A(2 * i + 2 * j, 0) +=! B(i, j)
}
"""

GOLDEN = {
    "conv_input": CONV_INPUT,
    "strided_conv_input": STRIDED,
    "dilated_conv_input": DILATED,
    "full_conv": FULL,
    "diagonal": DIAGONAL,
    "floor_div": FLOOR_DIV,
    "shifted_sum": SHIFTED_SUM,
    "stride_guard": STRIDE_GUARD,
    "even_guard": EVEN_GUARD,
}

# Concrete sizes per case: the numeric comparison runs at each.
CONV_SIZES = [
    dict(N=1, C=1, H=3, W=3, M=1, KH=3, KW=3),
    dict(N=2, C=3, H=7, W=6, M=2, KH=3, KW=2),
    dict(N=1, C=2, H=5, W=9, M=3, KH=1, KW=4),
]


def _conv(sizes: dict[str, int], stride: int = 1) -> dict[str, int]:
    ho = (sizes["H"] - sizes["KH"]) // stride + 1
    return sizes | dict(HO=ho, WO=(sizes["W"] - sizes["KW"]) // stride + 1)


def _dilated(n: int, h: int, kh: int) -> dict[str, int]:
    return dict(N=n, H=h, KH=kh, HO=h - 2 * kh + 2)


SIZES: dict[str, list[dict[str, int]]] = {
    "conv_input": [_conv(s) for s in CONV_SIZES],
    "conv_weight": [_conv(s) for s in CONV_SIZES],
    "strided_conv_input": [
        _conv(s, 2) for s in CONV_SIZES + [dict(N=1, C=1, H=8, W=9, M=2, KH=2, KW=3)]
    ],
    "dilated_conv_input": [_dilated(2, 5, 2), _dilated(1, 9, 3), _dilated(1, 3, 1)],
    "full_conv": [dict(N=1, M=1), dict(N=4, M=3), dict(N=2, M=7)],
    "diagonal": [dict(N=1), dict(N=5)],
    "floor_div": [dict(N=1), dict(N=6), dict(N=7)],
    "rank_deficient": [dict(N=3, M=4)],
    "shifted_sum": [dict(N=1, M=1, K=1), dict(N=3, M=4, K=2)],
    "stride_guard": [dict(N=1), dict(N=4)],
    "even_guard": [dict(N=1, M=1), dict(N=3, M=2)],
}


def _ranged(text: str) -> RangedDef:
    return run(text, upto="ranges")


def _inputs(ranged: RangedDef, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for t in ranged.checked.inputs:
        shape = tuple(sizes[d.name] if isinstance(d, Var) else int(d.value) for d in t.dims or ())
        arrays[t.name] = rng.standard_normal(shape)
    return arrays


def _assert_same(scatter: RangedDef, gather: RangedDef, sizes: dict[str, int]) -> None:
    inputs = _inputs(scatter, sizes)
    expected = evaluate(scatter, inputs, sizes)
    actual = evaluate(gather, inputs, sizes)
    assert expected.keys() == actual.keys()
    for name, value in expected.items():
        assert actual[name].shape == value.shape, name
        np.testing.assert_allclose(actual[name], value, rtol=1e-12, atol=1e-12)


def _assert_gather_form(ranged: RangedDef) -> None:
    for facts in ranged.checked.stmts:
        args = facts.stmt.lhs.args
        assert all(isinstance(a, Var) for a in args), facts.stmt.lhs
        names = [a.name for a in args if isinstance(a, Var)]
        assert len(set(names)) == len(names)
        assert set(names) <= set(facts.index_vars)
    assert remaining_scatters(ranged) == ()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_gather(name: str, golden) -> None:  # noqa: ANN001
    scatter = _ranged(GOLDEN[name])
    assert remaining_scatters(scatter)  # the input really is a scatter
    gather = scatter_to_gather(scatter)
    text = print_def(gather.checked.definition)
    golden.check(f"gather/{name}.txt", text + "\n")
    _assert_gather_form(gather)
    # the printed text is a program of its own: parse, check, ranges, evaluate
    reparsed = _ranged(text)
    _assert_gather_form(reparsed)
    for sizes in SIZES[name]:
        _assert_same(scatter, reparsed, sizes)
        _assert_same(scatter, gather, sizes)


def test_conv_input_grad_shape_of_the_result() -> None:
    gather = scatter_to_gather(_ranged(CONV_INPUT))
    (stmt,) = gather.checked.definition.stmts
    assert print_def(gather.checked.definition).count("+=!") == 1  # covers I_grad: no init
    assert [str(a.name) for a in stmt.lhs.args if isinstance(a, Var)] == ["n", "c", "y", "x"]
    (facts,) = gather.checked.stmts
    assert facts.reduction_vars == ("m", "kh", "kw")  # small ranges inside


@pytest.mark.parametrize("text", [CONV_WEIGHT, RANK_DEFICIENT], ids=["weight", "bias"])
def test_gather_form_is_returned_unchanged(text: str) -> None:
    ranged = _ranged(text)
    assert remaining_scatters(ranged) == ()
    assert scatter_to_gather(ranged) is ranged


def test_pass_is_pure_and_deterministic() -> None:
    scatter = _ranged(CONV_INPUT)
    before = print_def(scatter.checked.definition)
    first = scatter_to_gather(scatter)
    assert print_def(scatter.checked.definition) == before
    assert print_def(scatter_to_gather(scatter).checked.definition) == print_def(
        first.checked.definition
    )
    assert scatter_to_gather(first) is first  # idempotent


def test_strided_conv_needs_no_guard() -> None:
    text = print_def(scatter_to_gather(_ranged(STRIDED)).checked.definition)
    assert "%" not in text  # h stays inside: kh = y - 2 * h, no divisibility test


def test_partial_cover_initialises_the_whole_output() -> None:
    gather = scatter_to_gather(_ranged(DIAGONAL))
    init, accumulate = gather.checked.definition.stmts
    assert init.op.value == "=" and accumulate.op.value == "+="
    sizes = dict(N=4)
    inputs = _inputs(gather, sizes)
    result = evaluate(gather, inputs, sizes)["A_grad"]
    np.testing.assert_array_equal(result, np.diag(inputs["D_grad"]))
    # the off-diagonal elements stay at the initial value, also accumulating into out=
    start = np.full((4, 4), 7.0)
    out = evaluate(gather, inputs, sizes, outputs={"A_grad": start})["A_grad"]
    np.testing.assert_array_equal(out, np.diag(inputs["D_grad"]))


ACCUMULATE = """
def acc(double(N) A, double(M) B) -> (C) {
    C(i) = A(i) where i in 0:N
    C(i + j) += A(i) * B(j)
    C(2 * j) max= B(j)
}
"""


def test_operators_without_init_and_several_statements() -> None:
    scatter = _ranged(ACCUMULATE)
    gather = scatter_to_gather(scatter)
    _assert_gather_form(gather)
    assert [s.op.value for s in gather.checked.definition.stmts] == ["=", "+=", "max="]
    for sizes in (dict(N=3, M=2), dict(N=2, M=5), dict(N=1, M=1)):
        _assert_same(scatter, gather, sizes)
        # accumulating into caller data: C's shape is max(N + M - 1, 2 * M - 1)
        n = max(sizes["N"] + sizes["M"] - 1, 2 * sizes["M"] - 1)
        inputs = _inputs(scatter, sizes)
        start = {"C": np.linspace(-3.0, 3.0, n)}
        expected = evaluate(scatter, inputs, sizes, outputs=start)["C"]
        np.testing.assert_allclose(evaluate(gather, inputs, sizes, outputs=start)["C"], expected)


def test_max_and_product_reductions() -> None:
    text = """
    def m(double(N, M) A) -> (O, P) {
        O(i + j) max=! A(i, j)
        P(i / 2, 0) *=! A(i, j)
    }
    """
    scatter = _ranged(text)
    gather = scatter_to_gather(scatter)
    _assert_gather_form(gather)
    for sizes in (dict(N=3, M=2), dict(N=5, M=4)):
        _assert_same(scatter, gather, sizes)


def test_injective_assignment_stays_an_assignment() -> None:
    scatter = _ranged("def s(double(N) A) -> (O) { O(i + 1) = A(i) }")
    gather = scatter_to_gather(scatter)
    (stmt,) = gather.checked.definition.stmts
    assert stmt.op.value == "=" and isinstance(stmt.lhs.args[0], Var)
    _assert_same(scatter, gather, dict(N=5))


def test_assignment_that_writes_twice_is_an_error() -> None:
    scatter = _ranged("def s(double(N) A) -> (O) { O(i / 2) = A(i) }")
    with pytest.raises(RangeError, match="more than once"):
        scatter_to_gather(scatter)


def test_data_dependent_scatter_stays_and_is_listed() -> None:
    # check does not accept a tensor read on the left-hand side yet: build the
    # statement by hand from a ranged gather statement
    text = """
    def emb(double(N, D) G, int32(N) idx) -> (E_grad) {
        E_grad(i, d) += G(i, d) where i in 0:N, d in 0:D
        E_grad(i, d) += G(i, d)
    }
    """
    ranged = _ranged(text)
    stmts = list(ranged.checked.definition.stmts)
    lhs = stmts[1].lhs
    scatter_lhs = Access(lhs.name, (Access("idx", (Var("i"),)), Var("d")))
    stmts[1] = dataclasses.replace(stmts[1], lhs=scatter_lhs)
    definition = dataclasses.replace(ranged.checked.definition, stmts=tuple(stmts))
    facts = tuple(
        dataclasses.replace(f, stmt=s)
        for f, s in zip(ranged.checked.stmts, definition.stmts, strict=True)
    )
    checked = dataclasses.replace(ranged.checked, definition=definition, stmts=facts)
    synthetic = dataclasses.replace(ranged, checked=checked)
    assert write_kind(facts[1]) is WriteKind.DATA_DEPENDENT
    assert write_kind(facts[0]) is WriteKind.GATHER
    assert remaining_scatters(synthetic) == (1,)
    assert scatter_to_gather(synthetic) is synthetic


def test_gather_through_the_pipeline() -> None:
    ranged = run(CONV_INPUT, upto="gather")
    _assert_gather_form(ranged)
    sizes = bind_sizes(ranged, {"I": (1, 2, 5, 5), "W1": (2, 2, 3, 3), "O_grad": (1, 2, 3, 3)})
    assert sizes["H"] == 5


def test_gather_adds_no_warnings() -> None:
    # (the conv examples' O_grad has sizes HO, WO of its own, so both forms warn
    # that its reads cannot be proven in bounds; the gather form adds nothing)
    for name, text in GOLDEN.items():
        scatter = _ranged(text)
        gather = scatter_to_gather(scatter)
        reparsed = check_def(parse(print_def(gather.checked.definition), name).get())
        assert len(gather.warnings) <= len(scatter.warnings), name
        assert len(reparsed.warnings) <= len(scatter.checked.warnings), name
