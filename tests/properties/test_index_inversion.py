"""Property test of index inversion: scatter -> gather on random affine index maps.

Each case is a scatter statement written as TC text:

    O(<r random affine subscripts>) op X(<the variables, permuted>) [* Y(<a subset>)]

with a written tensor of rank 1-3, 1-4 iteration variables (each `v in 0:S_v`, from the
reads), coefficients in -2..3 (zeros and strides included), random offsets (a
subscript with negative coefficients gets `+ |c| * (S_v - 1)` so that it is not
negative for every size), op one of `+=!`, `+=`, `max=`, and random small sizes. After
`scatter_to_gather`:

(a) the gather form, run by compiler.interp, equals the scatter computed here with
    plain Python loops (an oracle independent of interp and of isl);
(b) no output element is written by two different outer (parallel) iterations: the
    gather statements' domains, enumerated at the concrete sizes, map each outer
    iteration to its own element, and the accumulating statement visits exactly as
    many points as the scatter.

Cases that range inference or the checker legitimately reject are skipped, counted,
and must stay a minority (`test_index_inversion` asserts the ratio). A statement over
the gather pass's isl budget (`GatherBudgetWarning`; a few of the thorough profile's
4-variable, 3-subscript maps) stays a scatter: (a) still holds, and such cases must
stay rare.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from hypothesis import assume, event, given
from hypothesis import strategies as st

from compiler.diagnostics import TCError
from compiler.frontend.ast import RangeConstraint, Var
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_def
from compiler.interp import evaluate
from compiler.pipeline import run
from compiler.poly.gather import GatherBudgetWarning, remaining_scatters, scatter_to_gather
from compiler.shapes import eval_bound_expr, output_shapes

VARS = ("i", "j", "k", "l")
OPS = ("+=!", "+=", "max=")


@dataclass(frozen=True)
class Case:
    variables: tuple[str, ...]
    subscripts: tuple[tuple[tuple[int, ...], int], ...]  # coefficients per variable, offset
    x_order: tuple[int, ...]  # X's subscripts: a permutation of the variables
    y_vars: tuple[int, ...]  # Y's subscripts: a subset (empty: no Y)
    op: str
    sizes: tuple[int, ...]  # per variable

    symbolic: tuple[bool, ...]  # per variable: a size parameter, or the literal size

    def size_name(self, v: int) -> str:
        return f"S{self.variables[v]}" if self.symbolic[v] else str(self.sizes[v])

    def subscript_text(self, coefs: tuple[int, ...], offset: int) -> str:
        parts = [f"{c} * {v}" for c, v in zip(coefs, self.variables, strict=True) if c]
        parts += [f"{-c} * ({self.size_name(v)} - 1)" for v, c in enumerate(coefs) if c < 0]
        parts.append(str(offset))
        return " + ".join(parts)

    @property
    def source(self) -> str:
        x_dims = ", ".join(self.size_name(v) for v in self.x_order)
        params = [f"double({x_dims}) X"]
        x_args = ", ".join(self.variables[v] for v in self.x_order)
        rhs = f"X({x_args})"
        if self.y_vars:
            params.append(f"double({', '.join(self.size_name(v) for v in self.y_vars)}) Y")
            rhs += f" * Y({', '.join(self.variables[v] for v in self.y_vars)})"
        lhs = ", ".join(self.subscript_text(c, o) for c, o in self.subscripts)
        return f"def f({', '.join(params)}) -> (O) {{\n    O({lhs}) {self.op} {rhs}\n}}\n"

    @property
    def size_values(self) -> dict[str, int]:
        return {self.size_name(v): s for v, s in enumerate(self.sizes) if self.symbolic[v]}


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 4))
    rank = draw(st.integers(1, 3))
    subscripts = tuple(
        (tuple(draw(st.integers(-2, 3)) for _ in range(n)), draw(st.integers(0, 3)))
        for _ in range(rank)
    )
    x_order = tuple(draw(st.permutations(range(n))))
    y_vars = tuple(v for v in range(n) if draw(st.booleans()))
    op = draw(st.sampled_from(OPS))
    sizes = tuple(draw(st.integers(1, 4)) for _ in range(n))
    # at most one size is a parameter, and none for 4 variables with 3 subscripts:
    # isl's parametric bounds of such random maps can take minutes (or fail inside
    # isl); the literal sizes still vary from case to case
    symbolic = draw(st.sampled_from([None, *range(n)])) if n * rank <= 8 else None
    return Case(
        VARS[:n], subscripts, x_order, y_vars, op, sizes, tuple(v == symbolic for v in range(n))
    )


@st.composite
def unit_cases(draw: st.DrawFn) -> Case:
    """Cases whose every subscript has a variable of its own with coefficient +-1 and
    at most one other variable, in no other subscript (`2 * i + k`, `j - 3 * l`): the
    gather pass solves each subscript for that variable (`poly.invert.unit_inner`),
    with no divisibility."""
    case = draw(cases())
    n = len(case.variables)
    rank = min(len(case.subscripts), n)
    pivots = draw(st.permutations(range(n)))[:rank]
    others = [v for v in range(n) if v not in pivots]  # each in one subscript at most
    subscripts = []
    for j in range(rank):
        coefs = [0] * n
        coefs[pivots[j]] = draw(st.sampled_from([1, -1]))
        if others and draw(st.booleans()):
            v = draw(st.sampled_from(others))
            others.remove(v)
            coefs[v] = draw(st.sampled_from([-2, 2, 3]))
        subscripts.append((tuple(coefs), case.subscripts[j][1]))
    return Case(
        case.variables, tuple(subscripts), case.x_order, case.y_vars, case.op, case.sizes,
        case.symbolic,
    )  # fmt: skip


# ------------------------------------------------------------ the oracle


def _inputs(case: Case, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {"X": rng.standard_normal(tuple(case.sizes[v] for v in case.x_order))}
    if case.y_vars:
        arrays["Y"] = rng.standard_normal(tuple(case.sizes[v] for v in case.y_vars))
    return arrays


def _element(case: Case, point: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for coefs, offset in case.subscripts:
        value = sum(c * p for c, p in zip(coefs, point, strict=True)) + offset
        value += sum(-c * (case.sizes[v] - 1) for v, c in enumerate(coefs) if c < 0)
        out.append(value)
    return tuple(out)


def _brute_force(case: Case, inputs: dict[str, np.ndarray], start: np.ndarray) -> np.ndarray:
    """The scatter with Python loops: `op!` starts from the identity everywhere."""
    out = start.copy()
    if case.op == "+=!":
        out[...] = 0.0
    for point in itertools.product(*(range(s) for s in case.sizes)):
        value = inputs["X"][tuple(point[v] for v in case.x_order)]
        if case.y_vars:
            value *= inputs["Y"][tuple(point[v] for v in case.y_vars)]
        element = _element(case, point)
        out[element] = max(out[element], value) if case.op == "max=" else out[element] + value
    return out


def _shape(case: Case) -> tuple[int, ...]:
    points = itertools.product(*(range(s) for s in case.sizes))
    elements = [_element(case, p) for p in points]
    return tuple(max(e[d] for e in elements) + 1 for d in range(len(case.subscripts)))


# ------------------------------------------------------------ enumerating a gather


def _points(stmt_where: tuple, sizes: dict[str, int]) -> Iterator[dict[str, int]]:
    """Every point of a statement's domain: each variable's first `v in lo:hi` clause
    in order (each bound uses earlier variables only), filtered by the other range
    constraints."""
    ranges = [c for c in stmt_where if isinstance(c, RangeConstraint)]
    loops: list[RangeConstraint] = []
    for c in ranges:  # a variable's first range is its loop, as in compiler.interp
        if isinstance(c.expr, Var) and all(c.expr != loop.expr for loop in loops):
            loops.append(c)
    guards = [c for c in ranges if all(c is not loop for loop in loops)]

    def go(k: int, env: dict[str, int]) -> Iterator[dict[str, int]]:
        if k == len(loops):
            if all(
                eval_bound_expr(g.lo, sizes, env)
                <= eval_bound_expr(g.expr, sizes, env)
                < eval_bound_expr(g.hi, sizes, env)
                for g in guards
            ):
                yield dict(env)
            return
        c = loops[k]
        lo, hi = eval_bound_expr(c.lo, sizes, env), eval_bound_expr(c.hi, sizes, env)
        for value in range(lo, hi):
            yield from go(k + 1, {**env, c.expr.name: value})

    return go(0, {})


def _check_one_writer(case: Case, gather: RangedDef) -> None:
    sizes = case.size_values
    total = int(np.prod(case.sizes))
    visited = 0
    for facts in gather.checked.stmts:
        stmt = facts.stmt
        lhs = [a.name for a in stmt.lhs.args if isinstance(a, Var)]
        assert len(lhs) == len(stmt.lhs.args) and len(set(lhs)) == len(lhs)
        writer: dict[tuple[int, ...], tuple[int, ...]] = {}
        count = 0
        for env in _points(stmt.where, sizes):
            outer = tuple(env[v] for v in facts.index_vars)
            element = tuple(env[v] for v in lhs)
            assert writer.setdefault(element, outer) == outer, (element, outer)
            count += 1
        if stmt.op.value != "=":
            visited += count
    assert visited == total  # every scatter iteration once, in the accumulating pieces


# ------------------------------------------------------------ the property

STATS = {"real": 0, "rejected": 0, "budget": 0}


def _ranged_or_none(case: Case) -> RangedDef | None:
    try:
        scatter = run(case.source, upto="ranges")
    except TCError:
        return None
    assert output_shapes(scatter, case.size_values)["O"] == _shape(case), case.source
    return scatter


def _check_case(case: Case, seed: int) -> RangedDef:
    """The gather of `case` equals the brute-force scatter, one writer per element;
    returns the gather."""
    scatter = _ranged_or_none(case)
    assume(scatter is not None)
    assert scatter is not None
    gather = scatter_to_gather(scatter)
    assert remaining_scatters(gather) == ()
    inputs = _inputs(case, seed)
    start = np.random.default_rng(seed + 1).standard_normal(_shape(case))
    expected = _brute_force(case, inputs, start)
    actual = evaluate(gather, inputs, case.size_values, outputs={"O": start})["O"]
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12, err_msg=case.source)
    _check_one_writer(case, gather)
    return gather


@given(unit_cases(), st.integers(0, 2**16))
def test_unit_coefficient_inversion(case: Case, seed: int) -> None:
    # a strided or dilated window (`2 * i + k`): exact, and no divisibility guard
    gather = _check_case(case, seed)
    assert "%" not in print_def(gather.checked.definition), case.source


@given(cases(), st.integers(0, 2**16))
def _inversion_property(case: Case, seed: int) -> None:
    scatter = _ranged_or_none(case)
    if scatter is None:
        STATS["rejected"] += 1
        event("rejected by check or range inference")
        assume(False)
    STATS["real"] += 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GatherBudgetWarning)
        gather = scatter_to_gather(scatter)
    if any(issubclass(w.category, GatherBudgetWarning) for w in caught):
        # isl's budget ran out (4 variables, 3 subscripts): the scatter stays, which
        # must still compute the scatter
        STATS["budget"] += 1
        event("over the gather budget: stays a scatter")
        assert remaining_scatters(gather) == (0,)
    else:
        assert remaining_scatters(gather) == ()
    inputs = _inputs(case, seed)
    start = np.random.default_rng(seed + 1).standard_normal(_shape(case))
    expected = _brute_force(case, inputs, start)
    actual = evaluate(gather, inputs, case.size_values, outputs={"O": start})["O"]
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12, err_msg=case.source)
    if not remaining_scatters(gather):
        _check_one_writer(case, gather)
    event(f"gather statements: {len(gather.checked.stmts)}")


def test_index_inversion() -> None:
    STATS.update(real=0, rejected=0, budget=0)
    _inversion_property()
    ran = STATS["real"] + STATS["rejected"]
    print(
        f"\nindex inversion: {STATS['real']} real cases, {STATS['rejected']} rejected, "
        f"{STATS['budget']} over the gather budget"
    )
    assert STATS["real"] >= 0.8 * ran, STATS
    assert STATS["budget"] <= 0.05 * STATS["real"], STATS
