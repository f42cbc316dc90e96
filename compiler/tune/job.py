"""What a tuning worker does with one candidate: compile and check it, or time it.

    job = TuneJob(text, name, "llvm", inputs, expected, cache_dir=..., ...)
    check(job, options)   -> Outcome(ok, reason, compile_s, code)   # compile, run once,
                                                     # compare (compile_s: both; code: hash)
    measure(job, options) -> Outcome(ok, times_ms=(...))      # medians of blocks of calls
    measure(job, options, cutoff_ms=2.0) -> ... stopped=True  # slower than the cutoff
    measure_pair(job, (a, b)) -> Outcome(ok, times_ms=a's, other_ms=b's)   # interleaved

Both run in a worker process (an executor's), never in the tuner's own process, so a
candidate that crashes or hangs takes only its worker with it. A worker keeps the
kernels it compiled (`_KERNELS`, per job), so timing after checking costs no compile; a
worker that did not compile the candidate loads it from the compile cache on disk
(`job.cache_dir`) or compiles it again.

Checking: the candidate's outputs must equal every array set in `job.expected` (the
model default's outputs, and the reference evaluator's on small sizes): same shapes,
NaN and infinity in the same places, integers and booleans exactly, floats within
`max|a - b| / (1 + |b|) <= tol` (1e-3 for float32, 1e-9 for float64: schedules may
reassociate sums). A candidate that passes gets `code`, a hash of what runs
(`code_hash`: the lowered loop IR after the CPU passes, which the JIT compiles, and the
thread count, the one field read at run time): two candidates with one hash run the
same machine code, so the tuner times only the first (`compiler.tune.autotune`).

Timing: one warm-up call, then calls are grouped in blocks of n calls, n doubled until
a block takes `min_block_s`; `blocks` blocks are timed and each gives one per-call
time. The caller takes the median. Early stop: with `cutoff_ms`, a candidate whose
first timed block (the calibration's last, of at least `min_block_s`) runs slower than
`cutoff_ms` a call is not timed further: the Outcome has that one block's time and
`stopped=True` (the tuner passes `EARLY_STOP` x the best median so far).
`measure_pair` interleaves the two candidates' blocks in the order a b b a, a b b a, ...
(so a steady drift of the machine's speed hits both alike).
"""

from __future__ import annotations

import hashlib
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_KERNELS: dict[tuple[str, Any], Any] = {}
_MAX_KERNELS = 64


@dataclass(frozen=True)
class TuneJob:
    """Everything a worker needs: the def, the inputs and the expected outputs."""

    key: str  # unique per tuning run (workers keep kernels by it)
    text: str
    name: str
    target: str
    inputs: tuple[np.ndarray, ...]
    expected: tuple[tuple[np.ndarray, ...], ...]
    cache_dir: str | None = None
    min_block_s: float = 0.02
    blocks: int = 5
    # modules the worker imports first: the caller's (torch), so a candidate is timed
    # with the same runtimes loaded as where it will run (`compiler.tune.worker`)
    preload: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """One candidate's result: ok, or the reason it failed; its times when timed."""

    options: Any
    ok: bool
    reason: str = ""
    compile_s: float = 0.0
    times_ms: tuple[float, ...] = field(default=())
    other_ms: tuple[float, ...] = field(default=())  # measure_pair: the second's times
    code: str | None = None  # check: `code_hash` of the compiled candidate
    stopped: bool = False  # measure: stopped early, slower than the cutoff

    @property
    def median_ms(self) -> float:
        times = sorted(self.times_ms)
        n = len(times)
        if n == 0:
            return float("inf")
        return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def _define(job: TuneJob, options: Any) -> Any:
    """The kernel of `job` compiled with `options` (tests patch this to plant a bad one)."""
    from compiler.kernel import Kernel

    cache: Any = True if job.cache_dir is None else job.cache_dir
    return Kernel(job.text, job.name, target=job.target, options=options, cache=cache)


def _kernel(job: TuneJob, options: Any) -> Any:
    found = _KERNELS.get((job.key, options))
    if found is None:
        found = _define(job, options)
        while len(_KERNELS) >= _MAX_KERNELS:
            del _KERNELS[next(iter(_KERNELS))]
        _KERNELS[(job.key, options)] = found
    return found


def forget(key: str) -> None:
    """Drop this process's kernels of job `key` (an in-process executor's close)."""
    for k in [k for k in _KERNELS if k[0] == key]:
        del _KERNELS[k]


