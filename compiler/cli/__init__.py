"""The `tcc` command: one function per subcommand, registered in `COMMANDS`.

    tcc check FILE... [--no-ranges] parse, check, infer ranges; diagnostics on stderr
    tcc fmt FILE... [--in-place | --check]
                                   print canonical TC, rewrite it, or test it
    tcc infer FILE [--entry NAME] [--shape A=4,5 ...]
                                   inferred ranges and output shapes (symbolic, concrete)
    tcc compile, tcc gradcheck, tcc run, tcc cache: see `tcc COMMAND --help`
                                   (gradcheck and run live in `compiler/cli/execute.py`)

Exit codes: 0 success; 1 a user error (bad TC, a missing or unreadable file, a
bad flag), printed without a traceback; 2 a compiler bug (an `InternalError` or
any other unexpected exception), printed with a traceback and a request to report.

Adding a subcommand: write `_add_NAME_args(parser)` and `_run_NAME(args) -> int`,
and append `Command("NAME", "one-line help", _add_NAME_args, _run_NAME)` to
`COMMANDS`. `read_source` and `load_module` read and parse files with the errors
users expect; a `TCError` raised by a run function is rendered by `main`.
Compiler modules are imported inside the run functions, so `tcc --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from compiler.cli import execute as cli_run
from compiler.cli.common import (
    PROG,
    STDIN_NAME,
    InputFileError,
    UsageError,
    load_module,
    print_diagnostics,
    read_source,
    render_diagnostic,
    write_atomically,
)
from compiler.cli.compile import add_compile_args, run_compile
from compiler.diagnostics import Diagnostic, TCError

__all__ = [
    "COMMANDS",
    "PROG",
    "STDIN_NAME",
    "Command",
    "InputFileError",
    "UsageError",
    "build_parser",
    "load_module",
    "main",
    "print_diagnostics",
    "read_source",
    "render_diagnostic",
    "write_atomically",
]

if TYPE_CHECKING:
    from compiler.frontend.ast import Expr
    from compiler.frontend.checked import CheckedDef


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: its name, one-line help, argument setup and implementation."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad command lines as `UsageError` (exit 1), not exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _collect_warnings(checked: object) -> list[Diagnostic]:
    """Warnings of whatever `check_module` returns (one CheckedDef or several)."""
    items = checked if isinstance(checked, (tuple, list)) else (checked,)
    return [w for item in items for w in getattr(item, "warnings", ())]


# ------------------------------------------------------------------ tcc check


def _add_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="TC source files ('-': stdin)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    parser.add_argument(
        "--no-ranges",
        action="store_true",
        help="skip range inference (parse and semantic checks only)",
    )


def _run_check(args: argparse.Namespace) -> int:
    """Parse, check and (unless --no-ranges) infer the ranges of every def: what every
    later stage needs, so a file `tcc check` passes is not rejected by `tcc compile`
    for its ranges (`where i in 8:4`, a read out of bounds for every size)."""
    from compiler.frontend.check import check_module

    status = 0
    for path in args.files:
        try:
            module, _ = load_module(path)
            checked = check_module(module)
        except TCError as err:
            print_diagnostics(err.diagnostics)
            status = 1
            continue
        warnings = _collect_warnings(checked)
        errors = [] if args.no_ranges else _range_diagnostics(checked, warnings)
        print_diagnostics(sorted([*warnings, *errors], key=_position))
        if errors:
            status = 1
        elif not args.quiet:
            names = ", ".join(d.name for d in module.defs) or "no defs"
            note = f", {len(warnings)} warning(s)" if warnings else ""
            print(f"{path}: ok ({names}{note})")
    return status


def _range_diagnostics(checked: Sequence[CheckedDef], found: list[Diagnostic]) -> list[Diagnostic]:
    """Range inference of every def (the pipeline's `ranges` pass): its warnings are
    appended to `found`; the errors of all defs are returned."""
    from compiler import pipeline

    errors: list[Diagnostic] = []
    for item in checked:
        ctx = pipeline.PassContext()
        try:
            pipeline.run_from(item, ctx, start="ranges", upto="ranges")
        except TCError as err:
            errors += err.diagnostics
        found += ctx.diagnostics
    return errors


def _position(diag: Diagnostic) -> tuple[str, int]:
    return (diag.span.filename, diag.span.start)


# -------------------------------------------------------------------- tcc fmt


def _add_fmt_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="TC source files ('-': stdin)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "-i", "--in-place", action="store_true", help="rewrite each file (atomically)"
    )
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if a file is not canonically formatted"
    )
    parser.add_argument(
        "--drop-comments",
        action="store_true",
        help="with --in-place, rewrite files even if comments after the header would be lost",
    )


def split_header(text: str) -> tuple[str, str]:
    """The leading comment block (comment and blank lines before the first def) and
    the rest. The AST keeps no comments, so `fmt` carries this header over verbatim;
    TC has no string literals, so any `#` in the rest is a comment fmt would drop."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and (not lines[n].strip() or lines[n].lstrip().startswith("#")):
        n += 1
    header = [line.rstrip() for line in lines[:n]]
    while header and not header[-1]:
        header.pop()
    while header and not header[0]:
        header.pop(0)
    return "".join(f"{line}\n" for line in header), "".join(lines[n:])


def _run_fmt(args: argparse.Namespace) -> int:
    from compiler.frontend.printer import print_module

    if args.in_place and STDIN_NAME in args.files:
        raise UsageError("--in-place cannot rewrite stdin ('-')")
    status = 0
    for path in args.files:
        try:
            module, text = load_module(path)
        except TCError as err:
            print_diagnostics(err.diagnostics)
            status = 1
            continue
        header, body = split_header(text)
        formatted = header + print_module(module)
        if args.check:
            if formatted != text:
                print(
                    f"{PROG}: {path} is not canonically formatted (run 'tcc fmt -i')",
                    file=sys.stderr,
                )
                status = 1
        elif args.in_place:
            if "#" in body and not args.drop_comments:
                print(
                    f"{PROG}: error: {path} has comments after its header, which fmt cannot "
                    "keep yet; move them above the first def, or pass --drop-comments",
                    file=sys.stderr,
                )
                status = 1
            elif formatted != text:
                write_atomically(Path(path), formatted)
        else:
            sys.stdout.write(formatted)
    return status


# ------------------------------------------------------------------ tcc infer


def _add_infer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="TC source file ('-': stdin)")
    parser.add_argument("--entry", metavar="NAME", help="the def (default: the only one)")
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="an input's shape, for concrete sizes (repeat per input; `s=` for 0-d)",
    )


