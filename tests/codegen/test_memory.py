"""Compiled kernels are freed: the runtime's table of recent code is bounded, and the
compile cache holds code only weakly (issue 14, "Compiled kernels are never freed")."""

from __future__ import annotations

import gc
import platform
import resource
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.cpu import runtime

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


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_layer_with_a_large_temporary_does_not_fault_its_pages_in_every_call() -> None:
    # the MLP layer's transposed panels of W: a 4 MiB temporary, calloc'd and freed per
    # call beside two fresh 1 MiB outputs; with malloc tuned (runtime.tune_malloc, once
    # per process) the heap keeps them (glibc's defaults: 350-760 faults a call)
    src = (
        "def mlp(float(B, I) X, float(O, I) W, float(O) b) -> (Y, Z) {\n"
        "    Y(n, o) +=! X(n, i) * W(o, i)\n"
        "    Z(n, o) = tanh(Y(n, o) + b(o))\n}"
    )
    k = compiler.define(src, target="llvm", cache=None)
    rng = np.random.default_rng(0)
    x = rng.random((256, 1024), dtype=np.float32)
    w = rng.random((1024, 1024), dtype=np.float32)
    b = rng.random(1024, dtype=np.float32)
    k(x, w, b)  # the first calls grow the heap
    k(x, w, b)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        y, z = k(x, w, b)  # fresh outputs each call, as a layer's caller has them
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    assert runtime._MALLOC_TUNED
    assert faults < 150, faults
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-4)
    np.testing.assert_allclose(z, np.tanh(x @ w.T + b), rtol=1e-4)
