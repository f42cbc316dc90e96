"""`runs_never` with many-case clauses (issue 43, fuzz class G6: seed 21281 `--grad`).

A clamp piece empty by its own where clauses (`k in 0:1`, `k >= N`) was kept when the
bounds of its other reads, each a nested clamp (`min(max(i - j, 0), N - 1) in 0:N`,
4 cases), took the case split past its limit: `runs_never` answered "unsure" and range
inference then rejected the gradient's statement that "runs for no sizes at all". A
clause whose cases would pass the limit is now left out (the set only grows), so it
cannot hide what the other clauses decide. The seed itself runs in tests/fuzz/test_ci.py
(its gradient against central differences).
"""

from __future__ import annotations

from compiler.autodiff.emptiness import runs_never
from compiler.frontend.ast import Binary, BinOp, Call, Const, RangeConstraint, ScalarType, Var


def _c(v: int) -> Const:
    return Const(v, ScalarType.INT32)


def _nested_clamp_bound(shift: int) -> RangeConstraint:
    """`min(max(i - shift, 0), N - 1) in 0:N`: four cases."""
    n = Var("N")
    inner = Call("max", (Binary(BinOp.SUB, Var("i"), _c(shift)), _c(0)))
    clamp = Call("min", (inner, Binary(BinOp.SUB, n, _c(1))))
    return RangeConstraint(clamp, _c(0), n)


def test_an_empty_domain_stays_empty_with_many_case_clauses() -> None:
    k, n = Var("k"), Var("N")
    past = Binary(BinOp.SUB, k, Binary(BinOp.SUB, n, _c(1)))  # k - (N - 1) >= 1
    empty = (
        RangeConstraint(k, _c(0), _c(1)),
        RangeConstraint(past, _c(1), Binary(BinOp.ADD, past, _c(1))),
    )
    assert runs_never(empty, ("N",))
    bounds = tuple(_nested_clamp_bound(s) for s in range(1, 5))  # 4**4 cases
    assert runs_never((*empty, *bounds), ("N",))
    assert runs_never((*bounds, *empty), ("N",))
    # and the bounds alone are not empty (the check is not vacuous)
    i_range = RangeConstraint(Var("i"), _c(0), n)
    assert not runs_never((i_range, *bounds), ("N",))
