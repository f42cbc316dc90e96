"""Property tests of range inference against brute-force enumeration.

Random small defs with affine subscripts (coefficients in -2..2, offsets in -2..2,
1-3 index variables, an optional reduction variable, 1-2 reads). Whenever inference
succeeds, at random concrete sizes:
- sound: every read of every point of the inferred box is in bounds, except reads the
  inference warned about (unprovable preconditions);
- maximal: widening any variable's range by one at either end puts some read out of
  bounds (the ranges are the largest TC's rounds allow).
Otherwise it raises a RangeError (or the checker rejects the def).
"""

from __future__ import annotations

import itertools

from hypothesis import assume, event, given
from hypothesis import strategies as st

from compiler.diagnostics import RangeError, SemanticError
from compiler.frontend.ast import RangeConstraint, Var
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.ranges import infer_ranges
from compiler.shapes import eval_bound_expr

Sub = tuple[tuple[int, ...], int]  # coefficients per variable, offset


@st.composite
def defs(draw: st.DrawFn) -> tuple[str, list[str], list[list[Sub]]]:
    n_index = draw(st.integers(1, 3))
    variables = ["i", "j", "k"][:n_index] + (["r"] if draw(st.booleans()) else [])
    reads = []
    for _ in range(draw(st.integers(1, 2))):
        rank = draw(st.integers(1, 2))
        subs = [
            (tuple(draw(st.integers(-2, 2)) for _ in variables), draw(st.integers(-2, 2)))
            for _ in range(rank)
        ]
        reads.append(subs)
    return _source(variables, n_index, reads), variables, reads


def _term(coefs: tuple[int, ...], offset: int, variables: list[str]) -> str:
    parts = [f"{c} * {v}" for c, v in zip(coefs, variables, strict=True) if c]
    parts.append(str(offset))
    return " + ".join(parts).replace("+ -", "- ")


def _source(variables: list[str], n_index: int, reads: list[list[Sub]]) -> str:
    params = ", ".join(
        f"float({', '.join(f'S{t}_{d}' for d in range(len(subs)))}) T{t}"
        for t, subs in enumerate(reads)
    )
    rhs = " + ".join(
        f"T{t}({', '.join(_term(c, o, variables) for c, o in subs)})"
        for t, subs in enumerate(reads)
    )
    lhs = ", ".join(variables[:n_index])
    return f"def f({params}) -> (O) {{ O({lhs}) +=! {rhs} }}"


def _in_bounds(point: dict[str, int], subs: list[Sub], t: int, sizes: dict, variables) -> bool:
    for d, (coefs, offset) in enumerate(subs):
        value = sum(c * point[v] for c, v in zip(coefs, variables, strict=True)) + offset
        if not 0 <= value < sizes[f"S{t}_{d}"]:
            return False
    return True


def _box_ok(box: dict[str, range], reads, sizes, variables, skip: set[int]) -> bool:
    for values in itertools.product(*(box[v] for v in variables)):
        point = dict(zip(variables, values, strict=True))
        for t, subs in enumerate(reads):
            if t not in skip and not _in_bounds(point, subs, t, sizes, variables):
                return False
    return True


@given(defs(), st.lists(st.integers(1, 5), min_size=4, max_size=4))
def test_inferred_ranges_are_sound_and_maximal(case, size_values) -> None:
    src, variables, reads = case
    try:
        checked = check_def(parse(src).get())
    except SemanticError:
        assume(False)
        return
    try:
        ranged = infer_ranges(checked)
    except RangeError as e:
        event(f"RangeError: {e.message.split(':')[0][:40]}")
        return
    event("inferred" + (" with warnings" if ranged.warnings else ""))
    names = checked.size_params
    sizes = {n: size_values[k % len(size_values)] for k, n in enumerate(names)}
    stmt = ranged.checked.definition.stmts[0]
    box = {}
    for c in stmt.where:
        assert isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
        box[c.expr.name] = range(eval_bound_expr(c.lo, sizes), eval_bound_expr(c.hi, sizes))
    present = set(checked.stmts[0].all_vars)
    assert set(box) == present
    box.update({v: range(0, 1) for v in variables if v not in present})  # coefficient 0
    warned = {t for t in range(len(reads)) for w in ranged.warnings if f"T{t}(" in w.message}
    assert _box_ok(box, reads, sizes, variables, warned)
    if any(len(b) == 0 for b in box.values()):
        return
    for v in sorted(present):
        for wider in (range(box[v].start - 1, box[v].stop), range(box[v].start, box[v].stop + 1)):
            assert not _box_ok({**box, v: wider}, reads, sizes, variables, set()), (
                f"range of {v} could be widened to {wider}"
            )
