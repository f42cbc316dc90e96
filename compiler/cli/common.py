"""What every `tcc` subcommand shares: reading and parsing files with the errors users
expect, rendering diagnostics, and replacing a file atomically."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.diagnostics import Diagnostic, TCError

if TYPE_CHECKING:
    from compiler.frontend.ast import Module

PROG = "tcc"
STDIN_NAME = "-"


class InputFileError(TCError):
    """A file named on the command line cannot be read as TC source text."""


class UsageError(TCError):
    """A bad command line: unknown flag, missing argument, conflicting options."""


def read_source(path: str) -> tuple[str, str]:
    """The text of `path` (`-` reads stdin) and the name diagnostics should show."""
    if path == STDIN_NAME:
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise InputFileError(f"cannot read '{path}': no such file") from None
        except IsADirectoryError:
            raise InputFileError(
                f"cannot read '{path}': it is a directory, not a .tc file"
            ) from None
        except OSError as err:
            raise InputFileError(f"cannot read '{path}': {err.strerror or err}") from None
        name = path
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as err:
        raise InputFileError(
            f"cannot read '{name}': not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8"
        ) from None


def load_module(path: str) -> tuple[Module, str]:
    """Read and parse `path`; return the module and the text it was parsed from."""
    from compiler.frontend.parser import parse

    text, name = read_source(path)
    return parse(text, name), text


def print_diagnostics(diagnostics: Sequence[Diagnostic]) -> None:
    for diag in diagnostics:
        print(render_diagnostic(diag), file=sys.stderr)


def render_diagnostic(diag: Diagnostic) -> str:
    """A diagnostic with a span as `file:line:col: ...` and a caret; one without as
    `tcc: error: ...` (the form for command-line and file-system problems)."""
    if diag.span.source is not None:
        return diag.render()
    line = f"{PROG}: {diag.severity.value}: {diag.message}"
    return f"{line}\nhint: {diag.hint}" if diag.hint else line


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text`: write a temporary file next to it, then `os.replace`,
    so readers see the old or the new file, never a half-written one."""
    path = Path(os.path.realpath(path))  # rewrite a symlink's target, keep the link
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tcc-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
