"""Tuned against default: autotune `tools/bench.py` cases, then time both in the same run.

    python -m tools.tune_bench [--budget 45s] [--only NAME ...] [--repeat 15] [--small]
                               [--seed 0] [--workers N] [--json FILE]

For each case: `compiler.autotune` on the case's inputs (its own tuned-options file in a
temporary directory, so earlier runs do not seed the search), then the default kernel
(`Options()`) and the tuned one are checked against the NumPy reference and called in
turn, in blocks of calls (about 50 ms each), `--repeat` rounds after a warm-up, so
that a loaded machine's noise hits them alike. Where the tuner kept the default, both
kernels run the same code and the row shows the measurement noise. The table gives medians in milliseconds, the speedup default/tuned, the tuning
time and the candidates tried (failed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any


def _median_ms(fn: Any, rounds: int, other: Any) -> tuple[float, float]:
    """Per-call medians of `fn` and `other`: blocks of n calls (n such that a block
    takes about 50 ms), the two alternating, `rounds` blocks each."""
    n = 1
    while _block(fn, n) < 0.05 and n < 1 << 16:
        n *= 2
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(_block(fn, n) / n * 1e3)
        b.append(_block(other, n) / n * 1e3)
    return statistics.median(a), statistics.median(b)


def _block(fn: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - start


def _run_case(case: Any, args: argparse.Namespace, cache: str) -> dict[str, Any]:
    import numpy as np

    import compiler
    from compiler.options import Options
    from compiler.tune import LocalExecutor
    from compiler.tune.space import describe

    sizes = case.small if args.small else case.sizes
    arrays = case.inputs(np.random.default_rng(0), sizes)
    start = time.perf_counter()
    result = compiler.autotune(
        case.source,
        None,
        *arrays,
        budget=args.budget,
        cache=cache,
        seed=args.seed,
        progress=not args.quiet,
        executor=LocalExecutor(args.workers),
    )
    tuning_s = time.perf_counter() - start
    default = compiler.define(case.source, options=Options(), cache=cache)
    tuned = compiler.define(case.source, options=result.options, cache=cache)
    expected = case.numpy(*arrays)
    for kernel in (default, tuned):
        got = kernel(*arrays)[0]
        error = float(np.max(np.abs(got - expected) / (1 + np.abs(expected)), initial=0.0))
        if error > 1e-3:
            raise SystemExit(f"tune_bench: {case.name}: error {error:.2g} against NumPy")
    default(*arrays), tuned(*arrays)  # warm-up
    d_ms, t_ms = _median_ms(lambda: default(*arrays), args.repeat, lambda: tuned(*arrays))
    return {
        "name": case.name,
        "default_ms": d_ms,
        "tuned_ms": t_ms,
        "speedup": d_ms / t_ms,
        "tuning_s": tuning_s,
        "tried": result.tried,
        "failed": len(result.failed),
        "options": describe(result.options),
        "same_as_default": result.options == Options(),
        "search_default_ms": result.default_ms,
        "search_best_ms": result.time_ms,
    }


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'kernel':34} {'default ms':>10} {'tuned ms':>9} {'speedup':>7} {'tune s':>7} "
        f"{'tried':>5} {'failed':>6}  tuned options"
    )
    lines = ["medians of interleaved runs", head]
    for r in rows:
        lines.append(
            f"{r['name']:34} {r['default_ms']:>10.3f} {r['tuned_ms']:>9.3f} "
            f"{r['speedup']:>7.2f} {r['tuning_s']:>7.1f} {r['tried']:>5} {r['failed']:>6}  "
            f"{'(the default: this row is the noise) ' if r['same_as_default'] else ''}"
            f"{r['options']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tune_bench", description=__doc__)
    parser.add_argument("--budget", default="45s", help="tuning budget per case (default 45s)")
    parser.add_argument("--only", nargs="*", default=None, help="substrings of case names")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    from tools.bench import _cases

    cases = [c for c in _cases() if not args.only or any(s in c.name for s in args.only)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tcc-tune-bench-") as cache:
        for i, case in enumerate(cases, 1):
            print(f"[{i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
            rows.append(_run_case(case, args, cache))
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
