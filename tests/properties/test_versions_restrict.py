"""Property test of `loops.versions.restrict`: on random sizes (around register tiles'
8 rows and 16 lanes, their remainders, the L1-aliasing and padding conditions), the
Function restricted to the branches those sizes take computes, in the loop-IR
interpreter, exactly what the whole Function does -- for the gradients of matmul and
conv2d, whose choice points are versions, narrow-row fallbacks and remainder loops.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from compiler import pipeline
from compiler.codegen.target import get_target, prepare
from compiler.loops import Function, eval_size_expr, run_function
from compiler.loops import versions as V
from compiler.loops.ir import Role
from compiler.options import Options

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@cache
def _gradient(example: str) -> Function:
    lowered = pipeline.run((EXAMPLES / f"{example}.tc").read_text(), None, upto="lower", grad=True)
    return prepare(get_target("llvm"), lowered.function, Options())


def _same_results(f: Function, sizes: dict[str, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = {}
    for b in f.buffers:
        shape = tuple(eval_size_expr(e, sizes) for e in b.shape)
        fill = rng.standard_normal(shape) if b.role is Role.IN else np.zeros(shape)
        arrays[b.name] = fill.astype(b.dtype.np)
    taken = V.branches(f, sizes)
    g = V.restrict(f, taken)
    assert V.branches(g, sizes) <= V.every_branch(g)
    want = run_function(f, {n: a.copy() for n, a in arrays.items()}, sizes)
    got = run_function(g, {n: a.copy() for n, a in arrays.items()}, sizes)
    for name, a in want.items():
        np.testing.assert_array_equal(got[name], a, err_msg=f"{name} for {sizes}")


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 20), n=st.integers(1, 40), seed=st.integers(0, 9))
def test_a_restricted_matmul_gradient_computes_what_the_whole_does(
    m: int, k: int, n: int, seed: int
) -> None:
    _same_results(_gradient("matmul"), {"M": m, "K": k, "N": n}, seed)


@settings(max_examples=6, deadline=None)
@given(
    c=st.integers(1, 10),
    hw=st.sampled_from([(3, 3), (5, 17), (14, 14), (6, 4)]),
    kernel=st.sampled_from([(1, 1), (3, 3), (3, 2), (5, 5)]),
    m=st.integers(1, 3),
    seed=st.integers(0, 9),
)
def test_a_restricted_conv2d_gradient_computes_what_the_whole_does(
    c: int, hw: tuple[int, int], kernel: tuple[int, int], m: int, seed: int
) -> None:
    (h, w), (kh, kw) = hw, kernel
    assume(kh <= h and kw <= w)  # else no output: the forward def refuses such sizes
    sizes = {"N": 1, "C": c, "H": h, "W": w, "M": m, "KH": kh, "KW": kw}
    _same_results(_gradient("conv2d"), sizes, seed)
