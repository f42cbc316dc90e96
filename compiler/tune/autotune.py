"""`compiler.autotune`: search a def's Options for these inputs, check every candidate, keep the winner.

    result = autotune(source, "mm", A, B, budget=60)      # or budget="2m", candidates=40
    result.options, result.time_ms, result.default_ms, result.speedup
    result.trials                                          # every candidate, with its reason
    k = compiler.define(source, "mm", options="tuned")     # uses the cached winner

Order of a run:
1. The model default is compiled here and run once: its outputs are the expectation;
   on small sizes (inputs and outputs up to `SMALL` elements) the reference evaluator
   (`target="interp"`) runs too, and the default must agree with it.
2. Generations of candidates (`compiler.tune.search`: the default, the cached winner if
   any, random samples; then children of the fastest and random restarts) are checked
   in parallel by the executor (`compiler.tune.executors`: compile, run once, compare
   with every expectation); a candidate whose compiled code equals an earlier one's
   shares its result untimed, the others are timed one at a time (medians of blocks,
   `compiler.tune.job`), a slow one stopped after its first block
   (`compiler.tune.generations`). A candidate that fails to compile, crashes, times
   out or differs is recorded with its reason and never chosen.
3. The budget (seconds and/or candidates) ends the search between candidates.
4. Confirmation: the best candidate and the default are timed again in one task,
   interleaved block by block (15 blocks each); the reported times are the medians of
   those blocks, and the tuned options win only when their gain exceeds the noise of
   the comparison (`compiler.tune.verdict`); otherwise the default stays, and
   `TuneResult.verdict` / the summary say why.
5. The winner goes to the tuned-options cache (`compiler.tune.store`), keyed by the
   def's canonical text, the input shapes and dtypes, target, host CPU and tcc version.

The candidates tried depend only on `seed`, the recorded times and the cache (a cached
winner joins the first generation), so a run is reproducible given the same timings:
the tests check that with a deterministic fake timer.

`grad=True` tunes the def's gradient (`Kernel.grad`'s def) on the example inputs, the
forward outputs and output gradients drawn from `seed`.
"""

from __future__ import annotations

import math
import re
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.diagnostics import InternalError, OptionsError
from compiler.options import Options
from compiler.tune.executors import DEFAULT_TIMEOUT_S, make_executor
from compiler.tune.generations import EARLY_STOP, Generations, Trial, TuneError
from compiler.tune.job import TuneJob, compare
from compiler.tune.search import Evolution
from compiler.tune.space import Space, SpaceContext, describe
from compiler.tune.store import OptionsStore, tune_key
from compiler.tune.verdict import Verdict

SMALL = 1 << 16  # elements of inputs and outputs up to which interp checks too
OPTIONS_TYPES: dict[str, type] = {"llvm": Options}
PRELOAD = ("torch",)  # imported by the workers too when the caller imported them


@dataclass(frozen=True)
class TuneResult:
    """The outcome of `autotune` (times in milliseconds, medians of blocks).

    Attributes:
        name (str): the def tuned.
        target (str): the target tuned for.
        options (Options): the winner (the default when nothing beat it).
        time_ms (float): the winner's time in the final comparison.
        default_ms (float): the default's time in the same comparison.
        trials (tuple[Trial, ...]): every candidate, with its time or why it failed.
        elapsed_s (float): the search's wall time.
        key (str): the tuned-options cache key (def text, shapes, dtypes, target, CPU).
        cache_path (str | None): the tuned-options file the winner was saved to.
        searched (tuple[str, ...]): the Options fields the search varied.
        verdict (Verdict | None): the final comparison: gain, noise, why the winner won.
    """

    name: str
    target: str
    options: Any
    time_ms: float
    default_ms: float
    trials: tuple[Trial, ...]
    elapsed_s: float
    key: str
    cache_path: str | None
    searched: tuple[str, ...]
    verdict: Verdict | None = None

    @property
    def speedup(self) -> float:
        """`default_ms / time_ms`: above 1, the tuned options are faster."""
        return self.default_ms / self.time_ms if self.time_ms > 0 else 1.0

    @property
    def tried(self) -> int:
        return len(self.trials)

    @property
    def failed(self) -> tuple[Trial, ...]:
        return tuple(t for t in self.trials if not t.ok)

    @property
    def duplicates(self) -> int:
        """Candidates whose code equalled an earlier one's (not timed again)."""
        return sum(t.duplicate_of is not None for t in self.trials)

    @property
    def stopped(self) -> int:
        """Candidates stopped after one timed block (slower than EARLY_STOP x the best)."""
        return sum(t.stopped for t in self.trials)

    def summary(self) -> str:
        """A few lines: default and best time, speedup, failures by reason, the cache."""
        lines = [
            f"def {self.name} ({self.target}): {self.tried} candidates, "
            f"{len(self.failed)} failed, {self.elapsed_s:.1f} s",
            f"  {self.duplicates} with the code of an earlier candidate (not timed again), "
            f"{self.stopped} stopped early (first block slower than x{EARLY_STOP:g} the best)",
            f"  default  {self.default_ms:10.4f} ms  {describe(Options())}",
            f"  best     {self.time_ms:10.4f} ms  {describe(self.options)}  (x{self.speedup:.2f})",
        ]
        if self.verdict is not None:
            lines.append(f"  final: {self.verdict.why}")
        reasons: dict[str, int] = {}
        for t in self.failed:
            reasons[t.reason] = reasons.get(t.reason, 0) + 1
        lines += [f"  failed x{n}: {r}" for r, n in sorted(reasons.items())]
        if self.cache_path:
            lines.append(f"  saved to {self.cache_path}")
        return "\n".join(lines)


