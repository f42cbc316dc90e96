"""[ext] Range inference under the def's where clause (`poly.stated`), and the
run-time preconditions that the passes after it keep (issues 48 and 51).

The stated conditions are the isl context of the sizes: a read in bounds under them
gives no warning and no run-time precondition, bounds simplify under them, conditions
that hold for no sizes are an error, and the conditions themselves are the first
preconditions every call checks. A warning about an unprovable read suggests the clause.
"""

from __future__ import annotations

import pytest

from compiler import pipeline
from compiler.autodiff.clamps import split_clamps
from compiler.cpu.pad import pad_gathers
from compiler.diagnostics import RangeError
from compiler.frontend.checked import Bound
from compiler.frontend.parser import parse_expr

GRU_BODY = (
    "    O(n, j) = r * tanh(gates(n, 3 * H + j)) + (1 - r) * h(n, j) where j in 0:H,\n"
    "        r = 1 / (1 + exp(-gates(n, j)))\n"
    "}\n"
)
SIGNATURE = "def gru(float(N, G) gates, float(N, H) h) -> (O)"
FREE_J = "    O(n, j) = gates(n, 3 * H + j) + h(n, j)\n}\n"


def _ranged(src: str):  # type: ignore[no-untyped-def]
    return pipeline.run(src, upto="ranges")


def test_a_stated_relation_silences_the_warnings_and_is_the_only_check() -> None:
    plain = _ranged(f"{SIGNATURE} {{\n{GRU_BODY}")
    assert len(plain.warnings) == 2 and len(plain.preconditions) == 2
    stated = _ranged(f"{SIGNATURE} where G >= 4 * H {{\n{GRU_BODY}")
    assert stated.warnings == ()
    (pre,) = stated.preconditions
    assert pre.access is None and pre.cond == parse_expr("G >= 4 * H")


def test_the_warning_suggests_the_clause() -> None:
    low, high = _ranged(f"{SIGNATURE} {{\n{GRU_BODY}").warnings
    assert low.hint == (
        "state it as `where G >= H` after the output list to check it once per call and "
        "silence this"
    )
    assert high.hint is not None and "`where G >= 4 * H` after the output list" in high.hint


def test_an_extent_simplifies_under_the_clause() -> None:
    def j_bound(src: str) -> Bound:
        return dict(_ranged(src).output_bounds)["O"][1]

    zero = parse_expr("0")
    assert j_bound(f"{SIGNATURE} {{\n{FREE_J}") == Bound(zero, parse_expr("min(G - 3 * H, H)"))
    assert j_bound(f"{SIGNATURE} where G >= 4 * H {{\n{FREE_J}") == Bound(zero, parse_expr("H"))


def test_a_weaker_clause_leaves_the_rest_to_a_checked_read() -> None:
    ranged = _ranged(f"{SIGNATURE} where G >= 3 * H + 1 {{\n{GRU_BODY}")
    (warning,) = ranged.warnings  # `gates(n, j)` needs G >= H: implied
    assert "`gates(n, 3 * H + j)`" in warning.message and "`G >= 4 * H`" in warning.message
    stated, read = ranged.preconditions
    assert stated.access is None and read.access is not None
    assert read.access.name == "gates"


@pytest.mark.parametrize(
    ("clause", "message", "at"),
    [
        ("N < 1", "the def's where clause condition `N < 1` holds for no sizes", "N < 1"),
        ("G < G", "the def's where clause condition `G < G` holds for no sizes", "G < G"),
        (
            "G > H, H > G",
            "the def's where clause condition `H > G` contradicts the conditions before it",
            "H > G",
        ),
        (
            "G == 2 * N, G == 2 * N + 1",
            "the def's where clause condition `G == 2 * N + 1` contradicts the conditions",
            "G == 2 * N + 1",
        ),
    ],
)
def test_a_contradiction_is_an_error_at_the_condition(clause: str, message: str, at: str) -> None:
    with pytest.raises(RangeError) as info:
        _ranged(f"{SIGNATURE} where {clause} {{\n{GRU_BODY}")
    (diag,) = info.value.diagnostics
    assert diag.message.startswith(message) and diag.span.text == at


def test_a_range_empty_under_the_clause_is_an_error() -> None:
    src = "def f(float(N) A, float(M) B) -> (O) where M < N {\n    O(i) = A(i) where i in N:M\n}\n"
    with pytest.raises(RangeError, match="empty range"):
        _ranged(src)


# ------------------------------------------ preconditions kept by later passes (issue 51)

# B(x) for x in 0:N needs M >= N, which inference cannot prove
CLAMPED = (
    "def f(float(N) I, float(R) W, float(M) B) -> (O) {\n"
    "    O(x) +=! I(min(x + r, N - 1)) * W(r) * B(x) where x in 0:N\n}\n"
)
PADDED = (
    "def f(double(H) I, double(K) W1, double(M) B) -> (O, P) {\n"
    "    O(y) +=! I(y - k) * W1(k) where y in 0:H, k in max(0, y - H + 1):min(K, y + 1)\n"
    "    P(y) = B(y) where y in 0:H\n}\n"
)


def test_splitting_clamps_keeps_the_preconditions() -> None:
    ranged = _ranged(CLAMPED)
    assert len(ranged.preconditions) == 1
    split = split_clamps(ranged)
    assert split.ranged.checked is not ranged.checked  # the statement was split
    assert split.ranged.preconditions == ranged.preconditions


def test_padding_keeps_the_preconditions() -> None:
    ranged = _ranged(PADDED)
    assert len(ranged.preconditions) == 1
    padded = pad_gathers(ranged)
    assert padded.scratch == ("I_pad",)
    assert padded.ranged.preconditions == ranged.preconditions
