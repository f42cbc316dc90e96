"""The autotuner: search a def's schedule Options per input size, check every candidate,
cache the winners (issue 13).

    result = compiler.autotune(source, "mm", A, B, budget="60s")
    k = compiler.define(source, "mm", options="tuned")     # the cached winner per shape

Modules, in the order a run uses them: `space` (one search entry per Options field),
`search` (the evolutionary search), `job` (what a worker does with a candidate: check,
time), `executors` (local worker processes, Ray, inline), `store` (the tuned-options
JSON cache), `autotune` (the driver), `tuned` (`define(..., options="tuned")`), `cli`
(`tcc tune`).
"""

from __future__ import annotations

from compiler.tune.autotune import Trial, TuneError, TuneResult, autotune
from compiler.tune.executors import InlineExecutor, LocalExecutor, RayExecutor

__all__ = [
    "InlineExecutor",
    "LocalExecutor",
    "RayExecutor",
    "Trial",
    "TuneError",
    "TuneResult",
    "autotune",
]