def _call(kernel: Any, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. TCWarning for accumulating outputs
        return tuple(kernel(*inputs))


def check(job: TuneJob, options: Any) -> Outcome:
    """Compile the candidate, run it once, compare with every expected output set."""
    start = time.perf_counter()
    try:
        kernel = _kernel(job, options)
    except Exception as err:  # a candidate that does not compile is a result, not a crash
        return Outcome(options, False, f"compile failed: {_error(err)}")
    try:
        got = _call(kernel, job.inputs)
    except Exception as err:
        return Outcome(options, False, f"run failed: {_error(err)}")
    # define and the first call: a def whose sizes decide some of its code compiles
    # at its first call (runtime.native), so the run is counted with the compile
    compile_s = time.perf_counter() - start
    for i, expected in enumerate(job.expected):
        problem = compare(got, expected)
        if problem:
            what = "the default's" if i == 0 else "the reference evaluator's"
            return Outcome(options, False, f"outputs differ from {what}: {problem}", compile_s)
    return Outcome(options, True, "", compile_s, code=code_hash(kernel))


def code_hash(kernel: Any) -> str | None:
    """A hash of what a compiled kernel runs: its Function after the CPU passes (the
    JIT's input: equal Functions compile to the same code) and its thread count; None
    for a kernel without a native program (another target, a test's stand-in)."""
    program = getattr(kernel, "_native", None)
    function = getattr(program, "function", None)
    if function is None:
        return None
    digest = hashlib.sha256(repr(function).encode())
    digest.update(f"threads={program.threads}".encode())
    return digest.hexdigest()[:24]


def measure(job: TuneJob, options: Any, cutoff_ms: float | None = None) -> Outcome:
    """Time the candidate: per-call times of `job.blocks` blocks, or of one block when
    it is slower than `cutoff_ms` a call (see the module doc)."""
    try:
        kernel = _kernel(job, options)
        run = _runner(kernel, job.inputs)
        run()
        n = 1
        while True:
            elapsed = _block(run, n)
            if elapsed >= job.min_block_s or n >= 1 << 20:
                break
            n *= 2
        first = elapsed / n * 1e3
        if cutoff_ms is not None and first > cutoff_ms:
            return Outcome(options, True, times_ms=(first,), stopped=True)
        times = [first, *(_block(run, n) / n * 1e3 for _ in range(job.blocks - 1))]
    except Exception as err:
        return Outcome(options, False, f"timing failed: {_error(err)}")
    return Outcome(options, True, times_ms=tuple(times))


def measure_pair(job: TuneJob, pair: Any) -> Outcome:
    """Time two candidates `(a, b)` interleaved, block by block (3 x `job.blocks`
    blocks each, in the order a b b a ...), so that a burst of load or a drift hits both
    alike: a's per-call times in `times_ms`, b's in `other_ms`."""
    try:
        runs = [_runner(_kernel(job, options), job.inputs) for options in pair]
        for run in runs:
            run()
        n = 1
        while min(_block(run, n) for run in runs) < job.min_block_s and n < 1 << 20:
            n *= 2
        times: tuple[list[float], list[float]] = ([], [])
        for k in range(3 * job.blocks):
            order = (0, 1) if k % 2 == 0 else (1, 0)
            for i in order:
                times[i].append(_block(runs[i], n) / n * 1e3)
    except Exception as err:
        return Outcome(pair, False, f"timing failed: {_error(err)}")
    return Outcome(pair, True, times_ms=tuple(times[0]), other_ms=tuple(times[1]))


def _runner(kernel: Any, inputs: Sequence[np.ndarray]) -> Any:
    def run() -> None:
        _call(kernel, inputs)

    return run


def _block(run: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run()
    return time.perf_counter() - start


def compare(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> str:
    """'' when `got` matches `expected` (see the module doc), else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"output {k} has shape {a.shape}, expected {b.shape}"
        if not np.issubdtype(b.dtype, np.floating):
            if not np.array_equal(a, b):
                return f"output {k} differs at {int(np.count_nonzero(a != b))} element(s)"
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        same_special = np.array_equal(np.isnan(a64), np.isnan(b64)) and np.array_equal(
            np.where(finite, 0.0, np.nan_to_num(b64)), np.where(finite, 0.0, np.nan_to_num(a64))
        )
        if not same_special:
            return f"output {k} has NaN or infinity in other places"
        tol = 1e-9 if b.dtype == np.float64 else 1e-3 if b.dtype == np.float32 else 1e-2
        err = np.abs(a64[finite] - b64[finite]) / (1.0 + np.abs(b64[finite]))
        worst = float(err.max(initial=0.0))
        if not worst <= tol:
            return f"output {k} differs by {worst:.3g} (tolerance {tol:g})"
    return ""


def _error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    name = type(err).__name__
    if first:
        return f"{name}: {first}"
    return f"{name} at {traceback.format_exception(err)[-2].strip()[:200]}"


__all__ = [
    "Outcome",
    "TuneJob",
    "check",
    "code_hash",
    "compare",
    "forget",
    "measure",
    "measure_pair",
]
