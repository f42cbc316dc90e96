"""Outputs allocated uninitialised (`loops.overwrite`, `runtime.callplan`): only those
the program overwrites before reading, checked against the reference evaluator with
`np.empty` returning NaN-filled arrays (any read of starting contents shows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.loops import Block, Buffer, Const, DType, For, Function, Load, Role, Store, VarRef
from compiler.loops.overwrite import Overwrites
from compiler.runtime import callplan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MATMUL = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
ACCUMULATES = "def acc(float(N) A) -> (O) { O(i) += A(i) }"
TWO = (  # O accumulates into its zeros; P, read from O afterwards, is overwritten
    "def two(float(N) A) -> (O, P) {\n    O(i) += A(i)\n    P(i) = O(i) * 2\n}"
)
STRIDED = "def st(float(N) A) -> (O) { O(2 * i) = A(i) }"  # odd elements never written
SOFTMAX_KEPT = (  # Y holds the exponentials, read back (loops.keep_terms)
    "def sm(float(N, D) X) -> (Y, mx, s) {\n    mx(n) max=! X(n, d)\n"
    "    s(n) +=! exp(X(n, d) - mx(n))\n    Y(n, d) = exp(X(n, d) - mx(n)) / s(n)\n}"
)


def _overwritten(source: str, **sizes: int) -> frozenset[str]:
    lowered = pipeline.run(source, upto="lower")
    return Overwrites(lowered.function).outputs(sizes)


def test_init_nests_and_whole_assignments_are_overwrites() -> None:
    assert _overwritten(MATMUL, M=5, K=3, N=7) == {"C"}
    assert _overwritten(MATMUL, M=5, K=0, N=7) == {"C"}  # the init nest still runs
    conv = (EXAMPLES / "conv2d.tc").read_text()  # its init nest is collapsed (O[n, m, 0, hw])
    assert _overwritten(conv, N=2, C=3, H=6, W=5, M=4, KH=3, KW=2) == {"O"}
    copy = "def cp(float(N) A) -> (O) { O(i) = A(i) + 1 }"
    assert _overwritten(copy, N=9) == {"O"}
    # a fused nest: the row's sums first, then its row of Y; m is read after it is
    # written, in the same iteration of `n`
    layernorm = (EXAMPLES / "layernorm.tc").read_text()
    assert "Y" in _overwritten(layernorm, N=3, D=13)
    rows = "def r(float(N, D) X) -> (Y, m) {\n    m(n) +=! X(n, d)\n    Y(n, d) = X(n, d) - m(n)\n}"
    assert _overwritten(rows, N=4, D=5) == {"Y", "m"}
    # a softmax that keeps its exponentials in Y, reads them back and divides them in
    # place (`loops.keep_terms`)
    assert _overwritten(SOFTMAX_KEPT, N=3, D=13) == {"Y", "mx", "s"}


def test_outputs_read_or_partly_written_first_are_not() -> None:
    assert _overwritten(ACCUMULATES, N=9) == frozenset()
    assert "O" not in _overwritten(TWO, N=9)
    assert _overwritten(STRIDED, N=9) == frozenset()
    # beside the store, a statement of the same nest reads Y: not an overwrite
    n, d = VarRef("n", DType.INT64), VarRef("d", DType.INT64)
    size = VarRef("N", DType.INT64)
    y = Buffer("Y", DType.FLOAT32, (size, size), Role.OUT)
    z = Buffer("Z", DType.FLOAT32, (size,), Role.OUT)
    zero = Const(0, DType.INT64)
    store = For("d", zero, size, 1, Store(y, (n, d), Const(1.0, DType.FLOAT32)))
    peek = Store(z, (n,), Load(y, (n, zero)))
    for body in (Block((peek, store)), Block((store, peek))):
        f = Function("f", (y, z), ("N",), For("n", zero, size, 1, body))
        assert "Y" not in Overwrites(f).outputs({"N": 3})
    f = Function("f", (y, z), ("N",), For("n", zero, size, 1, Block((store,))))
    assert Overwrites(f).outputs({"N": 3}) == {"Y"}
    # read back after the row is written: Y[n, d] over the same d range, an overwrite;
    # over every row n (a loop of its own inside the row's), not
    again = For("d", zero, size, 1, Store(z, (n,), Load(y, (n, d))))
    f = Function("f", (y, z), ("N",), For("n", zero, size, 1, Block((store, again))))
    assert Overwrites(f).outputs({"N": 3}) == {"Y"}
    rows = For("n", zero, size, 1, again)
    f = Function("f", (y, z), ("N",), For("n", zero, size, 1, Block((store, rows))))
    assert "Y" not in Overwrites(f).outputs({"N": 3})
    short = For("d", zero, VarRef("M", DType.INT64), 1, Store(z, (n,), Load(y, (n, d))))
    f = Function("f", (y, z), ("N", "M"), For("n", zero, size, 1, Block((store, short))))
    assert "Y" not in Overwrites(f).outputs({"N": 3, "M": 3})  # other bounds


def test_extents_are_checked_against_the_buffer_for_the_sizes() -> None:
    n = VarRef("N", DType.INT64)
    t = Buffer("T", DType.FLOAT32, (n,), Role.OUT)
    short = For(
        "i",
        Const(0, DType.INT64),
        VarRef("M", DType.INT64),
        1,
        Store(t, (VarRef("i", DType.INT64),), Const(1.0, DType.FLOAT32)),
    )
    f = Function("f", (t,), ("N", "M"), Block((short,)))
    assert Overwrites(f).outputs({"N": 8, "M": 8}) == {"T"}
    assert Overwrites(f).outputs({"N": 8, "M": 7}) == frozenset()
    assert Overwrites(f).outputs({"N": 0, "M": 0}) == {"T"}  # no element to write


def _nan_empty(shape: object, dtype: object = float, *args: object, **kwargs: object) -> np.ndarray:
    out = np.zeros(shape, dtype)  # type: ignore[call-overload]
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.fill(-7)
    return out


CASES = [
    (MATMUL, [(5, 3), (3, 7)]),
    (MATMUL, [(1, 1), (1, 1)]),
    (MATMUL, [(37, 29), (29, 41)]),
    ((EXAMPLES / "conv2d.tc").read_text(), [(2, 3, 7, 6), (4, 3, 3, 2), (4,)]),
    ((EXAMPLES / "softmax.tc").read_text(), [(3, 11)]),
    ((EXAMPLES / "layernorm.tc").read_text(), [(3, 13), (13,), (13,)]),
    ((EXAMPLES / "maxpool.tc").read_text(), [(1, 2, 7, 9)]),
    ((EXAMPLES / "strided_conv.tc").read_text(), [(1, 2, 9, 8), (3, 2, 3, 3)]),
    (TWO, [(9,)]),
    (SOFTMAX_KEPT, [(3, 11)]),
    (STRIDED, [(5,)]),
]
# an init nest (matmul, conv2d, strided_conv); a row nest's outputs (softmax, layernorm)
OVERWRITING = (0, 1, 2, 3, 4, 5, 7, 9)


@pytest.mark.filterwarnings("ignore::compiler.kernel.TCWarning")  # TWO accumulates
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "gradient"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_results_do_not_depend_on_starting_contents(
    case: int, grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, shapes = CASES[case]
    if grad and source in (TWO, STRIDED):
        pytest.skip("forward-only case")
    rng = np.random.default_rng(case)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    k = compiler.define(source, cache=None)
    ref = compiler.define(source, target="interp")
    if grad:  # the gradient's inputs: the forward's inputs and outputs, and the seeds
        values = {t.name: a for t, a in zip(ref._inputs, inputs, strict=True)}
        values.update((t.name, o) for t, o in zip(ref._outputs, ref(*inputs), strict=True))
        values.update((f"{t.name}_grad", np.ones_like(values[t.name])) for t in ref._outputs)
        k, ref = k.grad, ref.grad
        inputs = [values[t.name] for t in ref._inputs]
    want = ref(*inputs)
    monkeypatch.setattr(callplan, "OVERWRITE_BYTES", 0)  # every plan asks
    monkeypatch.setattr(np, "empty", _nan_empty)
    k(*inputs)  # the first call of a signature makes its plan (and zeroes its outputs)
    got = k(*inputs)  # the plan's call
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=False)
    plan = k._plans[callplan.signature(inputs)]
    outputs = plan.names[len(inputs) :]
    empties = [n for n, new in zip(outputs, plan.allocate, strict=True) if new is _nan_empty]
    if not grad and case in OVERWRITING:
        assert empties  # an output was allocated uninitialised: the check is not vacuous
    if source == STRIDED:
        assert not empties
