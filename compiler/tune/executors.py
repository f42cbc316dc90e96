"""Where candidates are compiled, checked and timed: the executor interface and its backends.

    executor = LocalExecutor(workers=2, timeout_s=60)   # worker processes (the default)
    executor = RayExecutor("auto")                     # a Ray cluster (pip install 'tcc[ray]')
    executor = InlineExecutor()                        # this process (tests, debugging)
    executor.start(job)
    outcomes = executor.check([opts, ...])             # in parallel, one Outcome each, in order
    outcome = executor.measure(opts)                   # alone: nothing else runs meanwhile
    outcome = executor.measure(opts, cutoff_ms=2.0)    # stops after one block above it
    outcome = executor.compare(a, b)                   # both alone, alternating (optional)
    executor.close()

An executor never raises for a candidate: a candidate that fails to compile, raises,
crashes its worker or runs past `timeout_s` comes back as an Outcome with `ok=False` and
the reason. `check` runs candidates in parallel (compiling is most of the cost);
`measure` runs one candidate while no other task runs, so timings do not disturb each
other (with `cutoff_ms`, passed on to a measure function that takes it, the timing
stops early: `compiler.tune.job.measure`); `compare` (optional; `compare_by_measures` otherwise) times two candidates in one
task, alternating block by block (`job.measure_pair`), for the final confirmation. The task functions (`check_fn`, `measure_fn`: `compiler.tune.job.check` and
`.measure` unless given) are module-level functions, passed by reference.

LocalExecutor: `workers` processes of `compiler.tune.worker`, started with
`python -c` (not forked: a forked child of a process that ran OpenMP code can hang; not
through multiprocessing: that imports the user's `__main__` in every worker), kept for
the job and fed one task at a time each, so each task's clock starts when it does (a
worker's start-up has its own deadline). A worker whose task runs past `timeout_s` is
killed (our own child, by its handle) and its candidate reported as timed out; a
worker that dies is reported as crashed with the candidate it was running; either is
replaced by a fresh worker for the next task. Timing prefers the worker that compiled
the candidate (its kernel is still in memory).

RayExecutor: one Ray task per candidate (`max_retries=0`), the job put in the object
store once; `check` submits every candidate, `measure` one; a task past its deadline is
cancelled (`force=True`), a dead worker is reported as crashed.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import pickle
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from compiler.diagnostics import OptionsError
from compiler.tune import job as J
from compiler.tune import worker as W
from compiler.tune.job import Outcome, TuneJob

TaskFn = Callable[[TuneJob, Any], Outcome]
DEFAULT_TIMEOUT_S = 120.0


class Executor(Protocol):
    """Runs candidate tasks of one job (see the module doc)."""

    workers: int

    def start(self, job: TuneJob) -> None: ...

    def check(self, candidates: Sequence[Any]) -> list[Outcome]: ...

    def measure(self, options: Any, cutoff_ms: float | None = None) -> Outcome: ...

    def close(self) -> None: ...


class InlineExecutor:
    """Runs every task in this process: no parallelism, no timeout, no crash isolation."""

    def __init__(self, check_fn: TaskFn = J.check, measure_fn: TaskFn = J.measure) -> None:
        self.workers = 1
        self.check_fn, self.measure_fn = check_fn, measure_fn
        self._job: TuneJob | None = None

    def start(self, job: TuneJob) -> None:
        self._job = job

    def check(self, candidates: Sequence[Any]) -> list[Outcome]:
        return [guarded(self.check_fn, self._require(), c) for c in candidates]

    def measure(self, options: Any, cutoff_ms: float | None = None) -> Outcome:
        kw = cutoff_kwargs(self.measure_fn, cutoff_ms)
        return guarded(self.measure_fn, self._require(), options, **kw)

    def compare(self, a: Any, b: Any) -> Outcome:
        if self.measure_fn is J.measure:
            return guarded(J.measure_pair, self._require(), (a, b))
        return compare_by_measures(self.measure, a, b)

    def close(self) -> None:
        if self._job is not None:
            J.forget(self._job.key)
        self._job = None

    def _require(self) -> TuneJob:
        if self._job is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        return self._job


def compare_by_measures(measure: Callable[[Any], Outcome], a: Any, b: Any) -> Outcome:
    """`compare` from separate measure tasks, alternating, 3 rounds (for executors and
    measure functions without a paired timing)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(3):
        for options, out in zip((a, b), times, strict=True):
            outcome = measure(options)
            if not outcome.ok:
                return Outcome((a, b), False, outcome.reason)
            out += outcome.times_ms
    return Outcome((a, b), True, times_ms=tuple(times[0]), other_ms=tuple(times[1]))


def cutoff_kwargs(fn: Callable[..., Any], cutoff_ms: float | None) -> dict[str, float]:
    """`{"cutoff_ms": ...}` for a measure function that takes it, else `{}` (a test's
    fake timer, a user's measure function: timed in full)."""
    if cutoff_ms is None:
        return {}
    try:
        takes = "cutoff_ms" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    return {"cutoff_ms": cutoff_ms} if takes else {}


