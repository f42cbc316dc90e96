"""Compile latency with the compile cache: cold, warm on disk, warm in memory.

    python -m tools.bench_cache [--runs 5]

For matmul, conv2d and their gradients (`Kernel.grad`), the median over `--runs`
of the time from `compiler.define(..., target="llvm")` to its first result: the
define and one call (for the gradient: `k.grad` on a freshly defined `k`, which has
run once, and one call of it). A def whose versions are picked by the sizes compiles
at its first call (`runtime.native`), so the call is part of the latency; the inputs
are small (`INPUTS`: matmul 256^3, conv2d N1 C16 32^2 M16 3x3, a call of 0.5-3 ms
warm) with the sizes of `tools.bench`'s cases otherwise:

- cold: a new process with an empty cache directory;
- warm disk: a new process whose cache directory holds the entry;
- warm memory: the same process, defining the same source again.

Each new process imports tcc's modules and initialises LLVM before the clock starts
(one-time costs of any first compile, cached or not). Beside the cold wall time, the
process CPU time of the same compile (every thread: LLVM compiles parts on threads, so
on a machine of `c` cores a cold compile takes at least its CPU time over `c`).
`--only CASE...` measures some of the cases.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("matmul", "conv2d", "matmul_grad", "conv2d_grad")

# The inputs of the first call, by example (float32, seeded).
INPUTS = {"matmul": [(256, 256), (256, 256)], "conv2d": [(1, 16, 32, 32), (16, 16, 3, 3), (16,)]}

_CHILD = """
import json, sys, time
import numpy as np
import compiler, compiler.runtime.native, compiler.backward, compiler.autodiff
from compiler.cpu.llvm import target_machine
target_machine()
compiler.define("def f(float(N) A) -> (B) { B(i) = A(i) }")  # imports of the front end
case, directory, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
example = case.removesuffix("_grad")
src = open("examples/" + example + ".tc").read()
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(s).astype(np.float32) for s in json.loads(sys.argv[4])]

def once():
    if case.endswith("_grad"):
        k = compiler.define(src, target="llvm", cache=directory)
        seeds = [np.ones_like(o) for o in k(*inputs)]
        t0, c0 = time.perf_counter(), time.process_time()
        k.grad(*inputs, *seeds)
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        compiler.define(src, target="llvm", cache=directory)(*inputs)
    return time.perf_counter() - t0, time.process_time() - c0

print(json.dumps([once() for _ in range(repeats)]))
"""


def _child(case: str, directory: Path, repeats: int) -> list[tuple[float, float]]:
    shapes = json.dumps(INPUTS[case.removesuffix("_grad")])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, case, str(directory), str(repeats), shapes],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [(float(wall), float(cpu)) for wall, cpu in json.loads(out)]


def measure(case: str, runs: int) -> dict[str, float]:
    """Median milliseconds of each mode for `case` (and the cold compile's CPU time)."""
    cold, cold_cpu, disk, memory = [], [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            (first, cpu), *again = _child(case, Path(tmp), 2)
            cold.append(first)
            cold_cpu.append(cpu)
            memory.extend(wall for wall, _ in again)
            disk.append(_child(case, Path(tmp), 1)[0][0])
    return {
        "cold": 1000 * statistics.median(cold),
        "cold cpu": 1000 * statistics.median(cold_cpu),
        "warm disk": 1000 * statistics.median(disk),
        "warm memory": 1000 * statistics.median(memory),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=CASES, help="these cases only")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(
        f"{'kernel':<14}{'cold ms':>10}{'cold cpu ms':>13}{'warm disk ms':>14}"
        f"{'warm memory ms':>16}"
    )
    for case in args.only or CASES:
        start = time.perf_counter()
        r = measure(case, args.runs)
        print(
            f"{case:<14}{r['cold']:>10.1f}{r['cold cpu']:>13.1f}{r['warm disk']:>14.1f}"
            f"{r['warm memory']:>16.2f}"
            f"   ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
