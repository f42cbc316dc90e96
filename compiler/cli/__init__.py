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
import tempfile
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from compiler.cli import execute as cli_run
from compiler.diagnostics import Diagnostic, TCError

if TYPE_CHECKING:
    from compiler.frontend.ast import Expr, Module
    from compiler.frontend.checked import CheckedDef

PROG = "tcc"
STDIN_NAME = "-"


class InputFileError(TCError):
    """A file named on the command line cannot be read as TC source text."""


class UsageError(TCError):
    """A bad command line: unknown flag, missing argument, conflicting options."""


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


# ------------------------------------------------------------------ shared helpers


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


# ---------------------------------------------------------------- tcc compile


def _add_compile_args(parser: argparse.ArgumentParser) -> None:
    from compiler.pipeline import PASS_NAMES

    parser.add_argument("file", metavar="FILE", help="TC source file ('-': stdin)")
    parser.add_argument("--entry", metavar="NAME", help="the def (default: the only one)")
    parser.add_argument(
        "--grad", action="store_true", help="print the gradient def (reverse-mode AD) as TC"
    )
    parser.add_argument(
        "--jvp",
        action="store_true",
        help="print the tangent def (forward-mode AD) as TC (of the gradient, with --grad)",
    )
    parser.add_argument(
        "--loss",
        action="append",
        metavar="OUT",
        help="with --grad: only OUT carries a cotangent (the loss): the gradient takes no "
        "`<out>_grad` for the other outputs; repeatable or comma-separated "
        "(default: every output)",
    )
    parser.add_argument(
        "--order",
        type=int,
        default=1,
        metavar="N",
        help="with --grad: differentiate N times (2: the gradient of the gradient)",
    )
    parser.add_argument(
        "--form",
        choices=("gather", "scatter"),
        default="gather",
        help="with --grad: the gradient after scatter -> gather (default) or as AD emits it",
    )
    parser.add_argument(
        "--emit",
        choices=("loops", "llvm", "cuda"),
        help="print the loop nests, the optimised LLVM IR or the CUDA C with its launch "
        "configuration (of the gradient, with --grad)",
    )
    parser.add_argument(
        "--dump-after",
        choices=(*PASS_NAMES, "all"),
        action="append",
        default=[],
        metavar="PASS",
        help=f"print the IR after PASS ({', '.join(PASS_NAMES)}) or after every pass "
        "('all'); repeatable",
    )
    parser.add_argument(
        "--vector-bits",
        type=int,
        choices=(128, 256, 512),
        help="the vector register width the CPU model sizes register tiles for "
        "(default: the host's; Options.vector_bits)",
    )
    parser.add_argument(
        "--time-passes", action="store_true", help="print each pass's time to stderr"
    )


def _run_compile(args: argparse.Namespace) -> int:
    """One pipeline run: up to `gather`/`grad` for --grad, `lower` for --emit loops,
    `codegen` for --emit llvm, or the last pass that --dump-after names."""
    from compiler import pipeline
    from compiler.diagnostics import OptionsError
    from compiler.options import Options

    dumps = set(args.dump_after)
    if args.order < 1 or (args.order != 1 and not args.grad):
        raise OptionsError(
            f"tcc compile: --order {args.order}: expected a positive order with --grad",
            hint="e.g. tcc compile FILE --grad --order 2",
        )
    derive = args.grad or args.jvp
    if not derive and args.emit is None and not dumps:
        raise OptionsError(
            "tcc compile: say what to print",
            hint="pass --emit loops|llvm|cuda, --grad or --dump-after",
        )
    text, filename = read_source(args.file)
    zeros = _loss_zeros(args, text, filename)
    # --emit cuda: the CUDA target lowers a RangedDef itself (compiler.runtime.cuda)
    goal = {"loops": "lower", "llvm": "codegen"}.get(args.emit or "", "")
    if not goal:
        goal = ("gather" if args.form == "gather" else "grad") if derive else "ranges"
    if "all" in dumps and args.emit is None and not derive:
        goal = pipeline.PASS_NAMES[-1]
    named = [pipeline.PASS_NAMES.index(d) for d in dumps if d != "all"]
    upto = pipeline.PASS_NAMES[max([pipeline.PASS_NAMES.index(goal), *named])]
    ctx = pipeline.PassContext(
        options=Options(vector_bits=args.vector_bits),
        filename=filename,
        entry=args.entry,
        grad=args.grad,
        zeros=zeros,
        order=args.order,
        jvp=args.jvp,
    )
    times: list[tuple[str, float]] = []
    results: dict[str, object] = {}

    def observe(name: str, result: object, seconds: float) -> None:
        times.append((name, seconds))
        results[name] = result
        if "all" in dumps or name in dumps:
            print(f"// ----- after {name} -----")
            print(pipeline.dump(result), end="")

    pipeline.run(text, ctx=ctx, upto=upto, observe=observe)
    if args.emit is not None or dumps:
        diagnostics = list(ctx.diagnostics)
        if args.grad and "grad" in results and "ranges" in results:
            user_sizes = frozenset(results["ranges"].checked.size_params)  # type: ignore[attr-defined]
            diagnostics = cli_run.actionable(diagnostics, results["grad"], user_sizes)
        print_diagnostics(diagnostics)
    if args.emit == "cuda":
        from compiler.runtime.cuda import cuda_source

        print(cuda_source(results[goal]), end="")
    elif args.emit is None and goal == "gather":  # strided scatters as their gathers
        from compiler.poly.gather import printed_form

        print(pipeline.dump(printed_form(results[goal], ctx.options.gather)), end="")
    elif args.emit is not None or derive:
        print(pipeline.dump(results[goal]), end="")
    if args.time_passes:
        _print_times(times)
    return 0


def _loss_zeros(args: argparse.Namespace, text: str, filename: str) -> tuple[str, ...]:
    """The outputs with a zero cotangent under `--loss` (none without it); an
    OptionsError for --loss without --grad."""
    from compiler.backward import cotangent_zeros
    from compiler.diagnostics import OptionsError
    from compiler.frontend.parser import parse

    if args.loss is None:
        return ()
    if not args.grad:
        raise OptionsError(
            "tcc compile: --loss names the outputs a gradient's cotangents come from",
            hint="pass --grad with it, e.g. tcc compile FILE --grad --loss Y",
        )
    return cotangent_zeros(parse(text, filename).get(args.entry), args.loss)


def _print_times(times: list[tuple[str, float]]) -> None:
    total = sum(seconds for _, seconds in times) or 1e-12
    print("pass          time (ms)      %", file=sys.stderr)
    for name, seconds in times:
        print(f"{name:<12} {seconds * 1e3:10.2f} {100 * seconds / total:6.1f}", file=sys.stderr)
    print(f"{'total':<12} {total * 1e3:10.2f}  100.0", file=sys.stderr)


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
        _add_compile_args,
        _run_compile,
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
