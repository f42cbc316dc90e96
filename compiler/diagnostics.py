"""Diagnostics: errors and warnings as objects, rendered only at the edge.

Every user error is a `TCError` carrying one or more `Diagnostic`s, each with a
`Span` into the stored source text. `render` produces

    conv.tc:3:22: error: cannot infer a range for index 'k'
        C(i, j) +=! A(i, k) * B(k, j)
                         ^
    hint: add a where clause, e.g. `where k in 0:K`

A compiler bug is an `InternalError`, which is *not* a `TCError`: the CLI exits 2
with a traceback for it, and 1 without one for user errors.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compiler.frontend.source import NO_SPAN, Span


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    severity: Severity
    message: str
    span: Span = NO_SPAN
    hint: str | None = None

    def render(self) -> str:
        return render(self)


def render(diag: Diagnostic) -> str:
    """`file:line:col: severity: message`, the source line, a caret/underline, a hint."""
    span = diag.span
    lines: list[str] = []
    if span.source is None:
        lines.append(f"{diag.severity.value}: {diag.message}")
    else:
        line, col = span.line, span.col
        lines.append(f"{span.filename}:{line}:{col}: {diag.severity.value}: {diag.message}")
        text = span.source.line_text(line)
        end_line, end_col = span.source.line_col(max(span.start, span.end - 1))
        width = (end_col - col + 1) if end_line == line and span.end > span.start else 1
        width = max(1, min(width, len(text) - col + 1 if len(text) >= col else 1))
        expanded = text.expandtabs(1)
        lines.append("    " + expanded)
        lines.append("    " + " " * (col - 1) + "^" + "~" * (width - 1))
    if diag.hint:
        lines.append(f"hint: {diag.hint}")
    return "\n".join(lines)


class TCError(Exception):
    """A user error: bad source text, shapes, dtypes, options or cache files."""

    def __init__(
        self,
        message: str | Sequence[Diagnostic],
        span: Span = NO_SPAN,
        hint: str | None = None,
    ) -> None:
        if isinstance(message, str):
            diags: tuple[Diagnostic, ...] = (Diagnostic(Severity.ERROR, message, span, hint),)
        else:
            diags = tuple(message)
            if not diags:
                raise ValueError("TCError needs at least one diagnostic")
        self.diagnostics = diags
        super().__init__(diags[0].message)

    @property
    def span(self) -> Span:
        return self.diagnostics[0].span

    @property
    def message(self) -> str:
        return self.diagnostics[0].message

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()


class ParseError(TCError):
    """Lexical or syntactic error."""


class SemanticError(TCError):
    """Names, types, reductions, builtins (frontend.check)."""


class RangeError(TCError):
    """Range inference failed (poly.ranges)."""


class ShapeError(TCError):
    """Call-time mismatch between arguments and a def's signature."""


class OptionsError(TCError):
    """Invalid options, flags or cache contents."""


class InternalError(Exception):
    """A compiler bug. Never raised for bad user input."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A 'did you mean' hint for a misspelled name, or None."""
    close = close_names(name, candidates, 1)
    return f"did you mean '{close[0]}'?" if close else None


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` candidates close to `name`, closest first: those within a small edit
    distance that counts a transposition as one edit (`tahn` -> `tanh` before `tan`),
    then difflib's similar-looking names."""
    names = sorted(set(candidates) - {name})
    limit = 0 if len(name) <= 2 else 1 if len(name) <= 5 else 2

    def key(c: str) -> tuple[int, bool, float, str]:
        ratio = difflib.SequenceMatcher(None, name, c).ratio()
        return (edit_distance(name, c), sorted(c) != sorted(name), -ratio, c)

    near = sorted((c for c in names if edit_distance(name, c) <= limit), key=key)
    similar = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    return list(dict.fromkeys(near + similar))[:n]


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and
    transpositions of adjacent characters each cost 1."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[len(b)]
