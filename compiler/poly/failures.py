"""isl failures as compiler bugs that name the statement.

    with isl_failures(stmt): ...         an isl error inside -> IslFailure (an InternalError)
    isl_failure(error, where)            the driver's last resort: IslFailure or None

A failed isl call (`isl.Error`, or a RuntimeError that islpy raises itself, such as
"non-unique var name") on valid input is a compiler bug, never the user's: it must
reach the user as an `InternalError` (exit 2, with a traceback) that says which
statement it was, at its source position, never as a raw islpy exception. Each poly
pass wraps its work on one statement in `isl_failures(stmt)` (a gradient's statement
carries the span of the forward statement it comes from); `pipeline.run_from`
converts whatever still escapes a pass with `isl_failure`, naming the pass.

Example: `<string>:2:5: isl failed on `A_grad(y) += ...`: call to isl_... failed: ...`
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import islpy as isl

from compiler.diagnostics import InternalError
from compiler.frontend.ast import Stmt
from compiler.frontend.printer import print_stmt
from compiler.frontend.source import NO_SPAN, Span


class IslFailure(InternalError):
    """isl failed: a compiler bug; `span` is the statement's (NO_SPAN: unknown)."""

    def __init__(self, message: str, span: Span = NO_SPAN) -> None:
        super().__init__(message)
        self.span = span


def is_isl_error(error: BaseException) -> bool:
    """Whether `error` is isl's (or islpy's own, raised inside islpy)."""
    if isinstance(error, isl.Error):
        return True
    if not isinstance(error, RuntimeError) or error.__traceback__ is None:
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "islpy" in frames[-1].filename


@contextmanager
def isl_failures(stmt: Stmt) -> Iterator[None]:
    """An isl failure inside the block becomes an `IslFailure` naming `stmt`."""
    try:
        yield
    except Exception as e:
        if isinstance(e, IslFailure) or not is_isl_error(e):
            raise
        raise _failure(stmt, e) from e


def isl_failure(error: BaseException, where: str) -> IslFailure | None:
    """`error` as an IslFailure naming `where` (a pass) when it is isl's, else None."""
    if isinstance(error, IslFailure) or not is_isl_error(error):
        return None
    return IslFailure(f"isl failed in {where} (no statement named): {error}")


def _failure(stmt: Stmt, error: BaseException) -> IslFailure:
    span = stmt.span
    where = f"{span.filename}:{span.line}:{span.col}: " if span.source is not None else ""
    text = " ".join(print_stmt(stmt).split())
    return IslFailure(f"{where}isl failed on `{text}`: {error}", span)


__all__ = ["IslFailure", "is_isl_error", "isl_failure", "isl_failures"]
