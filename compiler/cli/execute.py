"""`tcc run` and `tcc gradcheck`: commands that call a def on (random) inputs.

    tcc run FILE [--entry NAME] --shape I=8,16,32,32 [--shape W1=...] [--input NAME=x.npy]
            [--target llvm|interp] [--threads N] [--grad] [--bench [--repeat N]]
            [--output DIR] [--seed N] [--positive NAME] [--range NAME=lo:hi]
    tcc gradcheck FILE [--entry NAME] --shape A=2,3 ... [--backward NAME] [--seed N]
            [--positive NAME] [--range NAME=lo:hi] [--eps/--atol/--rtol X]

`--shape` takes one input (`A=2,3`; `s=` for 0-d) or several in one flag
(`I=8,16,32,32,W1=4,16,3,3`), and repeats. Inputs are drawn by
`compiler.inputs.random_inputs` (standard normal floats, integer subscripts uniform
over the extent they index), or loaded from `.npy` files with `--input`.

`run` prints each output's dtype, shape and checksum (the float64 sum and the sum of
absolute values); `--grad` also the gradient of every float input for a random
output gradient (seeded); `--bench` the median time of repeated calls and GFLOP/s,
the operations counted from the statements' iteration domains
(`compiler.poly.flops`); `--output DIR` writes every result as `DIR/NAME.npy`
atomically (a temporary file, then `os.replace`). The run functions are registered
in `compiler.cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.diagnostics import Diagnostic, OptionsError, TCError

if TYPE_CHECKING:
    from compiler.options import Options

TARGET_CHOICES = ("llvm", "interp")


# ------------------------------------------------------- file names in errors


@contextmanager
def named_source(name: str, text: str) -> Iterator[None]:
    """Errors raised inside about `text` -- parsed by the library as "<string>" --
    name the file it came from instead (`conv.tc:2:12`, not `<string>:2:12`)."""
    try:
        yield
    except TCError as err:
        err.diagnostics = tuple(_renamed(d, name, text) for d in err.diagnostics)
        raise


def _renamed(diag: Diagnostic, name: str, text: str) -> Diagnostic:
    from compiler.frontend.source import Source

    source = diag.span.source
    if source is None or source.name != "<string>" or source.text != text:
        return diag
    span = dataclasses.replace(diag.span, source=Source(name, text))
    return dataclasses.replace(diag, span=span)


# ------------------------------------------------------- gradient warnings


def size_names(text: str, entry: str | None) -> frozenset[str]:
    """The size parameters of def `entry` of `text` (as the user wrote them)."""
    from compiler.frontend.check import check_def
    from compiler.frontend.parser import parse

    return frozenset(check_def(parse(text).get(entry)).size_params)


def actionable(
    warnings: Sequence[Diagnostic], ranged: Any, user_sizes: frozenset[str] | None
) -> list[Diagnostic]:
    """The warnings of a gradient def a user can act on. The gradient takes each output
    gradient with sizes of its own (`O_grad` as `float(N, M, O_D2, O_D3)`, which must
    equal O's shape); warnings that those sizes might not fit the reads are checked
    at run time anyway and are left out, with one note saying so."""
    if user_sizes is None:
        return list(warnings)
    invented = set(ranged.checked.size_params) - user_sizes
    if not invented:
        return list(warnings)
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, invented))) + r")\b")
    kept = [w for w in warnings if not pattern.search(w.message)]
    dropped = len(warnings) - len(kept)
    if dropped:
        from compiler.diagnostics import Severity

        sizes = ", ".join(sorted(invented))
        kept.append(
            Diagnostic(
                Severity.NOTE,
                f"{dropped} bounds check(s) on the output gradients' sizes ({sizes}: the "
                "gradient def declares each output gradient with sizes of its own, which "
                "must be the output's shape) run at call time; not shown",
            )
        )
    return kept


# ------------------------------------------------------------------ flags


def parse_shapes(flags: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`["A=2,3", "B=3,4,s="]` -> {"A": (2, 3), "B": (3, 4), "s": ()}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for flag in flags:
        name: str | None = None
        for token in flag.split(","):
            token = token.strip()
            if "=" in token:
                name, _, first = token.partition("=")
                name = name.strip()
                if not name or name in shapes:
                    raise _bad_shape(flag, f"'{name}' given twice" if name else "")
                shapes[name] = ()
                token = first.strip()
            if not token:
                continue
            if name is None:
                raise _bad_shape(flag)
            try:
                shapes[name] += (int(token),)
            except ValueError:
                raise _bad_shape(flag) from None
        if name is None:
            raise _bad_shape(flag)
    for name, shape in shapes.items():
        if any(d < 0 for d in shape):
            raise OptionsError(f"bad --shape for '{name}': sizes must be >= 0, got {shape}")
    return shapes


def _bad_shape(flag: str, why: str = "") -> OptionsError:
    return OptionsError(
        f"bad --shape '{flag}'" + (f": {why}" if why else ""),
        hint="expected NAME=D0,D1,... (A=4,5), several in one flag (A=4,5,B=5,6), `s=` for 0-d",
    )


def parse_ranges(flags: Sequence[str]) -> dict[str, tuple[float, float]]:
    """`["A=-1:1"]` -> {"A": (-1.0, 1.0)}."""
    ranges: dict[str, tuple[float, float]] = {}
    for flag in flags:
        name, _, span = flag.partition("=")
        lo, sep, hi = span.partition(":")
        try:
            if not name.strip() or not sep:
                raise ValueError
            ranges[name.strip()] = (float(lo), float(hi))
        except ValueError:
            raise OptionsError(
                f"bad --range '{flag}': expected NAME=LO:HI, e.g. x=0.5:2 (HI exclusive)"
            ) from None
    return ranges


def _add_input_control(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="TC source file ('-': stdin)")
    parser.add_argument("--entry", metavar="NAME", help="the def (default: the only one)")
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="an input's shape (repeat, or several in one flag: I=8,16,32,32,W1=4,16,3,3)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random inputs' seed (default 0)")
    parser.add_argument(
        "--positive",
        action="append",
        default=[],
        metavar="NAME",
        help="draw this input uniformly in [0.5, 2) (e.g. a variance under a sqrt)",
    )
    parser.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="NAME=LO:HI",
        help="draw this input uniformly in [LO, HI) (integers: LO..HI-1)",
    )


def _draw(ranged: Any, shapes: dict[str, tuple[int, ...]], args: argparse.Namespace, **kw: Any):
    from compiler.inputs import random_inputs
    from compiler.shapes import bind_sizes

    bind_sizes(ranged, shapes)  # every input's shape given, sizes consistent
    rng = np.random.default_rng(args.seed)
    ranges = parse_ranges(args.range)
    return random_inputs(ranged, shapes, rng, positive=args.positive, ranges=ranges, **kw)


# -------------------------------------------------------------- tcc gradcheck


def add_gradcheck_args(parser: argparse.ArgumentParser) -> None:
    _add_input_control(parser)
    parser.add_argument("--backward", metavar="NAME", help="check this backward def instead of AD")
    parser.add_argument("--eps", type=float, default=1e-6, help="finite-difference step")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance")


def run_gradcheck(args: argparse.Namespace) -> int:
    """Random float64 inputs (see the module doc), finite differences against the
    gradient; a mismatch is a GradcheckError (exit 1) whose report says when a NaN or a
    kink (a tie) makes the check meaningless."""
    from compiler.cli import read_source
    from compiler.gradcheck import gradcheck
    from compiler.kernel import Kernel
    from compiler.progress import Progress

    shapes = parse_shapes(args.shape)
    text, filename = read_source(args.file)
    with named_source(filename, text):
        kernel = Kernel(text, args.entry, backward=args.backward)
        arrays = _draw(kernel.ranged, shapes, args, float64=True)
    with Progress(f"gradcheck {kernel.name}") as progress:
        gradcheck(
            kernel,
            *arrays.values(),
            eps=args.eps,
            atol=args.atol,
            rtol=args.rtol,
            seed=args.seed,
            progress=lambda done, total: progress.update("finite differences", done, total),
        )
    print(f"{args.file}: gradcheck ok ({kernel.name})")
    return 0


# -------------------------------------------------------------------- tcc run


def add_run_args(parser: argparse.ArgumentParser) -> None:
    _add_input_control(parser)
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="load this input from a .npy file instead of drawing it",
    )
    parser.add_argument(
        "--target", choices=TARGET_CHOICES, default="llvm", help="default llvm (native)"
    )
    parser.add_argument("--threads", type=int, help="threads (llvm; default: all cores)")
    parser.add_argument(
        "--grad", action="store_true", help="also the gradient of every float input (vjp)"
    )
    parser.add_argument("--bench", action="store_true", help="median time and GFLOP/s")
    parser.add_argument(
        "--repeat", type=int, help="with --bench: timed calls (default: ~1 s worth, 3..1000)"
    )
    parser.add_argument("--output", metavar="DIR", help="write every result as DIR/NAME.npy")


def run_run(args: argparse.Namespace) -> int:
    from compiler.cli import read_source
    from compiler.options import Options

    if args.threads is not None and args.target != "llvm":
        raise OptionsError("--threads applies to --target llvm only")
    if args.repeat is not None and args.repeat < 1:
        raise OptionsError(f"--repeat must be >= 1, got {args.repeat}")
    shapes = parse_shapes(args.shape)
    loaded = _load_inputs(args.input)
    for name, array in loaded.items():
        shapes[name] = tuple(array.shape)
    text, filename = read_source(args.file)
    options = Options(threads=args.threads) if args.threads is not None else None
    # every error of the def -- at define, or at a call (a dtype, a shape, an indirect
    # read out of bounds) -- names the file, not "<string>"
    with named_source(filename, text):
        return _run_named(text, args, shapes, loaded, options)


def _run_named(
    text: str,
    args: argparse.Namespace,
    shapes: dict[str, tuple[int, ...]],
    loaded: dict[str, np.ndarray],
    options: Options | None,
) -> int:
    from compiler.kernel import Kernel
    from compiler.progress import Progress

    with Progress(f"tcc run: compiling {args.entry or args.file}"):
        kernel = Kernel(text, args.entry, target=args.target, options=options)
        arrays = _draw(kernel.ranged, shapes, args)
    arrays.update(loaded)
    inputs = [arrays[t.name] for t in kernel.ranged.checked.inputs]
    with Progress(f"tcc run {kernel.name}"):
        outputs = kernel(*inputs)
    results = dict(zip((t.name for t in kernel.ranged.checked.outputs), outputs, strict=True))
    print(f"def {kernel.name} (target {args.target}):")
    for name, value in results.items():
        print(f"  output {name}: {_summary(value)}")
    grads: dict[str, np.ndarray] = {}
    if args.grad:
        grads = _run_grad(kernel, inputs, outputs, args.seed)
    if args.bench:
        _bench(kernel, inputs, args)
        if args.grad:
            cot = _cotangents(outputs, args.seed)
            with Progress("tcc run: timing the gradient"):
                times = _timed(lambda: kernel.vjp(*inputs, grad_outputs=cot), args.repeat)
            print(f"  gradient: median {_ms(times)} over {len(times)} calls (GFLOP/s not counted)")
    if args.output:
        written = _write_outputs(Path(args.output), {**results, **grads})
        print(f"  wrote {', '.join(written)} to {args.output}")
    return 0


def _load_inputs(flags: Sequence[str]) -> dict[str, np.ndarray]:
    from compiler.cli import InputFileError

    loaded: dict[str, np.ndarray] = {}
    for flag in flags:
        name, sep, path = flag.partition("=")
        if not sep or not name.strip() or not path:
            raise OptionsError(f"bad --input '{flag}': expected NAME=FILE.npy")
        try:
            array = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise InputFileError(f"cannot read '{path}': no such file") from None
        except (OSError, ValueError) as err:
            raise InputFileError(f"cannot read '{path}' as a .npy array: {err}") from None
        if not isinstance(array, np.ndarray):
            raise InputFileError(f"'{path}' holds several arrays (.npz); give one .npy file")
        loaded[name.strip()] = array
    return loaded


def _summary(value: np.ndarray) -> str:
    a = np.asarray(value)
    total = float(np.sum(a, dtype=np.float64)) if a.size else 0.0
    absolute = float(np.sum(np.abs(a), dtype=np.float64)) if a.size else 0.0
    return f"{a.dtype} {tuple(a.shape)}  sum={total:.6e}  sum|x|={absolute:.6e}"


def _cotangents(outputs: Sequence[np.ndarray], seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed + 1)
    return tuple(
        rng.standard_normal(o.shape).astype(o.dtype)
        if np.issubdtype(o.dtype, np.floating)
        else np.zeros(o.shape, o.dtype)
        for o in outputs
    )


def _run_grad(
    kernel: Any, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], seed: int
) -> dict[str, np.ndarray]:

    from compiler.progress import Progress

    cot = _cotangents(outputs, seed)
    with Progress(f"tcc run: gradient of {kernel.name}"):
        grads = kernel.vjp(*inputs, grad_outputs=cot)
    print("  gradient for a random output gradient (standard normal, seed + 1):")
    result: dict[str, np.ndarray] = {}
    for t, g in zip(kernel.ranged.checked.inputs, grads, strict=True):
        if g is None:
            print(f"  {t.name}_grad: none (integer input)")
            continue
        result[f"{t.name}_grad"] = g
        print(f"  {t.name}_grad: {_summary(g)}")
    return result


def _timed(call: Callable[[], object], repeat: int | None) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        if repeat is not None:
            if len(times) >= repeat:
                return times
        elif len(times) >= 1000 or (len(times) >= 3 and time.perf_counter() - start > 1.0):
            return times


def _ms(times: Sequence[float]) -> str:
    return f"{statistics.median(times) * 1e3:.3f} ms"


def _bench(kernel: Any, inputs: Sequence[np.ndarray], args: argparse.Namespace) -> None:
    from compiler.poly.flops import count_flops
    from compiler.progress import Progress
    from compiler.shapes import bind_sizes

    with Progress(f"tcc run: timing {kernel.name}"):
        times = _timed(lambda: kernel(*inputs), args.repeat)
    median = statistics.median(times)
    sizes = bind_sizes(
        kernel.ranged,
        {t.name: a.shape for t, a in zip(kernel.ranged.checked.inputs, inputs, strict=True)},
    )
    flops = count_flops(kernel.ranged, sizes)
    threads = "" if args.target != "llvm" else f", threads {args.threads or 'all cores'}"
    rate = f"{flops / median / 1e9:.2f} GFLOP/s" if median > 0 else "GFLOP/s: too fast to time"
    print(
        f"  time: median {_ms(times)} over {len(times)} calls{threads}; "
        f"{flops} flops (counted from the statement domains): {rate}"
    )


def _write_outputs(directory: Path, arrays: dict[str, np.ndarray]) -> list[str]:
    """Each array as DIR/NAME.npy, written to a temporary file and renamed into place."""
    from compiler.cli import InputFileError

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputFileError(f"cannot create '{directory}': {err.strerror or err}") from None
    written = []
    for name, array in arrays.items():
        target = directory / f"{name}.npy"
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".npy.tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, np.asarray(array), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(target.name)
    return written


__all__ = [
    "add_gradcheck_args",
    "add_run_args",
    "parse_ranges",
    "parse_shapes",
    "run_gradcheck",
    "run_run",
]
