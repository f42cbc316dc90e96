"""Property test of partial scatters (compiler/poly/partial.py) on the CPU target.

Each case is a scatter with one plain variable `p` and random affine subscripts of
the other variables (coefficients -1..3: strides, zeros, negative steps):

    O(p, <1-2 random affine subscripts of i, j, k>) op X(p, <the variables, permuted>)

compiled with `Options(gather="partial")` (kept as a partial scatter whenever it has a
plain variable, so every shape goes through the partial schedule, its jams and
parallel loop) and run natively, in float64; the result must equal the scatter
computed here with plain Python loops (an oracle independent of tcc).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import compiler
from compiler.diagnostics import TCError
from compiler.options import Options

VARS = ("i", "j", "k")
OPS = ("+=!", "max=!", "+=")


def _subscript(coefs: tuple[int, ...], offset: int, sizes: tuple[int, ...]) -> str:
    parts = [f"{c} * {v}" for c, v in zip(coefs, VARS, strict=False) if c]
    parts += [f"{-c} * {sizes[v] - 1}" for v, c in enumerate(coefs) if c < 0]
    return " + ".join([*parts, str(offset)])


def _value(
    coefs: tuple[int, ...], offset: int, sizes: tuple[int, ...], point: tuple[int, ...]
) -> int:
    value = sum(c * x for c, x in zip(coefs, point, strict=False)) + offset
    return value + sum(-c * (sizes[v] - 1) for v, c in enumerate(coefs) if c < 0)


@st.composite
def cases(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    n = draw(st.integers(1, 3))
    sizes = tuple(draw(st.sampled_from([1, 2, 3, 5])) for _ in range(n))
    rank = draw(st.integers(1, 2))
    subs = tuple(
        (tuple(draw(st.integers(-1, 3)) for _ in range(n)), draw(st.integers(0, 2)))
        for _ in range(rank)
    )
    perm = tuple(draw(st.permutations(range(n))))
    op = draw(st.sampled_from(OPS))
    p = draw(st.sampled_from([1, 2, 7]))
    return n, sizes, subs, perm, op, p


@settings(max_examples=25, deadline=None)
@given(cases(), st.integers(0, 2**16))
def test_partial_scatter_matches_python_loops(case: tuple, seed: int) -> None:  # type: ignore[type-arg]
    n, sizes, subs, perm, op, p = case
    x_dims = ", ".join(["P", *(str(sizes[v]) for v in perm)])
    lhs = ", ".join(["p", *(_subscript(c, o, sizes) for c, o in subs)])
    x_args = ", ".join(["p", *(VARS[v] for v in perm)])
    text = f"def f(double({x_dims}) X) -> (O) {{\n    O({lhs}) {op} X({x_args})\n}}\n"
    points = list(itertools.product(*(range(s) for s in sizes)))
    shape = (p, *(max(_value(c, o, sizes, q) for q in points) + 1 for c, o in subs))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p, *(sizes[v] for v in perm)))
    start = rng.standard_normal(shape)
    try:
        kernel = compiler.define(text, options=Options(gather="partial", threads=2), cache=False)
        out = start.copy()
        got = kernel(x, out=(out,))[0] if op == "+=" else kernel(x)[0]
    except TCError:
        assume(False)  # rejected by the checker or range inference (a legitimate error)
        return
    want = start.copy()
    if op != "+=":
        want[...] = 0.0 if op == "+=!" else -np.inf
    for q in range(p):
        for point in points:
            element = (q, *(_value(c, o, sizes, point) for c, o in subs))
            value = x[(q, *(point[v] for v in perm))]
            want[element] = max(want[element], value) if op == "max=!" else want[element] + value
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=text)
