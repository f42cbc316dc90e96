"""CPU schedule options: every combination `Options` exposes computes what
target="interp" computes (float32 and float64, 1 and 2 threads), on matmul, conv2d,
softmax, a strided conv, gradients in gather form and reductions with every operator.
Sizes are odd on purpose, so unroll-and-jam remainders run. Also: the options are
validated, and the loop nests have the structure the options ask for."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import loops as L
from compiler.cpu.model import lower
from compiler.diagnostics import OptionsError
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.kernel import define
from compiler.loops.jam import unroll_and_jam
from compiler.options import Options
from compiler.poly.ranges import infer_ranges

PROGRAMS = {
    "matmul": "def f(FT(M, K) A, FT(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    "conv2d": "def f(FT(N, C, H, W) I, FT(M, C, KH, KW) W1, FT(M) B) -> (O) "
    "{ O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw) "
    "  O(n, m, h, w) = O(n, m, h, w) + B(m) }",
    "softmax": "def f(FT(N, D) X) -> (Y, mx, s) { mx(n) max=! X(n, d) "
    "  Y(n, d) = exp(X(n, d) - mx(n))  s(n) +=! Y(n, d)  Y(n, d) = Y(n, d) / s(n) }",
    "strided_conv": "def f(FT(N, C, H, W) I, FT(M, C, KH, KW) W1) -> (O) "
    "{ O(n, m, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * W1(m, c, kh, kw) }",
    "conv_input_grad": "def f(FT(N, M, H, W) G, FT(M, C, KH, KW) W1) -> (IG) "
    "{ IG(n, c, h + kh, w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw) }",
    "conv_weight_grad": "def f(FT(N, C, H, W) I, FT(N, M, HO, WO) G) -> (WG) "
    "{ WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw) "
    "  where kh in 0:3, kw in 0:3, h in 0:HO, w in 0:WO, h + kh in 0:H, w + kw in 0:W }",
    "strided_grad": "def f(FT(N, O) G, FT(K) W1) -> (IG) { IG(n, 2 * o + k) +=! G(n, o) * W1(k) }",
    "max_min_times": "def f(FT(M, K) A, FT(K, N) B) -> (P, Q, R) "
    "{ P(m, n) max=! A(m, k) + B(k, n)  Q(m, n) min=! A(m, k) - B(k, n) "
    "  R(m, n) *=! A(m, k) * B(k, n) / 4.0 + 1.0 }",
    "accumulate_no_init": "def f(FT(M, K) A, FT(K, N) B) -> (C) "
    "{ C(m, n) = 1.0 where m in 0:M, n in 0:N  C(m, n) += A(m, k) * B(k, n) }",
}
SIZES = {"M": 7, "K": 6, "N": 9, "C": 3, "H": 9, "W": 11, "KH": 3, "KW": 2, "D": 5, "O": 5}
SIZES |= {"HO": 7, "WO": 9}

OPTIONS = [
    Options(innermost=None),
    Options(),
    Options(unroll=1, block=1),
    Options(unroll=3, block=2),
    Options(innermost="n", unroll=2, block=5),
    # register tiles with an unrolled reduction and no cache tiles: the reduction loop's
    # remainder must add to the main part's sums (it once restarted from the identity)
    Options(unroll=2, register_tile=3, tile=()),
]
# Every option set in float32 on 1 and 2 threads (a thread count does not change the
# compiled code, so the second is a cache hit); float64 with the model's defaults and
# the literal order (compiling dominates this file's time).
CASES = [(o, "float", t) for o in OPTIONS for t in (1, 2)]
CASES += [(o, "double", 2) for o in OPTIONS[:2]]


def _inputs(src: str, rng: np.random.Generator) -> list[np.ndarray]:
    d = parse(src).get()
    return [
        rng.standard_normal([SIZES[str(getattr(e, "name", e))] for e in p.dims]).astype(
            np.float64 if "double" in src else np.float32
        )
        for p in d.params
    ]


@pytest.mark.parametrize(("options", "ft", "threads"), CASES, ids=repr)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_options_equal_interp(name: str, options: Options, ft: str, threads: int) -> None:
    src = PROGRAMS[name].replace("FT", ft)
    arrays = _inputs(src, np.random.default_rng(len(name)))
    expected = define(src, target="interp")(*arrays)
    options = Options(threads, options.innermost, options.unroll, options.block)
    got = define(src, target="llvm", options=options)(*arrays)
    for e, g in zip(expected, got, strict=True):
        tol = 1e-4 if g.dtype == np.float32 else 1e-11
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "kwargs",
    [{"threads": 0}, {"unroll": 0}, {"block": 17}, {"unroll": True}, {"innermost": "1x"},
     {"innermost": 3}, {"register_tile": 0}, {"register_tile": 65}],
)  # fmt: skip
def test_bad_options_are_options_errors(kwargs: dict) -> None:
    with pytest.raises(OptionsError):
        Options(**kwargs)


def _loops(s: L.Stmt) -> list[L.For]:
    found: list[L.For] = []

    class _V(L.Visitor):
        def visit_For(self, node: L.For) -> None:
            found.append(node)
            self.generic_visit(node)

    _V().visit(s)
    return found


def test_matmul_structure_follows_the_options() -> None:
    src = PROGRAMS["matmul"].replace("FT", "float")
    ranged = infer_ranges(check_def(parse(src).get()))
    f = lower(
        ranged, Options(unroll=1, block=1, tile=(), register_tile=1)
    )  # tiling: tests/codegen/test_tiling
    init, main = f.body.stmts  # type: ignore[attr-defined]
    assert [lp.var for lp in _loops(main)] == ["m", "k", "n"]
    assert main.kind is L.LoopKind.PARALLEL
    f = lower(ranged, Options(unroll=2, block=3, register_tile=1))
    steps = {(lp.var, lp.step) for lp in _loops(f.body)}
    assert {("m", 3), ("m", 1), ("k", 2), ("k", 1)} <= steps


def test_unroll_and_jam_runs_the_same_instances() -> None:
    """On the loop-IR interpreter: jammed == original for bounds that are not
    multiples of the factor, also with a nonzero start and a step of 2."""
    src = "def f(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    ranged = infer_ranges(check_def(parse(src).get()))
    f = lower(ranged, Options(unroll=1, block=1))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    arrays = {"A": a.astype(np.float32), "B": b.astype(np.float32)}
    sizes = {"M": 7, "K": 5, "N": 6}
    base = L.run_function(f, {**arrays, "C": np.zeros((7, 6), np.float32)}, sizes)["C"]
    for var, factor in (("m", 3), ("k", 2), ("n", 4)):
        jammed = L.Function(f.name, f.buffers, f.size_params, unroll_and_jam(f.body, var, factor))
        L.verify(jammed)
        got = L.run_function(jammed, {**arrays, "C": np.zeros((7, 6), np.float32)}, sizes)["C"]
        np.testing.assert_array_equal(got, base)
