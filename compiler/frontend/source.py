"""Source text and spans: where every AST node came from.

A `Span` points into a `Source` by character offsets; line and column are derived
on demand (1-based), so spans stay cheap and diagnostics can underline the exact text.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """One named piece of TC text (a file, a string given to `define`, ...)."""

    name: str
    text: str
    _line_starts: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                starts.append(i + 1)
        object.__setattr__(self, "_line_starts", tuple(starts))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open character range [start, end) in `source`."""

    source: Source | None
    start: int
    end: int

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0] if self.source else 0

    @property
    def col(self) -> int:
        return self.source.line_col(self.start)[1] if self.source else 0

    @property
    def filename(self) -> str:
        return self.source.name if self.source else "<unknown>"

    def to(self, other: Span) -> Span:
        """The span covering both `self` and `other` (same source)."""
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))

    @property
    def text(self) -> str:
        return self.source.text[self.start : self.end] if self.source else ""


NO_SPAN = Span(None, 0, 0)
