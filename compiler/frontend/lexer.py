"""The TC lexer: source text -> tokens.

Tokens follow Tensor Comprehensions' `tc/lang/lexer.h`: identifiers (ASCII letters,
digits, `_`, not starting with a digit), keywords (`def where in exists min max`, the
type names of `ast.TYPE_NAMES`), numbers, and operators matched longest first, so
`+=!` is one token, `<=>` is one token and `min=!` is one token (`min` followed by
`=!`; `min (` is the keyword `min` followed by `(`). `#` starts a comment that runs to
the end of the line.

Numbers are what C's `strtod` reads, in decimal: `1`, `1.`, `.5`, `1.5`, `1e-5`,
`3E-5`, `1.5e+3`. A literal with a `.` or an exponent is a FLOAT, otherwise an INT.
As in TC, `0..2` lexes as `0.` then `.2` (the parser then explains that ranges are
written `lo:hi`). An exponent letter not followed by digits is not part of the number
(`2e` is `2` then the identifier `e`).

Example::

    tokenize(Source("<s>", "O(i) +=! A(i)"))
    -> IDENT 'O', LPAREN, IDENT 'i', RPAREN, PLUS_EQ_B '+=!', IDENT 'A', ..., EOF
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from compiler.diagnostics import ParseError
from compiler.frontend.ast import TYPE_NAMES
from compiler.frontend.source import Source, Span


class TokenKind(enum.Enum):
    """Token kinds. The value is how a diagnostic names the kind."""

    EOF = "end of input"
    IDENT = "identifier"
    INT = "integer"
    FLOAT = "number"
    TYPE = "type name"
    # keywords
    DEF = "'def'"
    WHERE = "'where'"
    IN = "'in'"
    EXISTS = "'exists'"
    MIN = "'min'"
    MAX = "'max'"
    # statement operators
    ASSIGN = "'='"
    PLUS_EQ = "'+='"
    TIMES_EQ = "'*='"
    MIN_EQ = "'min='"
    MAX_EQ = "'max='"
    PLUS_EQ_B = "'+=!'"
    TIMES_EQ_B = "'*=!'"
    MIN_EQ_B = "'min=!'"
    MAX_EQ_B = "'max=!'"
    EQUIVALENT = "'<=>'"
    ARROW = "'->'"
    # expression operators
    EQ = "'=='"
    NE = "'!='"
    LE = "'<='"
    GE = "'>='"
    LT = "'<'"
    GT = "'>'"
    AND = "'&&'"
    OR = "'||'"
    NOT = "'!'"
    QUESTION = "'?'"
    COLON = "':'"
    PLUS = "'+'"
    MINUS = "'-'"
    STAR = "'*'"
    SLASH = "'/'"
    PERCENT = "'%'"
    # punctuation
    LPAREN = "'('"
    RPAREN = "')'"
    LBRACE = "'{'"
    RBRACE = "'}'"
    COMMA = "','"


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    span: Span

    def describe(self) -> str:
        """How a diagnostic names this token: `identifier 'foo'`, `'+='`, `end of input`."""
        if self.kind in (TokenKind.IDENT, TokenKind.INT, TokenKind.FLOAT, TokenKind.TYPE):
            return f"{self.kind.value} '{self.text}'"
        return self.kind.value


KEYWORDS: dict[str, TokenKind] = {
    "def": TokenKind.DEF,
    "where": TokenKind.WHERE,
    "in": TokenKind.IN,
    "exists": TokenKind.EXISTS,
    "min": TokenKind.MIN,
    "max": TokenKind.MAX,
} | {name: TokenKind.TYPE for name in TYPE_NAMES}

# Operators, longest spelling first so that the first match is the longest one.
_OPERATORS: tuple[tuple[str, TokenKind], ...] = tuple(
    sorted(
        {
            "<=>": TokenKind.EQUIVALENT,
            "+=!": TokenKind.PLUS_EQ_B,
            "*=!": TokenKind.TIMES_EQ_B,
            "+=": TokenKind.PLUS_EQ,
            "*=": TokenKind.TIMES_EQ,
            "->": TokenKind.ARROW,
            "==": TokenKind.EQ,
            "!=": TokenKind.NE,
            "<=": TokenKind.LE,
            ">=": TokenKind.GE,
            "&&": TokenKind.AND,
            "||": TokenKind.OR,
            "=": TokenKind.ASSIGN,
            "<": TokenKind.LT,
            ">": TokenKind.GT,
            "!": TokenKind.NOT,
            "?": TokenKind.QUESTION,
            ":": TokenKind.COLON,
            "+": TokenKind.PLUS,
            "-": TokenKind.MINUS,
            "*": TokenKind.STAR,
            "/": TokenKind.SLASH,
            "%": TokenKind.PERCENT,
            "(": TokenKind.LPAREN,
            ")": TokenKind.RPAREN,
            "{": TokenKind.LBRACE,
            "}": TokenKind.RBRACE,
            ",": TokenKind.COMMA,
        }.items(),
        key=lambda item: -len(item[0]),
    )
)

# `min`/`max` glued to `=` or `=!` form a statement operator (TC's TK_MIN_EQ ...).
_MINMAX_ASSIGN: dict[tuple[TokenKind, str], TokenKind] = {
    (TokenKind.MIN, "=!"): TokenKind.MIN_EQ_B,
    (TokenKind.MAX, "=!"): TokenKind.MAX_EQ_B,
    (TokenKind.MIN, "="): TokenKind.MIN_EQ,
    (TokenKind.MAX, "="): TokenKind.MAX_EQ,
}

_WHITESPACE = " \t\n\r\v\f"
_DIGITS = "0123456789"
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | frozenset(_DIGITS)

_CHAR_HINTS: dict[str, str] = {
    "[": "TC indexes tensors with parentheses, e.g. `A(i, j)`",
    "]": "TC indexes tensors with parentheses, e.g. `A(i, j)`",
    ";": "TC statements need no ';': write one statement after another",
    ".": "a number needs a digit next to its '.', e.g. `0.5`; ranges are written lo:hi",
    "&": "logical and is written `&&`",
    "|": "logical or is written `||`",
}


def tokenize(source: Source) -> list[Token]:
    """All tokens of `source`, ending with one EOF token. Raises ParseError at the
    first character that starts no token."""
    text = source.text
    tokens: list[Token] = []
    pos = _skip_blank(text, 0)
    while pos < len(text):
        kind, end = _match(text, pos)
        if kind is None:
            ch = text[pos]
            raise ParseError(
                f"unexpected character {ch!r}",
                Span(source, pos, pos + 1),
                hint=_CHAR_HINTS.get(ch),
            )
        tokens.append(Token(kind, text[pos:end], Span(source, pos, end)))
        pos = _skip_blank(text, end)
    tokens.append(Token(TokenKind.EOF, "", Span(source, len(text), len(text))))
    return tokens


def _skip_blank(text: str, pos: int) -> int:
    """The position of the next character that is neither whitespace nor comment."""
    while pos < len(text):
        if text[pos] in _WHITESPACE:
            pos += 1
        elif text[pos] == "#":
            newline = text.find("\n", pos)
            pos = len(text) if newline < 0 else newline + 1
        else:
            break
    return pos


def _match(text: str, pos: int) -> tuple[TokenKind | None, int]:
    """The kind and end of the token starting at `pos` (kind None: no token)."""
    end = _number_end(text, pos)
    if end > pos:
        is_float = any(ch in ".eE" for ch in text[pos:end])
        return (TokenKind.FLOAT if is_float else TokenKind.INT), end
    if text[pos] in _IDENT_START:
        end = pos + 1
        while end < len(text) and text[end] in _IDENT_CHARS:
            end += 1
        kind = KEYWORDS.get(text[pos:end], TokenKind.IDENT)
        for (word, suffix), op in _MINMAX_ASSIGN.items():
            if kind is word and text.startswith(suffix, end):
                return op, end + len(suffix)
        return kind, end
    for spelling, kind in _OPERATORS:
        if text.startswith(spelling, pos):
            return kind, pos + len(spelling)
    return None, pos


def _number_end(text: str, pos: int) -> int:
    """The end of the decimal number starting at `pos` (== pos if there is none)."""
    end = _digits_end(text, pos)
    mantissa_digits = end - pos
    if end < len(text) and text[end] == ".":
        frac_end = _digits_end(text, end + 1)
        mantissa_digits += frac_end - end - 1
        if mantissa_digits == 0:
            return pos  # a lone '.'
        end = frac_end
    if mantissa_digits == 0:
        return pos
    if end < len(text) and text[end] in "eE":
        exp = end + 1
        if exp < len(text) and text[exp] in "+-":
            exp += 1
        exp_end = _digits_end(text, exp)
        if exp_end > exp:
            end = exp_end
    return end


def _digits_end(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _DIGITS:
        pos += 1
    return pos
