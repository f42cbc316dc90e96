"""Compilation options: one frozen dataclass, validated when it is made.

    Options()                 all defaults: threads=None (all cores)
    Options(threads=2)        split the outermost parallel loop across 2 threads

A leaf module (imports only the diagnostics), so every layer may read it. Options
travel as a value; environment variables are read only by the CLI (STYLE.md rule 16).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.frontend.diagnostics import OptionsError


@dataclass(frozen=True, slots=True)
class Options:
    """How to compile and run a def on a native target.

    `threads`: the number of threads the outermost parallel loop of each statement is
    split across at call time; None means one per core.
    """

    threads: int | None = None

    def __post_init__(self) -> None:
        t = self.threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise OptionsError(
                f"Options.threads must be a positive int or None, got {t!r}",
                hint="Options(threads=None) uses every core",
            )


def as_options(value: object) -> Options:
    """`value` as Options: None gives the defaults; anything else is an OptionsError."""
    if value is None:
        return Options()
    if isinstance(value, Options):
        return value
    raise OptionsError(
        f"options= must be a compiler.options.Options, got {type(value).__name__}",
        hint="pass options=Options(threads=2)",
    )


__all__ = ["Options", "as_options"]
