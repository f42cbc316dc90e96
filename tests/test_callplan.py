"""Per-signature call plans (`compiler.runtime.callplan`): a repeat call skips the Python checks,
yet gives the reference evaluator's results and rejects bad calls exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import ShapeError
from compiler.kernel import TCWarning
from compiler.runtime.callplan import MAX_PLANS, signature

ADD = "def add(float(M, N) A, float(N) b) -> (C) { C(m, n) = A(m, n) + b(n) }"
GATHER = "def gather(float(N) A, int32(M) idx) -> (O) { O(i) = A(idx(i)) }"
ACC = "def acc(float(N) A) -> (O) { O(i) += A(i) }"


def _errors(k: compiler.kernel.Kernel, *args: object) -> str:
    with pytest.raises(ShapeError) as err:
        k(*args)
    return str(err.value)


def test_repeat_calls_use_one_plan_per_signature_and_agree_with_interp() -> None:
    k = compiler.define(ADD, cache=None)
    ref = compiler.define(ADD, target="interp")
    rng = np.random.default_rng(0)
    for m, n in [(1, 1), (3, 7), (3, 7), (5, 2), (3, 7)]:
        a = rng.standard_normal((m, n)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        (got,) = k(a, b)
        np.testing.assert_array_equal(got, ref(a, b)[0])
        assert k.output_shapes(a, b) == {"C": (m, n)}
    assert len(k._plans) == 3
    assert signature((a, b)) in k._plans
    first, second = k(a, b)[0], k(a, b)[0]
    assert first is not second  # fresh outputs on every call


def test_bad_calls_after_a_plan_raise_the_same_errors() -> None:
    k = compiler.define(ADD, cache=None)
    fresh = compiler.define(ADD, cache=None)
    a, b = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    k(a, b)  # a plan for ((3, 4), (4,)) float32
    bad_calls = [
        (a.astype(np.float64), b),  # dtype
        (a, np.ones(5, np.float32)),  # size N disagrees
        (np.ones((4, 6), np.float32)[:, ::2], np.ones(3, np.float32)),  # strided: copied, ok
        (a,),  # count
        (a, [1.0, 2.0, 3.0, 4.0]),  # not an array
        (np.ones(4, np.float32), b),  # rank
    ]
    for args in bad_calls:
        if args[0].ndim == 2 and len(args) == 2 and not args[0].flags.c_contiguous:
            np.testing.assert_array_equal(k(*args)[0], fresh(*args)[0])
            continue
        assert _errors(k, *args) == _errors(fresh, *args)


def test_indirect_read_errors_come_through_the_plan() -> None:
    k = compiler.define(GATHER, cache=None)
    a = np.arange(5, dtype=np.float32)
    good = np.array([4, 0, 2], np.int32)
    np.testing.assert_array_equal(k(a, good)[0], a[good])
    assert signature((a, good)) in k._plans
    for _ in range(2):  # through the plan, twice
        with pytest.raises(ShapeError, match=r"index 7 out of range for dimension 0 of 'A'"):
            k(a, np.array([1, 7, 0], np.int32))
    np.testing.assert_array_equal(k(a, good)[0], a[good])


def test_the_accumulation_warning_is_given_on_every_call() -> None:
    k = compiler.define(ACC, cache=None)
    a = np.arange(3, dtype=np.float32)
    for _ in range(2):
        with pytest.warns(TCWarning, match="accumulates into output 'O'"):
            np.testing.assert_array_equal(k(a)[0], a)


def test_plans_are_bounded() -> None:
    k = compiler.define("def neg(float(N) A) -> (O) { O(i) = -A(i) }", cache=None)
    for n in range(1, MAX_PLANS + 10):
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(k(a)[0], -a)
    assert len(k._plans) == MAX_PLANS


def test_scalars_and_out_take_the_checked_path() -> None:
    k = compiler.define("def s(float A, float(N) B) -> (O) { O(i) = A * B(i) }", cache=None)
    b = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(k(2.0, b)[0], 2 * b)
    out = np.zeros(3, np.float32)
    (o,) = k(np.float32(3.0), b, out=(out,))
    assert o is out and out.tolist() == [0.0, 3.0, 6.0]
    assert k._plans == {}  # neither call qualified (a Python number, out=)


REVERSE = "def rev(float(N) A) -> (O) { O(i) = A(N - 1 - i) }"
STRIDED = "def st(float(N) A) -> (O) { O(2 * i) = A(i) }"  # odd elements never written


def _twice(k: compiler.kernel.Kernel, *args: object, out: object) -> tuple[np.ndarray, ...]:
    k(*args, out=out)  # the first call of a signature makes its plan
    return k(*args, out=out)


def test_out_is_written_in_place_with_the_copying_result() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    k = compiler.define(ADD, cache=None)
    c = np.full((3, 7), 5, np.float32)
    (got,) = _twice(k, a, b, out=(c,))
    assert got is c
    np.testing.assert_array_equal(c, a + b)
    plan = k._plans[signature((a, b))]
    assert plan.into((a, b), [c]) is not None  # the in-place path, not a copy
    acc = compiler.define(ACC, cache=None)  # reads its output's starting contents
    x = rng.standard_normal(9).astype(np.float32)
    o = np.ones(9, np.float32)
    acc(x, out=(o,))
    acc(x, out=(o,))
    np.testing.assert_allclose(o, 1 + 2 * x, rtol=1e-6)
    st = compiler.define(STRIDED, cache=None)  # keeps what it does not write
    s = np.full(9, 7, np.float32)
    _twice(st, x[:5], out=(s,))
    np.testing.assert_array_equal(s[1::2], 7)
    np.testing.assert_array_equal(s[::2], x[:5])


def test_out_sharing_memory_with_an_input_is_copied() -> None:
    k = compiler.define(REVERSE, cache=None)
    a = np.arange(8, dtype=np.float32)
    (got,) = _twice(k, a, out=(a,))  # in place, later reads would see earlier writes
    assert got is a
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32))  # reversed twice
    b = np.arange(8, dtype=np.float32)
    k(b, out=(b,))
    np.testing.assert_array_equal(b, np.arange(8, dtype=np.float32)[::-1])
    plan = k._plans[signature((b,))]
    assert plan.into((b,), [b]) is None
    wide = np.zeros((8, 2), np.float32)
    k(b, out=(wide[:, 0],))  # not contiguous: copied back
    np.testing.assert_array_equal(wide[:, 0], np.arange(8, dtype=np.float32))


def test_out_of_a_checked_program_is_untouched_by_a_failed_call() -> None:
    k = compiler.define(GATHER, cache=None)
    a = np.arange(5, dtype=np.float32)
    o = np.full(3, -1, np.float32)
    _twice(k, a, np.array([0, 4, 2], np.int32), out=(o,))
    np.testing.assert_array_equal(o, [0, 4, 2])
    o[:] = -1
    with pytest.raises(ShapeError):
        k(a, np.array([1, 9, 2], np.int32), out=(o,))
    np.testing.assert_array_equal(o, [-1, -1, -1])