def _parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    from compiler.diagnostics import OptionsError

    name, sep, dims = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        return name.strip(), tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise OptionsError(f"bad --shape '{text}': expected NAME=D0,D1,... e.g. A=4,5") from None


def _run_infer(args: argparse.Namespace) -> int:
    from compiler import pipeline
    from compiler.frontend.ast import RangeConstraint
    from compiler.frontend.printer import print_expr
    from compiler.shapes import bind_sizes, output_shapes

    shapes = cli_run.parse_shapes(args.shape)  # also several in one flag: A=4,5,B=5,6
    text, filename = read_source(args.file)
    ctx = pipeline.PassContext(filename=filename, entry=args.entry)
    ranged = pipeline.run(text, ctx=ctx, upto="ranges")
    print_diagnostics(ctx.diagnostics)
    sizes = bind_sizes(ranged, shapes) if shapes else None
    concrete = output_shapes(ranged, sizes) if sizes is not None else {}
    print(f"def {ranged.name}:")
    for k, facts in enumerate(ranged.checked.stmts, 1):
        print(f"  statement {k}: {print_expr(facts.stmt.lhs)} {facts.stmt.op.value} ...")
        for c in facts.stmt.where:
            if isinstance(c, RangeConstraint):
                text = f"{print_expr(c.expr)} in {print_expr(c.lo)}:{print_expr(c.hi)}"
                print(f"    {text}{_concrete(c.lo, c.hi, sizes)}")
    for name, bounds in ranged.output_bounds:
        dims = ", ".join(print_expr(b.hi) for b in bounds)
        value = f"  = {concrete[name]}" if name in concrete else ""
        print(f"  output {name}: shape ({dims}){value}")
    if sizes is not None:
        print("  sizes: " + (", ".join(f"{k}={v}" for k, v in sizes.items()) or "none"))
    return 0


def _concrete(lo: Expr, hi: Expr, sizes: dict[str, int] | None) -> str:
    """`  = 0:8` for bounds of the sizes alone, when sizes are known."""
    from compiler.diagnostics import InternalError
    from compiler.shapes import eval_bound_expr

    if sizes is None:
        return ""
    try:
        return f"  = {eval_bound_expr(lo, sizes)}:{eval_bound_expr(hi, sizes)}"
    except InternalError:  # bounded by an outer index variable
        return ""


