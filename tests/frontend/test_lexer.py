"""Lexer tests: golden token dumps, numeric literals, operators, error positions."""

from __future__ import annotations

import pytest

from compiler.diagnostics import ParseError
from compiler.frontend.astdump import dump_tokens
from compiler.frontend.lexer import Token, TokenKind, tokenize
from compiler.frontend.source import Source

K = TokenKind


def lex(text: str) -> list[Token]:
    return tokenize(Source("<test>", text))


def kinds_and_texts(text: str) -> list[tuple[TokenKind, str]]:
    """Every token but the final EOF, as (kind, text)."""
    tokens = lex(text)
    assert tokens[-1].kind is K.EOF
    return [(t.kind, t.text) for t in tokens[:-1]]


GOLDEN_PROGRAMS = {
    "matmul": """\
# C = A * B
def matmul(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
""",
    "operators": """\
def ops(float(N) A, int32 k) -> (O, int32(N) I) {
    O(i) max=! A(i) <=> amax(A(i)) where i in 0:N
    O(i) min= -A(i) * 2.5e-1 % 3
    I(i) *=! (A(i) >= .5 && !(k != 1) || A(i) <= 1.) ? int32(A(i)) : k
    I(i) += i == 0 ? 1 : 0 where exists A(i), x = i - 1
}
""",
    "tricky_numbers": "0..2 1.e5 3E-5 1.5e+3 2e 7e+ 12abc .5.5",
}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_golden_tokens(name: str, golden) -> None:
    golden.check(f"frontend/tokens/{name}.txt", dump_tokens(lex(GOLDEN_PROGRAMS[name])))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", [(K.INT, "1")]),
        ("007", [(K.INT, "007")]),
        ("1.", [(K.FLOAT, "1.")]),
        (".5", [(K.FLOAT, ".5")]),
        ("1.5", [(K.FLOAT, "1.5")]),
        ("1e-5", [(K.FLOAT, "1e-5")]),
        ("3E-5", [(K.FLOAT, "3E-5")]),
        ("1.5e+3", [(K.FLOAT, "1.5e+3")]),
        ("2e10", [(K.FLOAT, "2e10")]),
        ("1.e5", [(K.FLOAT, "1.e5")]),
        ("0..2", [(K.FLOAT, "0."), (K.FLOAT, ".2")]),
        ("2e", [(K.INT, "2"), (K.IDENT, "e")]),
        ("2e+", [(K.INT, "2"), (K.IDENT, "e"), (K.PLUS, "+")]),
        ("1-2", [(K.INT, "1"), (K.MINUS, "-"), (K.INT, "2")]),
        ("1+.5", [(K.INT, "1"), (K.PLUS, "+"), (K.FLOAT, ".5")]),
        ("3x", [(K.INT, "3"), (K.IDENT, "x")]),
    ],
)
def test_numeric_literals(text: str, expected: list[tuple[TokenKind, str]]) -> None:
    assert kinds_and_texts(text) == expected


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("=", K.ASSIGN),
        ("+=", K.PLUS_EQ),
        ("*=", K.TIMES_EQ),
        ("min=", K.MIN_EQ),
        ("max=", K.MAX_EQ),
        ("+=!", K.PLUS_EQ_B),
        ("*=!", K.TIMES_EQ_B),
        ("min=!", K.MIN_EQ_B),
        ("max=!", K.MAX_EQ_B),
        ("<=>", K.EQUIVALENT),
        ("->", K.ARROW),
        ("==", K.EQ),
        ("!=", K.NE),
        ("<=", K.LE),
        (">=", K.GE),
        ("<", K.LT),
        (">", K.GT),
        ("&&", K.AND),
        ("||", K.OR),
        ("!", K.NOT),
        ("?", K.QUESTION),
        (":", K.COLON),
        ("%", K.PERCENT),
        ("{", K.LBRACE),
        ("}", K.RBRACE),
        ("def", K.DEF),
        ("where", K.WHERE),
        ("in", K.IN),
        ("exists", K.EXISTS),
        ("min", K.MIN),
        ("max", K.MAX),
        ("float", K.TYPE),
        ("double", K.TYPE),
        ("half", K.TYPE),
        ("uint64", K.TYPE),
        ("bool", K.TYPE),
    ],
)
def test_single_tokens(text: str, kind: TokenKind) -> None:
    assert kinds_and_texts(text) == [(kind, text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # keywords are whole words: a longer identifier is an identifier
        ("maxval minimum define where_ in2 float32x", [K.IDENT] * 6),
        ("min (", [K.MIN, K.LPAREN]),
        ("min = 1", [K.MIN, K.ASSIGN, K.INT]),
        ("max=!x", [K.MAX_EQ_B, K.IDENT]),
        ("a<=>b", [K.IDENT, K.EQUIVALENT, K.IDENT]),
        ("a<=b", [K.IDENT, K.LE, K.IDENT]),
        ("a<-b", [K.IDENT, K.LT, K.MINUS, K.IDENT]),
        ("a->b", [K.IDENT, K.ARROW, K.IDENT]),
        ("!!a", [K.NOT, K.NOT, K.IDENT]),
        ("a!=!b", [K.IDENT, K.NE, K.NOT, K.IDENT]),
        ("x+=!y", [K.IDENT, K.PLUS_EQ_B, K.IDENT]),
        ("_a1 b_2", [K.IDENT, K.IDENT]),
    ],
)
def test_longest_match(text: str, expected: list[TokenKind]) -> None:
    assert [kind for kind, _ in kinds_and_texts(text)] == expected


def test_comments_and_whitespace_are_skipped() -> None:
    text = "# a comment\n  a # trailing # still comment\n\t\r\x0b\x0cb#end"
    tokens = lex(text)
    assert [(t.kind, t.text, t.span.line, t.span.col) for t in tokens] == [
        (K.IDENT, "a", 2, 3),
        (K.IDENT, "b", 3, 5),
        (K.EOF, "", 3, 10),
    ]


def test_spans_cover_token_text() -> None:
    text = "def f(float(N) A) -> (B) { B(i) +=! A(i) }"
    for token in lex(text)[:-1]:
        assert token.span.text == token.text
        assert text[token.span.start : token.span.end] == token.text


def test_empty_source_is_only_eof() -> None:
    tokens = lex("  # nothing\n")
    assert [t.kind for t in tokens] == [K.EOF]
    assert tokens[0].span.start == tokens[0].span.end == len("  # nothing\n")


@pytest.mark.parametrize(
    ("text", "char", "line", "col", "hint_part"),
    [
        ("a @ b", "@", 1, 3, None),
        ("def f(float(N) A) -> (B) {\n  B(i) = A[i]\n}", "[", 2, 11, "parentheses"),
        ("x = 1;", ";", 1, 6, "no ';'"),
        ("a . b", ".", 1, 3, "digit"),
        ("a & b", "&", 1, 3, "&&"),
        ("a | b", "|", 1, 3, "||"),
        ("\u00e9t\u00e9", "\u00e9", 1, 1, None),
        ("x = 'y'", "'", 1, 5, None),
    ],
)
def test_unexpected_character(
    text: str, char: str, line: int, col: int, hint_part: str | None
) -> None:
    with pytest.raises(ParseError) as info:
        lex(text)
    error = info.value
    assert error.message == f"unexpected character {char!r}"
    assert (error.span.line, error.span.col) == (line, col)
    assert error.span.text == char
    hint = error.diagnostics[0].hint
    if hint_part is None:
        assert hint is None
    else:
        assert hint is not None and hint_part in hint
