"""poly.schedule: nests in textual order, init nests, parallel marks, register
accumulation, snapshots and the reads left to run-time checks."""

from __future__ import annotations

import islpy as isl

from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from compiler.poly.schedule import NestKind, Schedule, schedule


def _schedule(src: str) -> Schedule:
    return schedule(infer_ranges(check_def(parse(src).get())), Options())


def test_matmul_is_one_parallel_accumulating_nest_without_init() -> None:
    s = _schedule("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    (nest,) = s.nests
    assert (nest.kind, nest.outer, nest.inner) == (NestKind.STMT, ("m", "n"), ("k",))
    assert nest.parallel and nest.accumulate and not nest.snapshot
    assert nest.unproven == frozenset()


def test_init_nest_when_the_statement_does_not_cover_the_output() -> None:
    s = _schedule("def f(float(N) A) -> (O) { O(i) +=! A(i - 1) }")
    assert [n.kind for n in s.nests] == [NestKind.INIT, NestKind.STMT]
    init, stmt = s.nests
    assert init.domain.get_tuple_name() == "I0" and init.outer == ("i",) and init.parallel
    box = isl.Set("[N] -> { I0[i] : 0 <= i <= N }")
    assert init.domain.intersect_params(s.context).is_equal(box.intersect_params(s.context))
    assert stmt.accumulate


def test_textual_order_and_inplace_update() -> None:
    s = _schedule("def f(float(N,K) A, float(N) B) -> (O) { O(i) +=! A(i,k)  O(i) = O(i) + B(i) }")
    assert [(n.kind, n.index) for n in s.nests] == [(NestKind.STMT, 0), (NestKind.STMT, 1)]
    assert s.nests[1].parallel and not s.nests[1].snapshot


def test_scatter_is_serial_with_an_init() -> None:
    s = _schedule("def f(float(N) A, float(K) W) -> (O) { O(i + k) +=! A(i) * W(k) }")
    init, stmt = s.nests
    assert init.kind is NestKind.INIT and init.outer == ("d0",)
    assert not stmt.parallel and not stmt.accumulate


def test_reading_another_element_of_the_output_takes_a_snapshot() -> None:
    s = _schedule(
        "def f(float(N) A) -> (O) { O(i) = A(i)  O(i) = O(i) + O(N - 1 - i) where i in 0:N }"
    )
    assert s.nests[1].snapshot and not s.nests[1].parallel


def test_indirect_reads_are_left_to_run_time_checks() -> None:
    s = _schedule("def f(float(V) E, int32(N) idx) -> (O) { O(n) = E(idx(n)) }")
    (nest,) = s.nests
    assert {(a.name, dim) for a, dim in nest.unproven} == {("E", 0)}


def test_context_has_sizes_at_least_one_and_nonnegative_extents() -> None:
    s = _schedule("def f(float(H) I, float(K) W) -> (O) { O(h) +=! I(h + k) * W(k) }")
    expected = isl.Set("[H, K] -> { : H >= 1 and K >= 1 and H - K + 1 >= 0 }")
    assert s.context.is_equal(expected)
