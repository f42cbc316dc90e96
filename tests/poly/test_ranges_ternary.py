"""Reads under a condition and range inference (issue 14).

The choice: TC's rule stays (a guarded read bounds the inferred ranges), a warning
names the variable and the read where the condition involves that variable, and a
range empty for every size is an error. Results are compared with NumPy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import compiler
from compiler.diagnostics import RangeError

GUARDED = (
    "def f(float(H) G, float(K) W) -> (O) {\n"
    "    O(h) +=! (h - kh >= 0 && h - kh < H ? G(h - kh) : 0.0) * W(kh){where}\n"
    "}\n"
)


def _ranged(src: str) -> compiler.kernel.RangedDef:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compiler.define(src, target="interp").ranged


def _messages(src: str) -> list[str]:
    return [w.message for w in _ranged(src).warnings]


def test_a_guarded_read_that_narrows_a_range_warns() -> None:
    msgs = _messages(GUARDED.replace("{where}", " where h in 0:H"))
    assert any("range of `kh` is inferred from `G(h - kh)`" in m for m in msgs), msgs


def test_explicit_ranges_silence_it_and_give_the_full_convolution() -> None:
    src = GUARDED.replace("{where}", " where h in 0:H, kh in 0:K")
    assert not any("inferred from" in m for m in _messages(src))
    g = np.arange(1, 6, dtype=np.float32)
    w = np.array([1.0, 10.0, 100.0], np.float32)
    want = np.array([sum(g[h - k] * w[k] for k in range(3) if h - k >= 0) for h in range(5)])
    for target in ("interp", "llvm"):
        (got,) = compiler.define(src, target=target, cache=False)(g, w)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_unguarded_reads_do_not_warn() -> None:
    src = "def f(float(H) G) -> (O) {\n    O(h) = G(h) > 0 ? G(h) : 0.0\n}\n"
    assert _messages(src) == []


def test_a_range_empty_for_every_size_is_an_error() -> None:
    src = "def f(float(H) G) -> (O) {\n    O(h) = G(h) where h in 0:H, h - H in 0:H\n}\n"
    with pytest.raises(RangeError, match="runs for no sizes"):
        _ranged(src)