def call_measure(runner: Any, options: Any, cutoff_ms: float | None) -> Outcome:
    """`runner.measure(options, cutoff_ms=...)`, or `runner.measure(options)` for an
    executor whose measure takes no cutoff."""
    return runner.measure(options, **cutoff_kwargs(runner.measure, cutoff_ms))


def guarded(fn: Callable[..., Outcome], job: TuneJob, options: Any, **kw: Any) -> Outcome:
    try:
        return fn(job, options, **kw)
    except Exception as err:
        return Outcome(options, False, f"task failed: {type(err).__name__}: {err}")


# ------------------------------------------------------------------ local processes


class _Worker:
    """One worker process (`compiler.tune.worker`) and the task it runs."""

    def __init__(self, job_frame: bytes) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", W.BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.ready = False
        self.started = time.monotonic()
        self.task: tuple[int, float] | None = None  # (candidate index, start time)
        self.seen: set[Any] = set()  # candidates this worker compiled
        try:
            W.write_frame(self.stdin, list(sys.path))
            self.stdin.write(job_frame)
            self.stdin.flush()
        except OSError:  # it died at once; the read reports it
            pass

    def fileno(self) -> int:
        return self.stdout.fileno()

    def submit(self, fn: TaskFn, index: int, options: Any, kw: Mapping[str, Any]) -> None:
        self.task = (index, time.monotonic())
        self.seen.add(options)
        W.write_frame(self.stdin, (fn, options, dict(kw)))

    def read(self) -> Any:
        return W.read_frame(self.stdout)

    def kill(self) -> None:
        self.proc.kill()  # our own child, by its handle
        self.proc.wait()
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class LocalExecutor:
    """Worker processes on this machine (see the module doc)."""

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        check_fn: TaskFn = J.check,
        measure_fn: TaskFn = J.measure,
    ) -> None:
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise OptionsError(f"workers must be a positive int, got {workers!r}")
        if not timeout_s > 0:
            raise OptionsError(f"timeout_s must be positive, got {timeout_s!r}")
        self.workers = workers or max(1, min(os.cpu_count() or 1, 8))
        self.timeout_s = float(timeout_s)
        self.check_fn, self.measure_fn = check_fn, measure_fn
        self._job_frame: bytes | None = None
        self._pool: list[_Worker] = []

    def start(self, job: TuneJob) -> None:
        self.close()
        buffer = io.BytesIO()
        W.write_frame(buffer, job)
        self._job_frame = buffer.getvalue()

    def check(self, candidates: Sequence[Any]) -> list[Outcome]:
        return self._run(self.check_fn, candidates, self.workers)

    def measure(self, options: Any, cutoff_ms: float | None = None) -> Outcome:
        kw = cutoff_kwargs(self.measure_fn, cutoff_ms)
        return self._run(self.measure_fn, [options], 1, kw)[0]

    def compare(self, a: Any, b: Any) -> Outcome:
        if self.measure_fn is J.measure:
            return self._run(J.measure_pair, [(a, b)], 1)[0]
        return compare_by_measures(self.measure, a, b)

    def close(self) -> None:
        for worker in self._pool:
            worker.kill()
        self._pool = []

    def _idle(self, options: Any) -> _Worker | None:
        """A ready worker without a task, preferring one that compiled `options`."""
        idle = [w for w in self._pool if w.ready and w.task is None]
        return next((w for w in idle if options in w.seen), idle[0] if idle else None)

    def _run(
        self,
        fn: TaskFn,
        candidates: Sequence[Any],
        width: int,
        kw: Mapping[str, Any] | None = None,
    ) -> list[Outcome]:
        if self._job_frame is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        results: dict[int, Outcome] = {}
        pending = list(range(len(candidates)))
        while pending or any(w.task for w in self._pool):
            while len(self._pool) < self.workers:
                self._pool.append(_Worker(self._job_frame))
            busy = sum(w.task is not None for w in self._pool)
            while pending and busy < width:
                worker = self._idle(candidates[pending[0]])
                if worker is None:
                    break
                i = pending.pop(0)
                try:
                    worker.submit(fn, i, candidates[i], kw or {})
                except OSError:  # it died idle: the read below reports it
                    pass
                busy += 1
            self._wait(candidates, results)
        return [results[i] for i in range(len(candidates))]

    def _wait(self, candidates: Sequence[Any], results: dict[int, Outcome]) -> None:
        """Wait for one worker to answer or a deadline; record what happened."""
        waiting = [w for w in self._pool if w.task is not None or not w.ready]
        if not waiting:
            return
        deadlines = [(w.task[1] if w.task else w.started) + self.timeout_s for w in waiting]
        ready, _, _ = select.select(waiting, [], [], max(0.0, min(deadlines) - time.monotonic()))
        for worker in ready:
            try:
                answer = worker.read()
            except (EOFError, OSError, pickle.UnpicklingError):
                self._drop(worker, candidates, results, "crashed: its worker process died")
                continue
            if not worker.ready:
                worker.ready = True
            elif worker.task is not None:
                results[worker.task[0]] = answer
                worker.task = None
        now = time.monotonic()
        for worker, deadline in zip(waiting, deadlines, strict=True):
            if worker not in ready and now >= deadline and worker in self._pool:
                self._drop(worker, candidates, results, f"timed out after {self.timeout_s:g} s")

    def _drop(
        self, worker: _Worker, candidates: Sequence[Any], results: dict[int, Outcome], why: str
    ) -> None:
        worker.kill()
        self._pool.remove(worker)
        if worker.task is not None:
            i = worker.task[0]
            results[i] = Outcome(candidates[i], False, why)
        elif not worker.ready:
            raise OptionsError(f"a tuning worker process could not start ({why})")


