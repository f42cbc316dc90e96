"""`tcc compile FILE`: run the pipeline up to the stage asked for and print it (TC, the
gradient in gather form, loop IR, LLVM IR or CUDA C), with `--dump-after` and
`--time-passes`. Registered in `compiler.cli.COMMANDS`."""

from __future__ import annotations

import argparse
import sys

from compiler.cli import execute as cli_run
from compiler.cli.common import print_diagnostics, read_source


def add_compile_args(parser: argparse.ArgumentParser) -> None:
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


def run_compile(args: argparse.Namespace) -> int:
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
