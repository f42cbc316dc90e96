"""`poly.floors.readable`: bound expressions as a person writes them, of the same value."""

from __future__ import annotations

from fractions import Fraction

import hypothesis.strategies as st
import islpy as isl
from hypothesis import given

from compiler.frontend.printer import print_expr
from compiler.poly.floors import Floor, Lin, _cost, readable
from compiler.poly.isl_bridge import StmtSpace, aff_to_expr, expr_to_aff, pwaff_to_expr

SIZES = ("H", "KH", "y")


def _printed(text: str, params: tuple[str, ...] = SIZES) -> str:
    """The TC text of isl's parameter-only expression `text`."""
    pw = isl.PwAff(f"[{', '.join(params)}] -> {{ [] -> [({text})] }}")
    return print_expr(pwaff_to_expr(pw, params, StmtSpace((), params).context))


def test_a_strided_output_extent_reads_as_written() -> None:
    # isl keeps floor's coefficients in 0:2: floor((H + KH) / 2) - KH + 1
    assert _printed("floor((H - KH) / 2) + 1") == "(H - KH) / 2 + 1"


def test_a_window_start_of_a_strided_gather_reads_as_written() -> None:
    assert _printed("y - floor((y + KH + 1) / 2) + 1") == "(y - KH) / 2 + 1"


def test_a_span_keeps_its_minus_signs_inside_the_floor() -> None:
    assert _printed("2 * floor((H - KH) / 2) + KH") == "KH + 2 * ((H - KH) / 2)"


def test_plain_forms_are_kept() -> None:
    assert _printed("floor((H + 1) / 2)") == "(H + 1) / 2"
    assert _printed("H - KH + 1") == "H - KH + 1"
    assert _printed("floor(H / 4) + KH") == "KH + H / 4"


_coeff = st.integers(-3, 3).map(Fraction)
_named = st.lists(st.tuples(st.sampled_from(SIZES), _coeff), max_size=3, unique_by=lambda t: t[0])


@st.composite
def _lins(draw: st.DrawFn) -> Lin:
    floors = []
    for _ in range(draw(st.integers(0, 2))):
        num = Lin(tuple(draw(_named)), (), Fraction(draw(st.integers(-7, 7))))
        floors.append(Floor(draw(_coeff), num, draw(st.integers(1, 5))))
    return Lin(tuple(draw(_named)), tuple(floors), Fraction(draw(st.integers(-7, 7))))


@given(_lins(), st.lists(st.integers(-20, 20), min_size=3, max_size=3))
def test_readable_keeps_the_value_at_every_integer_point(lin: Lin, values: list[int]) -> None:
    env = dict(zip(SIZES, values, strict=True))
    assert readable(lin).value(env) == lin.value(env)


@given(_lins())
def test_readable_never_costs_more(lin: Lin) -> None:
    assert _cost(readable(lin)) <= _cost(lin)


def test_a_bound_round_trips_through_isl_unchanged() -> None:
    space = StmtSpace((), SIZES)
    aff = isl.Aff(f"[{', '.join(SIZES)}] -> {{ [] -> [(floor((H + KH) / 2) - KH + 1)] }}")
    expr = aff_to_expr(aff, SIZES)
    back = expr_to_aff(expr, space)
    assert back.is_equal(isl.PwAff.from_aff(aff))
