"""Loop metadata the LLVM backend attaches (`cpu.llvm_emit`, module doc: Unrolling):
an outer loop is never unrolled by LLVM, an innermost loop keeps LLVM's unrolling."""

from __future__ import annotations

import re

import numpy as np
import pytest

from compiler.cpu import build_module, compile_function
from compiler.cpu import llvm as backend
from compiler.loops import DType
from tests.codegen.kit import add, buf, c, func, load, loop, mul, out, store

F32 = DType.FLOAT32


def _transpose_pack() -> object:
    # a packing loop's shape: a constant 16 around a loop of unknown trip count
    B, P = buf("B", F32, 16, "N"), out("P", F32, "N", 16)
    body = store(P, ("n", "k"), mul(load(B, "k", "n"), c(2.0, F32)))
    return func("pack", [B, P], "N", loop("k", 0, 16, loop("n", 0, "N", body)))


def test_only_loops_holding_a_loop_carry_unroll_disable() -> None:
    text = str(build_module(_transpose_pack()))
    latches = re.findall(r"br label %\"?(\w+)\.header\"?, !llvm\.loop (!\d+)", text)
    assert [name for name, _ in latches] == ["k"]  # the outer loop's latch, not n's
    (node,) = [line for line in text.splitlines() if line.startswith(latches[0][1] + " =")]
    assert "distinct" in node
    assert '!"llvm.loop.unroll.disable"' in text


def test_the_outer_loop_is_not_unrolled_into_copies_of_the_inner_one() -> None:
    optimised = backend.compile_objects(_transpose_pack()).ir_text
    # at most one vectorised inner loop, not 16 (LLVM unrolled the 16 and vectorised
    # each: a test of this one without the hint finds 16 on AVX2)
    assert len(re.findall(r"^vector\.body[\w.]*:", optimised, re.M)) <= 1


@pytest.mark.parametrize("n", [0, 1, 7, 37])
def test_the_hinted_nest_computes_the_reference(n: int) -> None:
    b = np.arange(16 * n, dtype=np.float32).reshape(16, n)
    got = compile_function(_transpose_pack())(
        {"B": b, "P": np.zeros((n, 16), np.float32)}, {"N": n}
    )
    np.testing.assert_array_equal(got["P"], (b * 2).T)


def test_a_loop_inside_a_loop_inside_a_loop_marks_both_outer_ones() -> None:
    A, Out = buf("A", F32, "N", "M", "K"), out("O", F32, "N", "M", "K")
    body = store(Out, ("i", "j", "k"), add(load(A, "i", "j", "k"), c(1.0, F32)))
    f = func(
        "three", [A, Out], "N M K", loop("i", 0, "N", loop("j", 0, "M", loop("k", 0, "K", body)))
    )
    text = str(build_module(f))
    marked = re.findall(r"br label %\"?(\w+)\.header\"?, !llvm\.loop", text)
    assert sorted(marked) == ["i", "j"]
