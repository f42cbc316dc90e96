"""The evolutionary search: which candidates to try next, given the times so far.

    evo = Evolution(space, seed=0)
    batch = evo.first(default, n=6, seeds=(cached_winner,))   # default, seeds, random restarts
    evo.record(options, time_ms)                               # None: failed (never a parent)
    batch = evo.propose(n=6)                                   # children and random restarts

A generation is `n` new candidates (never one tried before). A child comes from the
population of timed candidates (the fastest `ELITE`): two tournament winners (each the
faster of two random members) are crossed (each field from either parent) half of the
time, otherwise one is copied, and the child is mutated (one or two fields). A share
`restart` of each generation are fresh random samples, so the search does not settle
in the default's neighbourhood. All randomness comes from one `random.Random(seed)`:
the same seed and the same recorded times give the same candidates.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from compiler.tune.space import Space

ELITE = 8
_ATTEMPTS = 64


class Evolution:
    """The search state: what was tried, what was timed (see the module doc)."""

    def __init__(self, space: Space, seed: int = 0, restart: float = 0.25) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.restart = restart
        self.seen: set[Any] = set()
        self.timed: list[tuple[float, int, Any]] = []  # (ms, order, options)

    def first(self, default: Any, n: int, seeds: Iterable[Any] = ()) -> list[Any]:
        """The first generation: the default, the seeds, then random samples."""
        batch = []
        for options in (default, *seeds):
            if options not in self.seen:
                self.seen.add(options)
                batch.append(options)
        while len(batch) < n:
            options = self._fresh(lambda: self.space.sample(self.rng))
            if options is None:
                break
            batch.append(options)
        return batch

    def record(self, options: Any, time_ms: float | None) -> None:
        """The time of a candidate (None: it failed and never becomes a parent)."""
        self.seen.add(options)
        if time_ms is not None:
            self.timed.append((time_ms, len(self.timed), options))
            self.timed.sort(key=lambda t: (t[0], t[1]))

    def propose(self, n: int) -> list[Any]:
        """The next generation (fewer than `n` when the space is nearly exhausted)."""
        batch = []
        for _ in range(n):
            options = self._fresh(self._child)
            if options is None:
                break
            batch.append(options)
        return batch

    def _child(self) -> Any:
        if not self.timed or self.rng.random() < self.restart:
            return self.space.sample(self.rng)
        a = self._tournament()
        if self.rng.random() < 0.5:
            a = self.space.crossover(a, self._tournament(), self.rng)
        return self.space.mutate(a, self.rng)

    def _tournament(self) -> Any:
        elite = self.timed[:ELITE]
        x, y = self.rng.choice(elite), self.rng.choice(elite)
        return min(x, y, key=lambda t: (t[0], t[1]))[2]

    def _fresh(self, make: Any) -> Any | None:
        for _ in range(_ATTEMPTS):
            options = make()
            if options not in self.seen:
                self.seen.add(options)
                return options
        return None


__all__ = ["ELITE", "Evolution"]