# ------------------------------------------------------------------------- Ray


def _ray_task(fn: TaskFn, job: TuneJob, options: Any, kw: Mapping[str, Any]) -> Outcome:
    return guarded(fn, job, options, **kw)


class RayExecutor:
    """Candidates as Ray tasks (see the module doc). `address`: "auto" joins a running
    cluster, an address joins that one, None starts a local instance (`init_kwargs`,
    e.g. num_cpus=2); an already initialised Ray is used as it is. `measure_resources`
    (Ray custom resources, e.g. `{"node:10.0.0.5": 0.01}`) sends the timing tasks to the
    machine class that will run the kernel; checks go anywhere."""

    def __init__(
        self,
        address: str | None = "auto",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        check_fn: TaskFn = J.check,
        measure_fn: TaskFn = J.measure,
        measure_resources: Mapping[str, float] | None = None,
        **init_kwargs: Any,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise OptionsError(
                "the Ray executor needs ray, which is not installed",
                hint="pip install 'tcc[ray]' (or pip install ray)",
            ) from None
        self._ray = ray
        if not ray.is_initialized():
            try:
                ray.init(address=address, **init_kwargs)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise OptionsError(
                    f"cannot start or join Ray at {address or 'a new local instance'}: {err}",
                    hint="start a cluster (`ray start --head`) or pass its address",
                ) from None
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.timeout_s = float(timeout_s)
        self.check_fn, self.measure_fn = check_fn, measure_fn
        self._remote = ray.remote(max_retries=0)(_ray_task)
        self._timer = (
            self._remote
            if measure_resources is None
            else self._remote.options(resources=dict(measure_resources))
        )
        self._job_ref: Any = None

    def start(self, job: TuneJob) -> None:
        self._job_ref = self._ray.put(job)

    def check(self, candidates: Sequence[Any]) -> list[Outcome]:
        return self._run(self._remote, self.check_fn, candidates)

    def measure(self, options: Any, cutoff_ms: float | None = None) -> Outcome:
        kw = cutoff_kwargs(self.measure_fn, cutoff_ms)
        return self._run(self._timer, self.measure_fn, [options], kw)[0]

    def compare(self, a: Any, b: Any) -> Outcome:
        if self.measure_fn is J.measure:
            return self._run(self._timer, J.measure_pair, [(a, b)])[0]
        return compare_by_measures(self.measure, a, b)

    def close(self) -> None:
        self._job_ref = None

    def _run(
        self,
        remote: Any,
        fn: TaskFn,
        candidates: Sequence[Any],
        kw: Mapping[str, Any] | None = None,
    ) -> list[Outcome]:
        ray = self._ray
        if self._job_ref is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        refs = [remote.remote(fn, self._job_ref, c, dict(kw or {})) for c in candidates]
        index = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, Outcome] = {}
        deadline = time.monotonic() + self.timeout_s * max(1, -(-len(refs) // self.workers))
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(
                waiting, num_returns=1, timeout=max(0.0, deadline - time.monotonic())
            )
            if not ready:
                for ref in waiting:
                    ray.cancel(ref, force=True)
                    i = index[ref]
                    results[i] = Outcome(
                        candidates[i], False, f"timed out after {self.timeout_s:g} s"
                    )
                break
            for ref in ready:
                i = index[ref]
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayError as err:
                    reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
                    results[i] = Outcome(candidates[i], False, f"crashed: {reason[:200]}")
        return [results[i] for i in range(len(candidates))]


def make_executor(spec: object, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """`autotune(executor=...)`: None the local worker processes, "ray" or
    "ray:ADDRESS" a Ray cluster, or an executor object itself."""
    if spec is None or spec == "local":
        return LocalExecutor(timeout_s=timeout_s)
    if isinstance(spec, str) and (spec == "ray" or spec.startswith("ray:")):
        address = spec.partition(":")[2] or "auto"
        return RayExecutor(address, timeout_s)
    if all(hasattr(spec, m) for m in ("start", "check", "measure", "close")):
        return spec
    raise OptionsError(
        f"executor= must be None, 'local', 'ray', 'ray:ADDRESS' or an executor, got {spec!r}",
        hint="see compiler.tune.executors",
    )


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Executor",
    "InlineExecutor",
    "LocalExecutor",
    "RayExecutor",
    "call_measure",
    "cutoff_kwargs",
    "make_executor",
]