# ------------------------------------------------------------------ the table


def _add_cache_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("info", "clear"),
        help="info: the directory, its number of entries and their size; clear: remove them",
    )


def _run_cache(args: argparse.Namespace) -> int:
    from compiler.cpu.cache import CompileCache, default_cache_dir

    cache = CompileCache(default_cache_dir(os.environ))
    if args.action == "clear":
        print(f"removed {cache.clear()} file(s) from {cache.directory}")
        return 0
    info = cache.info()
    print(f"directory: {info.directory}")
    print(f"entries: {info.entries}")
    print(f"size: {info.size_bytes} bytes ({info.size_bytes / 2**20:.1f} MiB)")
    print(f"temporaries: {info.temporaries} (left by unfinished writes; stale ones are removed)")
    return 0


def _add_tune(parser: argparse.ArgumentParser) -> None:
    from compiler.tune.cli import add_arguments  # the autotuner's own module

    add_arguments(parser)


def _run_tune(args: argparse.Namespace) -> int:
    from compiler.tune.cli import run

    return run(args)


COMMANDS: tuple[Command, ...] = (
    Command(
        "check", "parse and check TC files; print errors and warnings", _add_check_args, _run_check
    ),
    Command("fmt", "print TC files in canonical form", _add_fmt_args, _run_fmt),
    Command("infer", "print inferred ranges and output shapes", _add_infer_args, _run_infer),
    Command(
        "compile",
        "print a def's loop nests or LLVM IR (--emit), or its gradient TC (--grad)",
        add_compile_args,
        run_compile,
    ),
    Command(
        "gradcheck",
        "check a def's gradient against finite differences (float64, random inputs)",
        cli_run.add_gradcheck_args,
        cli_run.run_gradcheck,
    ),
    Command(
        "run",
        "run a def on random or .npy inputs: output shapes, checksums, --bench, --grad",
        cli_run.add_run_args,
        cli_run.run_run,
    ),
    Command(
        "cache",
        "show (info) or empty (clear) the compile cache ($XDG_CACHE_HOME/tcc or ~/.cache/tcc)",
        _add_cache_args,
        _run_cache,
    ),
    Command("tune", "search a def's schedule options for input shapes", _add_tune, _run_tune),
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="tcc: a compiler toolkit for the Tensor Comprehensions (TC) language.",
        epilog="exit codes: 0 ok, 1 user error, 2 internal compiler error",
    )
    from compiler import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(p)
        p.set_defaults(run=command.run, command_parser=p)
    return parser


def _dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    # parse_known_args, so that `tcc --bogus` names the bad flag before the missing command
    args, extras = parser.parse_known_args(argv)
    if extras:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command is None:
        parser.error(f"missing COMMAND; one of: {', '.join(c.name for c in COMMANDS)}")
    if args.command == "compile":  # a gradient can take a while: a spinner on a TTY
        return _with_progress(args)
    return int(args.run(args))


def _with_progress(args: argparse.Namespace) -> int:
    from contextlib import redirect_stderr, redirect_stdout

    from compiler.progress import CloseOnWrite, Progress

    with Progress(f"{PROG} {args.command} {getattr(args, 'file', '')}".strip()) as progress:
        with (
            redirect_stdout(CloseOnWrite(sys.stdout, progress)),  # type: ignore[arg-type]
            redirect_stderr(CloseOnWrite(sys.stderr, progress)),  # type: ignore[arg-type]
        ):
            return int(args.run(args))


def _show_warning(
    message: Warning | str, category: type[Warning], *_: object, **__: object
) -> None:
    """Python warnings (e.g. the gather pass's budget) as `tcc: warning: ...`."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tcc` with `argv` (default: sys.argv[1:]); return the exit code."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(_dispatch(build_parser(), argv))
    except SystemExit as exit_:  # --help and --version
        return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
    except TCError as err:
        print_diagnostics(err.diagnostics)
        return 1
    except BrokenPipeError:  # `tcc fmt x.tc | head`: the reader left; not our bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a compiler bug, InternalError included
        traceback.print_exc()
        print(
            f"{PROG}: internal compiler error, please report (with the input and the "
            "traceback above)",
            file=sys.stderr,
        )
        return 2


__all__ = ["COMMANDS", "Command", "build_parser", "load_module", "main", "read_source"]

if __name__ == "__main__":
    sys.exit(main())
