"""The generation loop of one tuning run: check, deduplicate, time (stopping slow ones
early), and the final interleaved comparison with the default.

Requires: an executor that was `start`ed on the job, an `Evolution`, the default Options.
Ensures:  `Generations.run(seeds)` fills `trials` (one `Trial` per candidate, in the
          order they were recorded) until the budget ends; `confirm()` returns the
          winner and the `Verdict` (`compiler.tune.verdict`): the default unless the
          best candidate's gain over it exceeds the noise.

Per candidate, in order:
1. checked by the executor, in parallel with its generation (compile, run once, compare);
2. a candidate whose code hash (`Outcome.code`, `compiler.tune.job.code_hash`) equals an
   earlier candidate's is a *duplicate*: it is not timed, it gets that candidate's
   result (`Trial.duplicate_of`, its index in `trials`);
3. otherwise it is timed alone, with the *early stop*: once a candidate has a time, a
   new one whose first timed block is slower than `EARLY_STOP` x the best median so far
   is not timed further (`Trial.stopped`; its time is that block's, and it can still be
   a parent, a slow one);
4. the default (always the first candidate) is never stopped and never a duplicate.

Worked example: with the default at 2.0 ms, a candidate whose first block takes 4.5 ms a
call stops there (4.5 > 2 x 2.0); a candidate with `threads=2` on a 2-core machine
compiles to the default's code (`threads=None` means 2 there): a duplicate, 2.0 ms.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compiler.diagnostics import TCError
from compiler.tune.executors import call_measure, compare_by_measures
from compiler.tune.job import Outcome
from compiler.tune.search import Evolution
from compiler.tune.verdict import Verdict, decide

EARLY_STOP = 2.0  # a first block slower than this x the best median so far stops


class TuneError(TCError):
    """Tuning cannot proceed (e.g. the default options fail on these inputs)."""


@dataclass(frozen=True)
class Trial:
    """One candidate: whether it passed, why not, and its median time.

    `code`: the hash of its compiled code (None where the executor gave none);
    `duplicate_of`: the index of the earlier trial with the same code, whose result it
    shares (it was not timed); `stopped`: timed for one block only (too slow)."""

    options: Any
    ok: bool
    reason: str = ""
    time_ms: float | None = None
    compile_s: float = 0.0
    code: str | None = None
    duplicate_of: int | None = None
    stopped: bool = False


class Generations:
    """The generation loop of one run (see the module doc)."""

    def __init__(
        self,
        runner: Any,
        evo: Evolution,
        default: Any,
        started: float,
        seconds: float | None,
        candidates: int | None,
    ) -> None:
        self.runner, self.evo, self.default = runner, evo, default
        self.deadline = None if seconds is None else started + seconds
        self.limit = candidates if candidates is not None else 1 << 30
        self.trials: list[Trial] = []
        self.codes: dict[str, int] = {}  # code hash -> the first trial with it
        self.default_ms: float | None = None
        self.bar: Any = None

    def _out_of_budget(self) -> bool:
        late = self.deadline is not None and time.perf_counter() >= self.deadline
        return late or len(self.trials) >= self.limit

    def run(self, seeds: Sequence[Any]) -> None:
        size = max(4, 2 * int(getattr(self.runner, "workers", 1)))
        batch = self.evo.first(self.default, min(size, self.limit), seeds)
        while batch:
            for outcome in self.runner.check(batch):
                if self.default_ms is not None and self._out_of_budget():
                    return
                self._record(outcome)
            if self._out_of_budget():
                return
            batch = self.evo.propose(min(size, self.limit - len(self.trials)))

    @property
    def duplicates(self) -> int:
        return sum(t.duplicate_of is not None for t in self.trials)

    @property
    def stopped(self) -> int:
        return sum(t.stopped for t in self.trials)

    def _record(self, checked: Outcome) -> None:
        first = self.codes.get(checked.code) if checked.ok and checked.code else None
        if first is not None:
            same = self.trials[first]
            trial = Trial(
                checked.options, same.ok, same.reason, same.time_ms, checked.compile_s,
                checked.code, first, same.stopped,
            )  # fmt: skip
        else:
            trial = self._timed(checked)
            if checked.ok and checked.code:
                self.codes[checked.code] = len(self.trials)
        if checked.options == self.default:
            if not trial.ok:
                raise TuneError(
                    f"the default options fail on these inputs: {trial.reason}",
                    hint="check the def with compiler.define(...) on the same inputs",
                )
            self.default_ms = trial.time_ms
        self.trials.append(trial)
        self.evo.record(trial.options, trial.time_ms)
        self._progress()

    def _timed(self, checked: Outcome) -> Trial:
        """The trial of a checked candidate: timed (with the early stop), or its failure."""
        if not checked.ok:
            return Trial(checked.options, False, checked.reason, None, checked.compile_s)
        best = self.best()
        cutoff = None if best is None or checked.options == self.default else best.time_ms
        outcome = call_measure(self.runner, checked.options, _times(cutoff, EARLY_STOP))
        time_ms = outcome.median_ms if outcome.ok else None
        return Trial(
            checked.options, outcome.ok, outcome.reason, time_ms, checked.compile_s,
            checked.code, None, outcome.ok and outcome.stopped,
        )  # fmt: skip

    def _progress(self) -> None:
        if self.bar is None:
            return
        best = self.best()
        self.bar.update(1)
        if best is not None and self.default_ms:
            self.bar.set_postfix_str(
                f"best {best.time_ms:.3g} ms, x{self.default_ms / best.time_ms:.2f}, "
                f"same code {self.duplicates}, stopped {self.stopped}, "
                f"failed {sum(not t.ok for t in self.trials)}"
            )

    def best(self) -> Trial | None:
        """The fastest timed trial (a stopped one has only one block: never the best
        unless nothing else was timed)."""
        timed = [t for t in self.trials if t.time_ms is not None]
        full = [t for t in timed if not t.stopped] or timed
        return min(full, key=lambda t: t.time_ms) if full else None  # type: ignore[arg-type,return-value]

    def confirm(self) -> tuple[Any, Verdict]:
        """The winner and the verdict of the final interleaved comparison (the module doc)."""
        best = self.best()
        assert best is not None and self.default_ms is not None
        d = self.default_ms
        default_code = self.trials[0].code if self.trials else None
        if best.options == self.default:
            return self.default, Verdict(False, d, d, 0.0, 0.0, 0, "the default was the fastest")
        if best.code is not None and best.code == default_code:
            why = "the fastest candidate compiles to the default's code"
            return self.default, Verdict(False, d, d, 0.0, 0.0, 0, why)
        compare = getattr(self.runner, "compare", None)
        if compare is not None:
            outcome = compare(self.default, best.options)
        else:
            outcome = compare_by_measures(self.runner.measure, self.default, best.options)
        if not outcome.ok:  # it passed before: flaky, so never the winner
            why = f"kept the default: the final comparison failed ({outcome.reason})"
            return self.default, Verdict(False, d, d, 0.0, 0.0, 0, why)
        verdict = decide(outcome.times_ms, outcome.other_ms)
        return (best.options if verdict.keep else self.default), verdict


def _times(ms: float | None, factor: float) -> float | None:
    return None if ms is None else ms * factor


__all__ = ["EARLY_STOP", "Generations", "Trial", "TuneError"]
