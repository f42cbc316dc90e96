"""Fuzzing the pipeline (issue 14): mutated TC programs through check, ranges, grad.

Valid programs (the repository's examples and the seeds below) are mutated at the
token level the way the issue's 23,000 inputs were: an index, size or constant
replaced (edge values: 0, -1, 2^31, 2^63 - 1), an operator swapped, a read wrapped
in a guarded ternary, a subscript clamped with `min`/`max`, a where clause added,
a token deleted or duplicated, a statement duplicated. Each mutant goes through
parse, check, range inference, both gradient forms and the tangent def; any exception that is not a
`TCError` (an `InternalError` included) is a failure, reported with the source.

The `ci` profile runs 30 mutants (about 15 s of CPU); `--hypothesis-profile=thorough`
runs 1500. `SEEDED_CASES` gives a fixed, hypothesis-free set that also runs in CI.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler.diagnostics import InternalError, TCError
from compiler.frontend.lexer import TokenKind, tokenize
from compiler.frontend.source import Source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEEDS = (
    "def f(float(N, H) D) -> (O) {\n    O(kh) +=! D(h, h - kh) * D(n, h)\n}\n",
    "def f(float(N) I) -> (B) {\n"
    "    B(x) = I(x) + (x + 1 < N ? I(x + 1) : I(N - 1)) where x in 0:N\n}\n",
    "def f(float(N) I) -> (B) {\n    B(x) = I(x + 1) where x in 0:N - 1\n"
    "    B(x) = B(x) * 2 where x in N - 1:N\n}\n",
    "def f(float(N, M) A, float(M) b) -> (O) {\n    O(n) +=! A(n, m) * b(m)\n"
    "    O(n) = tanh(O(n)) > 0 ? O(n) : 0.0\n}\n",
    "def f(float(N, C, H) I, float(M, C, K) W) -> (O) {\n"
    "    O(n, m, h) +=! I(n, c, 2 * h + k) * W(m, c, k)\n}\n",
    "def f(float(N, M) X) -> (mx, S) {\n    mx(n) max=! X(n, m)\n"
    "    S(n) +=! exp(X(n, m) - mx(n))\n}\n",
    "def f(float(N) A, int32(M) idx) -> (O) {\n    O(i) = A(idx(i))\n}\n",
    "def f(float(N, M) A, float(N) B) -> (O, P) {\n    O(n) = B(n)\n    O(n) *= A(n, m)\n"
    "    P(n) *=! A(n, m) * O(n) where m in 0:M\n}\n",
)
# strided_conv's gradient alone takes seconds (strided gather bounds): not in CI's budget
SOURCES = (
    tuple(
        "\n".join(line for line in p.read_text().splitlines() if not line.startswith("#"))
        for p in sorted(EXAMPLES.glob("*.tc"))
        if p.stem != "strided_conv"
    )
    + SEEDS
)
EDGE_INTS = ("0", "1", "-1", "2", "7", "2147483647", "2147483648", "9223372036854775807")
OPERATORS = ("+", "-", "*", "/", "%", "<", "==", "&&")
REDUCTIONS = ("=", "+=", "+=!", "*=!", "max=!", "min=!", "max=", "+=")
# Edits by kind (see `mutate`), weighted towards ones that keep the text parseable.
_KINDS = (0, 0, 1, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8, 9, 9)


def mutate(source: str, rng: random.Random, steps: int) -> str:
    """`source` after `steps` random token-level edits (deterministic in `rng`)."""
    text = source
    for _ in range(steps):
        try:
            tokens = [t for t in tokenize(Source("<fuzz>", text)) if t.kind is not TokenKind.EOF]
        except TCError:
            return text
        if not tokens:
            return text
        k = rng.randrange(len(tokens))
        tok = tokens[k]
        start, end = tok.span.start, tok.span.end
        names = sorted({t.text for t in tokens if t.kind is TokenKind.IDENT}) or ["i"]
        kind = rng.choice(_KINDS)
        if kind == 0 and tok.kind is TokenKind.IDENT:
            new = rng.choice(names)
        elif kind == 1:
            new = rng.choice(EDGE_INTS)
        elif kind == 2 and tok.text in OPERATORS:
            new = rng.choice(OPERATORS)
        elif kind == 3 and tok.text in REDUCTIONS:
            new = rng.choice(REDUCTIONS)
        elif kind == 4 and tok.kind is TokenKind.IDENT:
            v = rng.choice(names)
            new = f"({v} > 0 ? {tok.text} : 0)"
        elif kind == 5 and tok.kind is TokenKind.IDENT:
            new = f"{rng.choice(('min', 'max'))}({tok.text} + 1, {rng.choice(names)} - 1)"
        elif kind == 6:
            new = ""
        elif kind == 7:
            new = tok.text + " " + tok.text
        elif kind == 8:
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", start)
            line = text[line_start : line_end if line_end >= 0 else len(text)]
            if "=" in line and "def " not in line:
                text = text[:line_start] + line + "\n" + text[line_start:]
            continue
        else:
            v, lo = rng.choice(names), rng.choice(EDGE_INTS[:5])
            line_end = text.find("\n", start)
            if line_end < 0 or "def " in text[text.rfind("\n", 0, start) + 1 : line_end]:
                continue
            joiner = ", " if " where " in text[start:line_end] else " where "
            text = f"{text[:line_end]}{joiner}{v} in {lo}:{rng.choice(names)}{text[line_end:]}"
            continue
        text = text[:start] + new + text[end:]
    return text


def run_pipeline(source: str) -> str:
    """What the mutant became: 'ok', or the TCError's class; anything else raises."""
    try:
        compiler.define(source, target="interp")
        for form in ("scatter", "gather"):
            compiler.grad(source, form=form)
        compiler.jvp(source)
    except InternalError:
        raise
    except TCError as e:
        return type(e).__name__
    except RecursionError:
        raise
    return "ok"


def _check(seed: int, steps: int) -> str:
    rng = random.Random(seed)
    source = mutate(rng.choice(SOURCES), rng, steps)
    try:
        return run_pipeline(source)
    except Exception as e:  # noqa: BLE001 - every other exception is the finding
        raise AssertionError(f"{type(e).__name__}: {e}\n--- source ---\n{source}") from e


# ci (100 examples by default): 30 mutants; thorough (5000): 1500
@settings(max_examples=max(1, settings.default.max_examples * 3 // 10))
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 4))
def test_mutants_end_in_a_result_or_a_tc_error(seed: int, steps: int) -> None:
    _check(seed, steps)


SEEDED_CASES = 20


@pytest.mark.parametrize("block", range(4))
def test_seeded_mutants(block: int) -> None:
    outcomes = [_check(1000 * block + n, 1 + n % 3) for n in range(SEEDED_CASES // 4)]
    assert len(outcomes) == SEEDED_CASES // 4  # each an outcome, none an exception