def parse_budget(budget: object) -> float | None:
    """Seconds from 60, 1.5, "90s", "2m", "1h" (None: no time limit)."""
    if budget is None:
        return None
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        seconds = float(budget)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|m|min|h)?\s*", str(budget))
        if m is None:
            raise OptionsError(
                f"budget must be seconds (60, '90s', '2m', '1h'), got {budget!r}",
                hint="e.g. budget='60s' or candidates=40",
            )
        unit = {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
        seconds = float(m.group(1)) * unit
    if not seconds > 0 or math.isinf(seconds):
        raise OptionsError(f"budget must be a positive number of seconds, got {budget!r}")
    return seconds


def autotune(
    source: str,
    name: str | None = None,
    *example_inputs: Any,
    target: str = "llvm",
    budget: object = 60.0,
    candidates: int | None = None,
    cache: object = True,
    progress: bool = True,
    seed: int = 0,
    grad: bool = False,
    executor: object = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    constants: Mapping[str, object] | None = None,
) -> TuneResult:
    """Tune def `name` of `source` for `example_inputs` (see the module doc).

    Args:
        source (str): TC source text.
        name (str | None): the def; None: the only one.
        *example_inputs: one array per input, of the shapes to tune for.
        target (str): `"llvm"`.
        budget (float | str | None): seconds (`60`, `"90s"`, `"2m"`); None: no limit
            (then `candidates` is required).
        candidates (int | None): stop after this many candidates.
        cache (bool | str | os.PathLike): where the tuned-options JSON lives (True: the
            compile cache directory; False: keep nothing).
        progress (bool): a progress bar on stderr when it is a terminal.
        seed (int): the search's and the random gradient inputs' seed.
        grad (bool): tune the gradient def on these inputs instead.
        executor (object): None (local worker processes), `"ray"`, or an executor
            (`LocalExecutor`, `RayExecutor`, `InlineExecutor`).
        timeout_s (float): seconds a candidate may take before it is a failure.
        constants (Mapping[str, object] | None): values for `{name}` placeholders.

    Returns:
        TuneResult: the winner and every trial.

    Raises:
        OptionsError: no budget, or a bad one.
        TuneError: the default itself fails its checks.

    Example:
        ```python
        result = compiler.autotune(MM, "mm", A, B, candidates=6)
        print(result.summary())
        ```
    """
    started = time.perf_counter()
    seconds = parse_budget(budget)
    if candidates is not None and (
        isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1
    ):
        raise OptionsError(f"candidates must be a positive int or None, got {candidates!r}")
    if seconds is None and candidates is None:
        raise OptionsError("autotune needs a budget: seconds, candidates, or both")
    options_type = _options_type(target)
    kernel, inputs = _prepare(source, name, example_inputs, target, cache, grad, seed, constants)
    key, components = tune_key(
        kernel.text, kernel.name, [a.shape for a in inputs], [str(a.dtype) for a in inputs], target
    )
    store = OptionsStore.resolve(cache)
    cached = store.get(key, options_type)
    space = Space.for_options(options_type, SpaceContext.of(kernel.ranged, _sizes(kernel, inputs)))
    runner = make_executor(executor, timeout_s)
    search = Generations(
        runner, Evolution(space, seed), options_type(), started, seconds, candidates
    )
    with _progress_bar(progress, candidates, kernel.name) as bar:
        search.bar = bar
        runner.start(_job(kernel, inputs, key))
        try:
            search.run(() if cached is None else (cached,))
            winner, verdict = search.confirm()
        finally:
            runner.close()
    default_ms = verdict.default_ms
    time_ms = verdict.best_ms if verdict.keep else default_ms
    facts = {
        "time_ms": time_ms,
        "default_ms": default_ms,
        "candidates": len(search.trials),
        "duplicates": search.duplicates,
        "stopped": search.stopped,
        "gain": verdict.gain,
        "noise": verdict.noise,
    }
    store.put(key, components, winner, name=kernel.name, **facts)
    return TuneResult(
        kernel.name,
        target,
        winner,
        time_ms,
        default_ms,
        tuple(search.trials),
        time.perf_counter() - started,
        key,
        None if store.path is None else str(store.path),
        space.searched,
        verdict,
    )


def _job(kernel: Any, inputs: tuple[np.ndarray, ...], key: str) -> TuneJob:
    """What the workers need: the def, the inputs, the expected outputs, the cache dir."""
    directory = getattr(kernel.cache, "directory", None)
    return TuneJob(
        f"{key[:16]}-{uuid.uuid4().hex[:8]}",
        kernel.text,
        kernel.name,
        kernel.target,
        inputs,
        _expectations(kernel, inputs),
        cache_dir=None if directory is None else str(directory),
        preload=tuple(m for m in PRELOAD if m in sys.modules),
    )


def _sizes(kernel: Any, inputs: tuple[np.ndarray, ...]) -> dict[str, int]:
    from compiler.shapes import bind_sizes

    infos = kernel.ranged.checked.inputs
    return dict(
        bind_sizes(kernel.ranged, {t.name: a.shape for t, a in zip(infos, inputs, strict=True)})
    )


def _options_type(target: str) -> type:
    found = OPTIONS_TYPES.get(target)
    if found is None:
        raise OptionsError(
            f"autotune: target '{target}' has no tunable Options here; tunable: "
            f"{', '.join(OPTIONS_TYPES)}",
            hint="target='interp' is the reference evaluator and has nothing to tune",
        )
    return found


# ------------------------------------------------------------------ preparation


def _prepare(
    source: str,
    name: str | None,
    example_inputs: Sequence[Any],
    target: str,
    cache: object,
    grad: bool,
    seed: int,
    constants: Mapping[str, object] | None,
) -> tuple[Any, tuple[np.ndarray, ...]]:
    """The default kernel (of the gradient def with `grad`) and its inputs."""
    from compiler.kernel import Kernel

    compile_cache = _compile_cache(cache)
    kernel = Kernel(source, name, constants=constants, target=target, cache=compile_cache)
    kernel.output_shapes(*example_inputs)  # count, ranks, dtypes, sizes: the kernel's errors
    infos = kernel.ranged.checked.inputs
    inputs = tuple(_as_array(t, a) for t, a in zip(infos, example_inputs, strict=True))
    if not grad:
        return kernel, inputs
    from compiler.backward import gradient_source

    gradient = Kernel(gradient_source(kernel), target=target, cache=compile_cache)
    return gradient, _gradient_inputs(kernel, gradient, inputs, seed)


def _compile_cache(cache: object) -> object:
    """The compile cache the tuner's kernels use: the directory of `cache=` when it names
    one (a *.json file: its directory), else the default."""
    from pathlib import Path

    if isinstance(cache, (str, Path)):
        path = Path(cache).expanduser()
        return str(path.parent if path.suffix == ".json" else path)
    return True


def _as_array(info: Any, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value) if value.ndim else value
    from compiler.interp.expr import NP_DTYPE

    if info.rank == 0 and isinstance(value, (int, float, bool, np.generic)):
        return np.asarray(value, dtype=NP_DTYPE[info.dtype])
    return value  # the kernel's own check reports it


def _gradient_inputs(
    forward: Any, gradient: Any, inputs: tuple[np.ndarray, ...], seed: int
) -> tuple[np.ndarray, ...]:
    """The gradient def's parameters by name: forward inputs, forward outputs, and
    `<output>_grad` drawn from `seed`."""
    from compiler.interp.expr import NP_DTYPE

    rng = np.random.default_rng(seed)
    checked = forward.ranged.checked
    values: dict[str, np.ndarray] = {t.name: a for t, a in zip(checked.inputs, inputs, strict=True)}
    params = [t.name for t in gradient.ranged.checked.inputs]
    if any(t.name in params for t in checked.outputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values |= dict(zip((t.name for t in checked.outputs), forward(*inputs), strict=True))
    shapes = forward.output_shapes(*inputs)
    for t in checked.outputs:
        values[f"{t.name}_grad"] = rng.standard_normal(shapes[t.name]).astype(NP_DTYPE[t.dtype])
    missing = [p for p in params if p not in values]
    if missing:
        raise InternalError(f"gradient def parameter(s) {missing} are not inputs, outputs or grads")
    return tuple(values[p] for p in params)


def _expectations(kernel: Any, inputs: tuple[np.ndarray, ...]) -> tuple[tuple[Any, ...], ...]:
    """The default's outputs, and the reference evaluator's on small sizes."""
    from compiler.kernel import Kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = tuple(kernel(*inputs))
        if sum(a.size for a in (*inputs, *default)) > SMALL:
            return (default,)
        reference = tuple(Kernel(kernel.text, kernel.name, target="interp")(*inputs))
    problem = compare(default, reference)
    if problem:
        raise InternalError(
            f"def '{kernel.name}': the default schedule's outputs differ from the "
            f"reference evaluator's ({problem}); please report"
        )
    return (default, reference)


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def set_postfix_str(self, text: str) -> None:
        return None


def _progress_bar(enabled: bool, total: int | None, name: str) -> Any:
    """A tqdm bar on stderr when enabled and stderr is a terminal; else a silent one."""
    if not enabled or not sys.stderr.isatty():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # a declared dependency, but tuning works without it
        return _NoBar()
    return tqdm(total=total, desc=f"tune {name}", unit="cand", file=sys.stderr, leave=True)


__all__ = ["SMALL", "TuneError", "TuneResult", "Trial", "autotune", "parse_budget"]
