"""Where candidates are compiled, checked and timed: the executor interface and its backends.

    executor = LocalExecutor(workers=2, timeout_s=60)   # worker processes (the default)
    executor = RayExecutor("auto")                     # a Ray cluster (pip install 'tcc[ray]')
    executor = InlineExecutor()                        # this process (tests, debugging)
    executor.start(job)
    outcomes = executor.check([opts, ...])             # in parallel, one Outcome each, in order
    outcome = executor.measure(opts)                   # alone: nothing else runs meanwhile
    executor.close()

An executor never raises for a candidate: a candidate that fails to compile, raises,
crashes its worker or runs past `timeout_s` comes back as an Outcome with `ok=False` and
the reason. `check` runs candidates in parallel (compiling is most of the cost);
`measure` runs one candidate while no other task runs, so timings do not disturb each
other. The task functions (`check_fn`, `measure_fn`: `compiler.tune.job.check` and
`.measure` unless given) are module-level functions, passed by reference.

LocalExecutor: a `concurrent.futures` process pool, `spawn`ed (a forked child of a
process that ran OpenMP code can hang). At most `workers` tasks are submitted at once, so
each task's clock starts when it does. A task past its deadline is reported as timed
out and the pool is killed (these are our own processes) and restarted; the tasks that
were running beside it run again. A worker that dies breaks every running task's
future: those candidates are re-run one at a time, and the one that breaks a pool alone
is reported as crashed.

RayExecutor: one Ray task per candidate (`max_retries=0`), the job put in the object
store once; `check` submits every candidate, `measure` one; a task past its deadline is
cancelled (`force=True`), a dead worker is reported as crashed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from compiler.frontend.diagnostics import OptionsError
from compiler.tune import job as J
from compiler.tune.job import Outcome, TuneJob

TaskFn = Callable[[TuneJob, Any], Outcome]
DEFAULT_TIMEOUT_S = 120.0


class Executor(Protocol):
    """Runs candidate tasks of one job (see the module doc)."""

    workers: int

    def start(self, job: TuneJob) -> None: ...

    def check(self, candidates: Sequence[Any]) -> list[Outcome]: ...

    def measure(self, options: Any) -> Outcome: ...

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
        return [_guarded(self.check_fn, self._require(), c) for c in candidates]

    def measure(self, options: Any) -> Outcome:
        return _guarded(self.measure_fn, self._require(), options)

    def close(self) -> None:
        if self._job is not None:
            J.forget(self._job.key)
        self._job = None

    def _require(self) -> TuneJob:
        if self._job is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        return self._job


def _guarded(fn: TaskFn, job: TuneJob, options: Any) -> Outcome:
    try:
        return fn(job, options)
    except Exception as err:
        return Outcome(options, False, f"task failed: {type(err).__name__}: {err}")


# ------------------------------------------------------------------ local processes

_WORKER_JOB: TuneJob | None = None


def _install(job: TuneJob) -> None:
    global _WORKER_JOB
    _WORKER_JOB = job


def _task(fn: TaskFn, options: Any) -> Outcome:
    assert _WORKER_JOB is not None, "worker started without a job"
    return _guarded(fn, _WORKER_JOB, options)


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
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise OptionsError(f"workers must be a positive int, got {workers!r}")
        if not timeout_s > 0:
            raise OptionsError(f"timeout_s must be positive, got {timeout_s!r}")
        self.workers = workers or max(1, min(os.cpu_count() or 1, 8))
        self.timeout_s = float(timeout_s)
        self.check_fn, self.measure_fn = check_fn, measure_fn
        self._job: TuneJob | None = None
        self._pool: ProcessPoolExecutor | None = None

    def start(self, job: TuneJob) -> None:
        self.close()
        self._job = job

    def check(self, candidates: Sequence[Any]) -> list[Outcome]:
        return self._run(self.check_fn, candidates, self.workers)

    def measure(self, options: Any) -> Outcome:
        return self._run(self.measure_fn, [options], 1)[0]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._job is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        if self._pool is None:
            import multiprocessing

            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_install,
                initargs=(self._job,),
            )
        return self._pool

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()  # our own worker processes, by their handles
        pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, fn: TaskFn, candidates: Sequence[Any], width: int) -> list[Outcome]:
        results: dict[int, Outcome] = {}
        pending = list(enumerate(candidates))
        suspects: set[int] = set()  # were running when a worker died
        running: dict[Future[Outcome], tuple[int, float]] = {}
        while pending or running:
            pool = self._ensure_pool()
            limit = 1 if suspects & {i for i, _ in pending} else width
            while pending and len(running) < limit:
                i, options = pending.pop(0)
                running[pool.submit(_task, fn, options)] = (i, time.monotonic())
            first_deadline = min(start for _, start in running.values()) + self.timeout_s
            done, _ = wait(
                running, timeout=max(0.0, first_deadline - time.monotonic()),
                return_when=FIRST_COMPLETED,
            )  # fmt: skip
            broken: list[int] = []
            for future in done:
                i, _ = running.pop(future)
                try:
                    results[i] = future.result()
                except BrokenProcessPool:
                    broken.append(i)
                except Exception as err:  # e.g. an unpicklable result
                    results[i] = Outcome(candidates[i], False, f"task failed: {err}")
            if broken:
                self._kill_pool()
                broken += [i for i, _ in running.values()]
                running.clear()
                if len(broken) == 1:
                    results[broken[0]] = Outcome(
                        candidates[broken[0]], False, "crashed: its worker process died"
                    )
                else:
                    suspects.update(broken)
                    pending[:0] = [(i, candidates[i]) for i in sorted(broken)]
                continue
            now = time.monotonic()
            late = [f for f, (_, start) in running.items() if now - start >= self.timeout_s]
            if late:
                for f in late:
                    i, _ = running.pop(f)
                    results[i] = Outcome(
                        candidates[i], False, f"timed out after {self.timeout_s:g} s"
                    )
                self._kill_pool()
                pending[:0] = [(i, candidates[i]) for i, _ in sorted(running.values())]
                running.clear()
        return [results[i] for i in range(len(candidates))]


# ------------------------------------------------------------------------- Ray


def _ray_task(fn: TaskFn, job: TuneJob, options: Any) -> Outcome:
    return _guarded(fn, job, options)


class RayExecutor:
    """Candidates as Ray tasks (see the module doc). `address`: "auto" joins a running
    cluster, an address joins that one, None starts a local instance (`init_kwargs`,
    e.g. num_cpus=2); an already initialised Ray is used as it is."""

    def __init__(
        self,
        address: str | None = "auto",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        check_fn: TaskFn = J.check,
        measure_fn: TaskFn = J.measure,
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
            ray.init(address=address, **init_kwargs)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.timeout_s = float(timeout_s)
        self.check_fn, self.measure_fn = check_fn, measure_fn
        self._remote = ray.remote(max_retries=0)(_ray_task)
        self._job_ref: Any = None

    def start(self, job: TuneJob) -> None:
        self._job_ref = self._ray.put(job)

    def check(self, candidates: Sequence[Any]) -> list[Outcome]:
        return self._run(self.check_fn, candidates)

    def measure(self, options: Any) -> Outcome:
        return self._run(self.measure_fn, [options])[0]

    def close(self) -> None:
        self._job_ref = None

    def _run(self, fn: TaskFn, candidates: Sequence[Any]) -> list[Outcome]:
        ray = self._ray
        if self._job_ref is None:
            raise OptionsError("executor.start(job) must come before its tasks")
        refs = [self._remote.remote(fn, self._job_ref, c) for c in candidates]
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
    "make_executor",
]
