"""A gather piece whose guard constrains a variable alone (`j in 0:j + 1`, i.e.
j >= 0) besides its range: the pass builds its domain once per variable (islpy
refused the duplicated dimension name 'j'). Oracle: the scatter with Python loops."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.frontend.ast import RangeConstraint, Var
from compiler.pipeline import run
from compiler.poly import invert
from compiler.poly.gather import remaining_scatters, scatter_to_gather
from compiler.poly.isl_bridge import StmtSpace, condition_of

STRIDES = "def f(float(M, K) X) -> (O) { O(2 * j + 3 * k) +=! X(j, k) }"


def _scatter(x: np.ndarray) -> np.ndarray:
    m, k = x.shape
    out = np.zeros(2 * (m - 1) + 3 * (k - 1) + 1)
    for a in range(m):
        for b in range(k):
            out[2 * a + 3 * b] += x[a, b]
    return out


def test_the_gather_has_a_guard_on_a_variable_alone() -> None:
    gathered = scatter_to_gather(run(STRIDES, upto="ranges"))
    assert remaining_scatters(gathered) == ()
    init, stmt = gathered.checked.definition.stmts  # `O(y) = 0`, then the gather
    on_j = [c for c in stmt.where if isinstance(c, RangeConstraint) and c.expr == Var("j")]
    assert len(on_j) == 2  # its range, and the guard j >= 0


@pytest.mark.parametrize("target", ("interp", "llvm", "cuda-emulated"))
@pytest.mark.parametrize("shape", ((3, 4), (1, 1), (5, 2), (2, 6)))
def test_two_strides_scatter(target: str, shape: tuple[int, int]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    options = Options(gather="full") if target == "llvm" else None
    (got,) = compiler.define(STRIDES, target=target, options=options)(x)
    np.testing.assert_allclose(got, _scatter(x), rtol=1e-5, atol=1e-5)


def test_guards_when_isl_gist_fails() -> None:
    """isl's `gist` of this piece by its ranges' box fails an internal assertion
    (`n_div` of the box's pieces): the guards come from the piece's own constraints,
    and `_guards` checks that they state the piece exactly (a piece of the
    index-inversion property test's `O(-i + 2 * j + 2 * k + 2 * l + Si - 1, i + 3 * j
    - l + 1) += X(l, j, i, k) * Y(i)`)."""
    piece = isl.Set(
        "[Si] -> { [y, x, k] : 0 <= k <= 2 and -16 - Si + y + x <= 2k <= 3 - Si + y + x"
        " and 5*floor((-2 - Si + y + x - 2k)/5) <= -5 - Si + y + x - 2k"
        " and -8 - 2Si + y + 2x - 2k <= 8*floor((-2 - Si + y + x - 2k)/5)"
        " <= -9 - Si + y + 2x - 2k }"
    )
    names, params = ["y", "x", "k"], ("Si",)
    context = StmtSpace((), params).context.params()
    ranges = tuple(invert._range_of(piece, k, names, params, context) for k in range(3))
    guards = invert._guards(piece, ranges, names, params, context)
    space = StmtSpace(tuple(names), params)
    said = space.context
    for r in (*ranges, *guards):
        said = said & condition_of(r.expr, r.lo, r.hi, space)
    assert said.intersect_params(context).is_equal(
        piece.align_params(said.get_space()).intersect_params(context)
    )
