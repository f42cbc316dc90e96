"""The runtime: argument checks, worker errors, concurrent callers."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from compiler.cpu import compile_function, run_chunks
from compiler.diagnostics import OptionsError, ShapeError, TCError
from tests.codegen.kit import F32, add, buf, c, func, load, mul, out, pfor, store


def axpb() -> object:
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    value = add(mul(load(A, "i"), c(2.0, F32)), c(1.0, F32))
    return func("axpb", [A, Out], "N", pfor("i", 0, "N", store(Out, ("i",), value)))


def test_concurrent_callers_of_one_kernel_each_get_their_own_result() -> None:
    cf = compile_function(axpb())
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                n = int(rng.integers(1, 5000))
                a = rng.standard_normal(n).astype(np.float32)
                o = np.empty(n, np.float32)
                cf({"A": a, "O": o}, {"N": n}, threads=2)
                np.testing.assert_array_equal(o, a * 2 + 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_error_in_a_worker_chunk_reaches_the_caller() -> None:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def call(lo: int, hi: int) -> None:
        with lock:
            seen.append((lo, hi))
        if lo == 20:
            raise ValueError("chunk 20 failed")

    with pytest.raises(ValueError, match="chunk 20 failed"):
        run_chunks(call, [(0, 10), (10, 20), (20, 30)])
    assert sorted(seen) == [(0, 10), (10, 20), (20, 30)]  # every chunk still ran


@pytest.mark.parametrize(
    ("arrays", "sizes", "message"),
    [
        ({"A": np.zeros(4, np.float64), "O": np.zeros(4, np.float32)}, {"N": 4}, "dtype float32"),
        ({"A": np.zeros(5, np.float32), "O": np.zeros(4, np.float32)}, {"N": 4}, r"shape \(4,\)"),
        (
            {"A": np.zeros(8, np.float32)[::2], "O": np.zeros(4, np.float32)},
            {"N": 4},
            "C-contiguous",
        ),
        ({"A": np.zeros(4, np.float32)}, {"N": 4}, "missing array for buffer 'O'"),
        ({"A": np.zeros(4, np.float32), "O": np.zeros(4, np.float32)}, {}, "size parameter 'N'"),
        (
            {"A": np.zeros(4, np.float32), "O": np.zeros(4, np.float32)},
            {"N": 4.0},
            "must be an int",
        ),
        ({"A": [0.0] * 4, "O": np.zeros(4, np.float32)}, {"N": 4}, "NumPy array"),
        (
            {"A": np.zeros(4, np.float32), "O": np.zeros(4, np.float32), "Q": np.zeros(1)},
            {"N": 4},
            "no buffer named 'Q'",
        ),
    ],
)
def test_bad_arguments_are_shape_errors(arrays: dict, sizes: dict, message: str) -> None:
    cf = compile_function(axpb())
    with pytest.raises(ShapeError, match=message) as info:
        cf(arrays, sizes)
    assert isinstance(info.value, TCError) and info.value.render().startswith("error:")


def test_read_only_output_and_bad_thread_counts_are_rejected() -> None:
    cf = compile_function(axpb())
    o = np.zeros(4, np.float32)
    o.flags.writeable = False
    with pytest.raises(ShapeError, match="read-only"):
        cf({"A": np.zeros(4, np.float32), "O": o}, {"N": 4})
    for bad in (0, -1, 1.5, True):
        with pytest.raises(OptionsError, match="threads"):
            cf({"A": np.zeros(4, np.float32), "O": np.zeros(4, np.float32)}, {"N": 4}, threads=bad)


def test_compiled_function_outlives_its_cache_entry_and_many_threads() -> None:
    from compiler.cpu import runtime

    cf = compile_function(axpb())
    runtime._CACHE.clear()  # only `cf` now holds the JIT engine
    a = np.arange(1000, dtype=np.float32)
    o = np.empty(1000, np.float32)
    cf({"A": a, "O": o}, {"N": 1000}, threads=16)
    np.testing.assert_array_equal(o, a * 2 + 1)
