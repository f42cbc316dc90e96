"""Fuzzing the front end: no input may end in anything but a Module or a TCError.

Inputs are random token sequences, random text, and random mutations (deletions,
insertions, swaps, replacements of tokens or characters) of valid programs. A parsed
module must have spans inside the text and must dump; when `compiler.frontend.check`
is importable, `check_module` must likewise return or raise a TCError.

Run many cases with `pytest tests/frontend/test_fuzz.py --hypothesis-profile=thorough`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compiler.diagnostics import ParseError, TCError
from compiler.frontend import ast
from compiler.frontend.astdump import dump
from compiler.frontend.lexer import KEYWORDS, tokenize
from compiler.frontend.parser import parse
from compiler.frontend.source import Source

VALID_PROGRAMS = (
    "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n",
    "def conv(float(N, C, H) I, float(M, C, KH) W) -> (O) {\n"
    "  O(n, m, h) +=! I(n, c, h + kh) * W(m, c, kh)\n"
    "  O(n, m, h) = O(n, m, h) > 0 ? O(n, m, h) : 0.0\n}\n",
    "def g(float(N, C, H) I, float(M, C, KH) W, float(N, M, HO) O_grad) -> (I_grad) {\n"
    "  I_grad(n, c, h + kh) +=! O_grad(n, m, h) * W(m, c, kh) where h - kh in 0:HO, kh in 0:KH\n"
    "}\n",
    "def s(float(N, M) X, int32 k) -> (mx, O, float(N) S) {\n"
    "  mx(n) max=! X(n, m)\n"
    "  O(n, m) = exp(X(n, m) - mx(n)) <=> softmax(X(n, m))\n"
    "  S(n) +=! float(int32(O(n, m)) % k) where m in 0:M, t = mx(n), exists X(n, 0)\n"
    "  O(n, m) min= -S(n) / 2.5e-1 && !(m != 1) || min(O(n, m), fmax(1., .5))\n"
    "}\n",
    "def scalar(float a) -> (b) { b = a * a }\ndef empty() -> () {}\n",
)

SPELLINGS = sorted(KEYWORDS) + [
    "=", "+=", "*=", "min=", "max=", "+=!", "*=!", "min=!", "max=!", "<=>", "->",
    "==", "!=", "<=", ">=", "<", ">", "&&", "||", "!", "?", ":", "+", "-", "*", "/", "%",
    "(", ")", "{", "}", ",", "A", "O", "i", "j", "N", "exp", "fmax", "tanh",
    "0", "1", "2.5", ".5", "1e-3", "99999999999999999999", "1e999", "#", "\n",
]  # fmt: skip

CHARS = st.sampled_from(list("()(){},:+-*/%<>=!?&|.#_ \n\t0123456789eEaiNOAdfwxm@[;"))


def _load_check() -> Callable[[ast.Module], Any] | None:
    try:
        from compiler.frontend.check import check_module
    except ImportError:
        return None
    return check_module


CHECK_MODULE = _load_check()


def _spans_inside(node: object, length: int) -> int:
    """Assert every node's span lies inside the text; return the number of nodes."""
    count = 0
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
            continue
        if not dataclasses.is_dataclass(item) or not hasattr(item, "span"):
            continue
        count += 1
        span = item.span
        assert span.source is not None, f"{type(item).__name__} has no span"
        assert 0 <= span.start <= span.end <= length, (type(item).__name__, span)
        stack.extend(getattr(item, f.name) for f in dataclasses.fields(item) if f.name != "span")
    return count


def parses_or_reports(text: str) -> ast.Module | None:
    """Parse (and check) `text`: a Module, or None after a TCError; anything else fails."""
    try:
        module = parse(text, "fuzz.tc")
    except TCError as error:
        assert error.span.source is not None, "a parse error without a position"
        assert error.render()
        return None
    assert isinstance(module, ast.Module)
    assert _spans_inside(module, len(text)) >= 1
    assert dump(module)
    if CHECK_MODULE is not None:
        try:
            CHECK_MODULE(module)
        except TCError as error:
            assert error.render()
    return module


def _tokens_of(text: str) -> list[str]:
    return [t.text for t in tokenize(Source("p", text))[:-1]]


@st.composite
def mutated_programs(draw: st.DrawFn) -> str:
    """A valid program with 1-4 token-level edits, rejoined with spaces."""
    words = _tokens_of(draw(st.sampled_from(VALID_PROGRAMS)))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(words)))
        action = draw(st.sampled_from(["delete", "insert", "swap", "replace"]))
        if action == "insert" or not words:
            words.insert(where, draw(st.sampled_from(SPELLINGS)))
            continue
        where = min(where, len(words) - 1)
        if action == "delete":
            del words[where]
        elif action == "replace":
            words[where] = draw(st.sampled_from(SPELLINGS))
        else:
            other = draw(st.integers(0, len(words) - 1))
            words[where], words[other] = words[other], words[where]
    return " ".join(words)


@st.composite
def char_mutated_programs(draw: st.DrawFn) -> str:
    """A valid program with 1-4 character-level edits."""
    text = list(draw(st.sampled_from(VALID_PROGRAMS)))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(text) - 1))
        action = draw(st.sampled_from(["delete", "insert", "swap"]))
        if action == "delete":
            del text[where]
        elif action == "insert":
            text.insert(where, draw(CHARS))
        else:
            other = draw(st.integers(0, len(text) - 1))
            text[where], text[other] = text[other], text[where]
    return "".join(text)


def test_valid_programs_parse() -> None:
    for text in VALID_PROGRAMS:
        module = parses_or_reports(text)
        assert module is not None and module.defs


@given(st.lists(st.sampled_from(SPELLINGS), max_size=60))
def test_random_token_sequences(words: list[str]) -> None:
    parses_or_reports(" ".join(words))


@given(st.lists(st.sampled_from(SPELLINGS), max_size=40))
def test_random_statement_bodies(words: list[str]) -> None:
    body = " ".join(words)
    parses_or_reports(f"def f(float(N) A, int32 k) -> (O) {{ O(i) = {body} }}")
    parses_or_reports(f"def f(float(N) A, int32 k) -> (O) {{ {body} }}")


@given(mutated_programs())
def test_token_mutations(text: str) -> None:
    parses_or_reports(text)


@given(char_mutated_programs())
def test_character_mutations(text: str) -> None:
    parses_or_reports(text)


@given(st.text(max_size=80))
def test_arbitrary_text(text: str) -> None:
    parses_or_reports(text)


@given(st.one_of(char_mutated_programs(), st.text(alphabet=CHARS, max_size=60)))
def test_relexing_spaced_tokens_is_stable(text: str) -> None:
    """Tokens joined by spaces lex to the same tokens: no token depends on its
    neighbours, so the printer may space tokens freely."""
    try:
        words = _tokens_of(text)
    except ParseError:
        return
    assert _tokens_of(" ".join(words)) == words
