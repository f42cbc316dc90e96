"""Compiled kernels are freed: the runtime's table of recent code is bounded, and the
compile cache holds code only weakly (issue 14, "Compiled kernels are never freed")."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np

import compiler
from compiler.codegen import runtime

SCALE = "def scale(float(N) A) -> (B) {{\n    B(i) = A(i) * {s}\n}}\n"


def test_200_distinct_defines_do_not_keep_200_engines(tmp_path: Path) -> None:
    gc.collect()
    before = runtime.live_functions()
    a = np.arange(5, dtype=np.float32)
    for s in range(200):
        cache = tmp_path if s % 2 else None  # on disk, and in memory only
        k = compiler.define(SCALE, constants={"s": s + 1000}, cache=cache)
        np.testing.assert_array_equal(k(a)[0], a * np.float32(s + 1000))
        del k
    gc.collect()
    alive = runtime.live_functions() - before
    assert alive <= runtime.MEMORY_CACHE_SIZE  # not 200


def test_code_dropped_from_memory_is_reloaded_from_disk(tmp_path: Path) -> None:
    k = compiler.define(SCALE, constants={"s": 77}, cache=tmp_path)
    a = np.arange(4, dtype=np.float32)
    compiled = k._native.compiled
    again = compiler.define(SCALE, constants={"s": 77}, cache=tmp_path)
    assert again._native.compiled is compiled  # alive: shared, not reloaded
    del k, again, compiled
    runtime._CACHE.clear()
    gc.collect()
    before = runtime.live_functions()
    k = compiler.define(SCALE, constants={"s": 77}, cache=tmp_path)
    assert runtime.live_functions() == before + 1  # loaded anew (the old one was freed)
    np.testing.assert_array_equal(k(a)[0], a * 77)
