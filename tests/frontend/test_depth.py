"""Deep nesting (issue 14): whatever the parser accepts, the printer prints.

The parser rejects trees deeper than `MAX_DEPTH` with a position; every tree up to
that depth prints and re-parses to itself (the printer used to overflow Python's
stack from about 110 nested calls or accesses).
"""

from __future__ import annotations

import pytest

import compiler
from compiler.diagnostics import ParseError
from compiler.frontend.parser import MAX_DEPTH, parse
from compiler.frontend.printer import print_module

NESTINGS = {
    "exp": lambda d: "exp(" * d + "A(i)" + ")" * d,
    "access": lambda d: "A(" * d + "i" + ")" * d,
    "cast": lambda d: "float(" * d + "A(i)" + ")" * d,
    "negation": lambda d: "-(" * d + "A(i)" + ")" * d,
    "parentheses": lambda d: "(" * d + "A(i)" + " + A(i))" * d,
    "ternary": lambda d: "i > 0 ? " * d + "A(i)" + " : A(i)" * d,
    "sum": lambda d: " + ".join(["A(i)"] * d),
}


def _source(kind: str, depth: int) -> str:
    dtype = "int32" if kind == "access" else "float"
    return f"def f({dtype}(N) A) -> (B) {{ B(i) = {NESTINGS[kind](depth)} }}\n"


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_the_deepest_accepted_tree_prints_and_round_trips(kind: str) -> None:
    per_level = {"negation": 2, "parentheses": 2}.get(kind, 1)  # parser levels per nesting
    depth = MAX_DEPTH // per_level - 2
    module = parse(_source(kind, depth))
    text = print_module(module)
    assert parse(text) == module


@pytest.mark.parametrize("kind", ["exp", "access"])
def test_the_deepest_accepted_tree_checks_and_infers(kind: str) -> None:
    ranged = compiler.define(_source(kind, MAX_DEPTH - 2), target="interp").ranged
    assert ranged.output_bounds[0][0] == "B"


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_deeper_is_a_parse_error_with_a_position(kind: str) -> None:
    src = _source(kind, MAX_DEPTH + 5)
    with pytest.raises(ParseError, match="nested too deeply") as err:
        parse(src)
    assert 0 < err.value.span.start < len(src)
