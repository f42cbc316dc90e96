"""`tcc tune`: tune a def for given input shapes, or list the tuned-options cache.

    tcc tune FILE --entry NAME --shape I=8,16,32,32 --shape W=16,16,3,3
             [--budget 60s] [--candidates N] [--target llvm] [--grad] [--seed N]
             [--ray auto|ADDRESS] [--workers N] [--timeout S] [--no-cache] [--quiet]
    tcc tune --show                 every cached winner: def, shapes, times, options

Inputs are random (float: standard normal from `--seed`; integer: zeros, valid
indices) of the given shapes. The summary (default and best time, speedup, the
winning Options, failures by reason) goes to stdout; the progress bar to stderr when
it is a terminal. Registered in `compiler.cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from compiler.diagnostics import OptionsError

if TYPE_CHECKING:
    from compiler.tune.store import OptionsStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", nargs="?", help="TC source file ('-': stdin)")
    parser.add_argument("--entry", metavar="NAME", help="the def (default: the only one)")
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="an input's shape (repeat per input; `s=` for 0-d)",
    )
    parser.add_argument("--budget", default="60s", help="time budget: 60, 90s, 2m (default 60s)")
    parser.add_argument("--candidates", type=int, help="stop after this many candidates")
    parser.add_argument("--target", default="llvm", help="the target to tune for (llvm)")
    parser.add_argument("--grad", action="store_true", help="tune the gradient def instead")
    parser.add_argument("--seed", type=int, default=0, help="search and inputs seed (default 0)")
    parser.add_argument("--ray", metavar="auto|ADDRESS", help="evaluate candidates on Ray")
    parser.add_argument("--workers", type=int, help="local worker processes (default: cores)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate")
    parser.add_argument("--no-cache", action="store_true", help="do not save the winner")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--show", action="store_true", help="list the tuned-options cache")


def run(args: argparse.Namespace) -> int:
    from compiler.cpu.cache import default_cache_dir
    from compiler.tune.store import FILENAME, OptionsStore

    store = OptionsStore(default_cache_dir(os.environ) / FILENAME)
    if args.show:
        return _show(store)
    if args.file is None:
        raise OptionsError("tcc tune: missing FILE", hint="tcc tune FILE --shape A=4,5 ...")
    return _tune(args, store)


def _show(store: OptionsStore) -> int:
    from compiler.options import Options
    from compiler.tune.space import describe, options_from_json

    entries = store.entries()
    print(f"{store.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    for key, entry in sorted(entries.items(), key=lambda kv: str(kv[1].get("saved", ""))):
        comp = entry.get("components", {})
        shapes = " ".join("x".join(map(str, s)) or "()" for s in comp.get("shapes", []))
        try:
            options = describe(options_from_json(Options, entry.get("options", {})))
        except (TypeError, ValueError, OptionsError):  # a stale entry: as stored
            options = f"(stale) {entry.get('options')}"
        print(
            f"  {entry.get('name', '?')} [{shapes}] {comp.get('target', '?')} "
            f"{comp.get('cpu', '?')}: {_ms(entry.get('time_ms'))} ms "
            f"(default {_ms(entry.get('default_ms'))} ms) {options}  {key[:12]}"
        )
    return 0


def _ms(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "?"


def _tune(args: argparse.Namespace, store: OptionsStore) -> int:
    import numpy as np

    from compiler.cli import _parse_shape, read_source
    from compiler.interp.expr import NP_DTYPE
    from compiler.kernel import Kernel
    from compiler.shapes import bind_sizes
    from compiler.tune.autotune import autotune
    from compiler.tune.executors import LocalExecutor, RayExecutor

    shapes = dict(_parse_shape(s) for s in args.shape)
    text, _ = read_source(args.file)
    kernel = Kernel(text, args.entry, target="interp")
    bind_sizes(kernel.ranged, shapes)  # every input's shape given, sizes consistent
    rng = np.random.default_rng(args.seed)
    arrays = [
        rng.standard_normal(shapes[t.name]).astype(NP_DTYPE[t.dtype])
        if t.dtype.is_float
        else np.zeros(shapes[t.name], dtype=NP_DTYPE[t.dtype])
        for t in kernel.ranged.checked.inputs
    ]
    if args.ray:
        executor: object = RayExecutor(args.ray, args.timeout)
    else:
        executor = LocalExecutor(args.workers, args.timeout)
    result = autotune(
        text,
        kernel.name,
        *arrays,
        target=args.target,
        budget=args.budget,
        candidates=args.candidates,
        cache=False if args.no_cache else store,
        progress=not args.quiet,
        seed=args.seed,
        grad=args.grad,
        executor=executor,
    )
    print(result.summary())
    return 0


__all__ = ["add_arguments", "run"]
