"""Every Options value the tuner may pick compiles every program, and computes what NumPy
computes: each program under every single non-default value of each searched field
(`compiler.tune.space.FIELDS`) and a few random samples of the whole space.

`Options(unroll=1)` once blocked the column sums of a triangular nest
(`O(i) +=! C(i) where k in 0:i + 1`) and of a strided scatter (`O(2 * i + k) +=! ...`)
in a strip buffer whose offsets were the row loop's bounds (`max(1024 * i_t, k)`),
then read `k` after its loop: "loop IR: k is read but not bound" (`cpu.colsum`).

Candidates whose loops (and thread count) come out equal run once: the code is a
function of the loops alone (`cpu.cpu`, `runtime.native.program_key`)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import numpy as np
import pytest

from compiler import pipeline
from compiler.kernel import define
from compiler.loops.printer import print_function
from compiler.options import Options
from compiler.tune.space import Choice, Fixed, PerStatement, Space, SpaceContext, TileSpace

Arrays = tuple[np.ndarray, ...]


def _r(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _scatter(w: np.ndarray, x: np.ndarray) -> Arrays:
    o = np.zeros(2 * len(w) + 1)
    for k in range(3):
        o[k : k + 2 * len(w) : 2] += w * x[k]
    return (o,)


def _conv(i: np.ndarray, w: np.ndarray) -> Arrays:
    _, _, h, wd = i.shape
    _, _, kh, kw = w.shape
    o = 0.0
    for a in range(kh):
        for b in range(kw):
            patch = i[:, :, a : a + h - kh + 1, b : b + wd - kw + 1]
            o = o + np.einsum("nchw,mc->nmhw", patch, w[:, :, a, b])
    return (o,)


def _softmax(a: np.ndarray) -> Arrays:
    mx = a.max(1)
    e = np.exp(a - mx[:, None])
    return e / e.sum(1)[:, None], mx, e, e.sum(1)


# (id, source, inputs, NumPy reference in float64)
PROGRAMS: list[tuple[str, str, Callable[[np.random.Generator], Arrays], Callable[..., Arrays]]] = [
    ("scatter",
     "def f(float(P) W, float(3) X) -> (O) { O(2 * i + k) +=! W(i) * X(k) where i in 0:P, k in 0:3 }",
     lambda g: (_r(g, 1100), _r(g, 3)), _scatter),
    ("triangular", "def f(float(M) C) -> (O) { O(i) +=! C(i) where i in 0:M, k in 0:i + 1 }",
     lambda g: (_r(g, 1300),), lambda c: (c * np.arange(1, len(c) + 1),)),
    ("prefix_sums", "def f(float(N, M) A) -> (O) { O(i, j) +=! A(k, j) where i in 0:N, k in 0:i + 1 }",
     lambda g: (_r(g, 40, 70),), lambda a: (np.cumsum(a, 0),)),
    ("matmul", "def f(float(N, K) A, float(K, M) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }",
     lambda g: (_r(g, 37, 150), _r(g, 150, 141)), lambda a, b: (a @ b,)),
    ("conv",
     "def f(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) "
     "{ O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw) }",
     lambda g: (_r(g, 2, 5, 14, 13), _r(g, 6, 5, 3, 3)), _conv),
    ("column_sums", "def f(float(N, M) A) -> (S) { S(j) +=! A(i, j) }",
     lambda g: (_r(g, 2100, 70),), lambda a: (a.sum(0),)),
    ("row_max", "def f(float(N, M) A) -> (S) { S(i) max=! A(i, j) }",
     lambda g: (_r(g, 50, 300),), lambda a: (a.max(1),)),
    ("softmax",
     "def f(float(N, M) A) -> (O, mx, e, s) { mx(i) max=! A(i, j)\n"
     "e(i, j) = exp(A(i, j) - mx(i))\ns(i) +=! e(i, j)\nO(i, j) = e(i, j) / s(i) }",
     lambda g: (_r(g, 20, 100),), _softmax),
]  # fmt: skip


def _values(space: object, ctx: SpaceContext) -> tuple[object, ...]:
    """Every value a field's space offers (a few shapes of tile for `tile`)."""
    if isinstance(space, Choice):
        return space.values(ctx)
    if isinstance(space, TileSpace):
        sizes = space.sizes(ctx)
        mixed = tuple(sizes[1 + d % (len(sizes) - 1)] for d in range(ctx.depth))
        last = (1,) * (ctx.depth - 1) + (sizes[1],)
        return (None, (), (sizes[1],) * ctx.depth, (sizes[-1],) * ctx.depth, mixed, last)
    if isinstance(space, PerStatement):  # a few drawn entries (none for a one-statement def)
        every = dataclasses.replace(space, share=1.0)
        drawn = {every.sample(random.Random(seed), ctx) for seed in range(4)}
        return tuple(sorted(drawn, key=repr))
    assert isinstance(space, Fixed), f"a field space this test does not know: {space!r}"
    return (space.default,)


def _candidates(src: str, inputs: Arrays) -> list[Options]:
    ranged = pipeline.run(src, upto="ranges")
    extent = max(max(a.shape, default=1) for a in inputs)
    ctx = SpaceContext.of(ranged, {"extent": extent}, cores=4)
    space = Space.for_options(Options, ctx)
    default = Options()
    singles = [
        dataclasses.replace(default, **{name: value})
        for name, field in space.fields
        for value in _values(field, ctx)
        if value != getattr(default, name)
    ]
    rng = random.Random(0)
    return singles + [space.sample(rng) for _ in range(3)]


@pytest.mark.parametrize(
    ("src", "make", "ref"), [p[1:] for p in PROGRAMS], ids=[p[0] for p in PROGRAMS]
)
def test_every_tuner_option_compiles_and_computes_the_reference(
    src: str, make: Callable[[np.random.Generator], Arrays], ref: Callable[..., Arrays]
) -> None:
    inputs = make(np.random.default_rng(0))
    want = ref(*(a.astype(np.float64) for a in inputs))
    seen: set[tuple[str, int | None]] = set()
    for options in _candidates(src, inputs):
        key = (print_function(pipeline.run(src, upto="lower", options=options).function),
               options.threads)  # fmt: skip
        if key in seen:
            continue
        seen.add(key)
        got = define(src, options=options, cache=None)(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert np.shape(g) == np.shape(w), options
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=repr(options))


TRIANGULAR = "def f(float(M) C) -> (O) { O(i) +=! C(i) where i in 0:M, k in 0:i + 1 }"
SCATTER = (
    "def f(float(P) W, float(3) X) -> (O) { O(2 * i + k) +=! W(i) * X(k) where i in 0:P, k in 0:3 }"
)


@pytest.mark.parametrize("threads", [1, 2])
def test_unroll_1_of_triangular_and_strided_column_sums(threads: int) -> None:
    options = Options(unroll=1, threads=threads)
    rng = np.random.default_rng(1)
    c = _r(rng, 1300)
    (o,) = define(TRIANGULAR, options=options, cache=None)(c)
    np.testing.assert_allclose(o, c * np.arange(1, 1301), rtol=1e-4)
    w, x = _r(rng, 1100), _r(rng, 3)
    (o,) = define(SCATTER, options=options, cache=None)(w, x)
    np.testing.assert_allclose(o, _scatter(w.astype(np.float64), x)[0], rtol=1e-4, atol=1e-4)
