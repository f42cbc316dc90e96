"""The final choice: keep the tuned options only when their gain exceeds the noise.

Requires: per-call times of the default and of the best candidate from interleaved
          blocks (`compiler.tune.job.measure_pair`: round k timed one block of each,
          `default_ms[k]` and `best_ms[k]`, next to each other).
Ensures:  `decide(default_ms, best_ms) -> Verdict`: `keep` is True only when the gain
          (median of the default's blocks / median of the candidate's, minus 1) exceeds
          the noise; the default stays otherwise, and `why` says so.

The noise is half the interquartile range of the per-round ratios
`default_ms[k] / best_ms[k]`: a burst of load that slows one round slows both of its
blocks, so it cancels in the ratio, while the round-to-round scatter of the ratio is
what the machine adds to a comparison. For identical code with a spread `s` of log
block times, that half-range is about `0.95 s`, twice the standard error of the
median of 15 ratios, so equal code passes as "faster" in about 2-3 % of comparisons.

Worked example: default blocks 10, 11, 10, 12 ms, candidate 9, 10, 9, 11 ms: ratios
1.111, 1.100, 1.111, 1.091; gain = 10.5 / 9.5 - 1 = +10.5 %, noise = (1.111 - 1.098) / 2
= 0.7 %: kept. Default blocks 10, 14, 9, 13 ms, candidate 12, 10, 11, 9 ms: ratios 0.83,
1.40, 0.82, 1.44; gain = 11.5 / 10.5 - 1 = +9.5 %, noise = (1.41 - 0.83) / 2 = 29 %: the
default stays.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """The outcome of the final comparison (times in ms, gain and noise as fractions)."""

    keep: bool
    default_ms: float
    best_ms: float
    gain: float  # default_ms / best_ms - 1: above 0, the candidate is faster
    noise: float  # half the interquartile range of the per-round ratios
    rounds: int
    why: str


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def decide(default_ms: Sequence[float], best_ms: Sequence[float]) -> Verdict:
    """The verdict on interleaved block times (see the module doc)."""
    rounds = min(len(default_ms), len(best_ms))
    if rounds == 0:
        raise ValueError("decide needs at least one block of each")
    d, b = statistics.median(default_ms), statistics.median(best_ms)
    ratios = [x / y for x, y in zip(default_ms[:rounds], best_ms[:rounds], strict=True) if y > 0]
    lo, hi = _quartiles(ratios) if ratios else (1.0, 1.0)
    noise = (hi - lo) / 2
    gain = d / b - 1 if b > 0 else 0.0
    keep = gain > 0 and gain > noise
    if keep:
        why = f"kept the tuned options: gain {gain:+.1%} > noise {noise:.1%}"
    elif gain <= 0:
        why = f"kept the default: the candidate is not faster ({gain:+.1%}, noise {noise:.1%})"
    else:
        why = f"kept the default: gain {gain:+.1%} within the noise {noise:.1%}"
    return Verdict(keep, d, b, gain, noise, rounds, f"{why}, {rounds} interleaved rounds")


__all__ = ["Verdict", "decide"]
