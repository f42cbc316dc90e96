"""Where the LLVM back end allows `a * b + c` to become one FMA (README, numerics): only
the product a sum adds to its accumulator (a register sum, or a memory-form update
inside a loop its element does not use) carries `contract`; every other float add,
sub and mul is rounded as written, so a value the gradient recomputes (a `max=`
candidate, issue 50) has the forward's bits."""

from __future__ import annotations

import numpy as np

from compiler.cpu import build_module, compile_function
from compiler.loops import Assign, Block, Local
from tests.codegen.kit import F64, add, buf, c, func, load, loop, mul, out, pfor, store, v


def _raw(f: object) -> str:
    return str(build_module(f))


def test_a_register_sum_fuses_its_product() -> None:
    A, B, C = buf("A", F64, "M", "K"), buf("B", F64, "K"), out("C", F64, "M")
    body = Local(
        "acc",
        F64,
        c(0.0, F64),
        Block(
            (
                loop(
                    "k",
                    0,
                    "K",
                    Assign("acc", add(v("acc", F64), mul(load(A, "i", "k"), load(B, "k")))),
                ),
                store(C, ("i",), v("acc", F64)),
            )
        ),
    )
    text = _raw(func("mv", [A, B, C], "M K", pfor("i", 0, "M", body)))
    assert "fmul contract" in text


def test_a_memory_form_sum_fuses_its_product() -> None:
    A, B, C = buf("A", F64, "M", "K"), buf("B", F64, "K"), out("C", F64, "M")
    update = store(C, ("i",), add(load(C, "i"), mul(load(A, "i", "k"), load(B, "k"))))
    text = _raw(func("mv", [A, B, C], "M K", pfor("i", 0, "M", loop("k", 0, "K", update))))
    assert "fmul contract" in text


def _pointwise(update: bool) -> object:
    A, B, Out = buf("A", F64, "N"), buf("B", F64, "N"), out("O", F64, "N")
    first = load(Out, "i") if update else load(B, "i")
    body = store(Out, ("i",), add(mul(load(A, "i"), load(B, "i")), first))
    return func("pw", [A, B, Out], "N", pfor("i", 0, "N", body))


def test_pointwise_arithmetic_is_rounded_as_written() -> None:
    for update in (False, True):
        assert "contract" not in _raw(_pointwise(update))
    rng = np.random.default_rng(5)
    a, b, o = (rng.standard_normal(1003) for _ in range(3))
    for update in (False, True):
        arrays = {"A": a, "B": b, "O": o.copy()}
        compile_function(_pointwise(update))(arrays, {"N": 1003})
        np.testing.assert_array_equal(arrays["O"], a * b + (o if update else b))
