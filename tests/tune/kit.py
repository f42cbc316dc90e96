"""Shared pieces of the autotuner tests: a small def, its inputs, a fake timer."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from compiler.tune.job import Outcome, TuneJob, _kernel
from compiler.tune.space import describe

MM = "def mm(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}"


def mm_inputs(m: int = 7, k: int = 5, n: int = 11, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((m, k), dtype=np.float32),
        rng.standard_normal((k, n), dtype=np.float32),
    )


def fake_ms(options: Any) -> float:
    """A deterministic 'time' per candidate (a hash of its fields), for search tests."""
    digest = hashlib.sha256(describe(options).encode()).digest()
    return 1.0 + int.from_bytes(digest[:4], "little") / 2**32


def fake_measure(job: TuneJob, options: Any) -> Outcome:
    """No timing at all: the fake time (the kernel is still compiled and called once)."""
    _kernel(job, options)
    return Outcome(options, True, times_ms=(fake_ms(options),) * 3)
