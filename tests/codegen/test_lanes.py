"""Register tiles emitted as vectors (`compiler/cpu/llvm_lanes.py`): the code is
the scalar emission's, lane by lane, so results are bit for bit the same with and
without it (sizes 0, 1, primes, not multiples of the lanes; float32 and float64;
`+=!`, `+=`, `max=!`, gradients, the blocked Kahan sums of long reductions), and the
tiles' accumulators really are vectors in the IR handed to LLVM."""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler import pipeline
from compiler.codegen.target import get_target, prepare
from compiler.cpu import compile_function, cpu_parallel, llvm_lanes, runtime
from compiler.cpu import llvm as backend
from compiler.cpu.llvm_emit import SUM_BLOCK
from compiler.loops import (
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Const,
    DType,
    Load,
    Local,
    Role,
    Stmt,
    VarRef,
)
from compiler.options import Options
from tests.codegen import kit

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
MATMUL_T = "def mmt(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"
ACCUMULATE = "def acc(float(M,K) A, float(K,N) B) -> (C) { C(m, n) += A(m, k) * B(k, n) }"
MAXPLUS = "def mp(float(M,K) A, float(K,N) B) -> (C) { C(m, n) max=! A(m, k) + B(k, n) }"
CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n"
    "    O(n, m, h, w) = O(n, m, h, w) + B(m)\n}"
)


def _unoptimised_ir(text: str, options: Options, grad: bool = False) -> str:
    source = compiler.grad(text) if grad else text
    lowered = pipeline.run(source, upto="lower", options=options)
    f = cpu_parallel.run(prepare(get_target("llvm"), lowered.function, options))
    return str(backend.build_module(f))


def _both(
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    arrays: list[np.ndarray],
    options: Options,
    grad: bool = False,
    into: np.ndarray | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Outputs (and with `grad`, the vjp's) with vector lanes and without; `into`: the
    data a `+=` def accumulates into."""
    runs = []
    for lanes in (True, False):
        if not lanes:
            monkeypatch.setattr(llvm_lanes, "MIN_LANES", 1 << 20)  # no chain that long
        # the loop IR is the same either way: without a fresh table of recent code, the
        # second define would reuse the first's machine code (keyed by the loop IR)
        monkeypatch.setattr(runtime, "_CACHE", OrderedDict())
        k = compiler.define(text, options=options, cache=False)
        out = k(*arrays) if into is None else k(*arrays, out=(into.copy(),))
        outs = list(out) if isinstance(out, tuple) else [out]
        if grad:
            rng = np.random.default_rng(7)
            cot = tuple(rng.standard_normal(o.shape).astype(o.dtype) for o in outs)
            g = k.vjp(*arrays, grad_outputs=cot)
            outs += list(g) if isinstance(g, tuple) else [g]
        runs.append([np.asarray(o) for o in outs])
    return runs[0], runs[1]


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.array_equal(x, y, equal_nan=True)


@pytest.mark.parametrize("text", [MATMUL, MATMUL_T, ACCUMULATE, MAXPLUS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mkn", [(2, 3, 5), (1, 1, 1), (7, 13, 37), (33, 17, 65), (130, 5, 47)])
def test_contractions_are_bitwise_the_scalar_emission(
    monkeypatch: pytest.MonkeyPatch, text: str, dtype: type, mkn: tuple[int, int, int]
) -> None:
    m, k, n = mkn
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if text is MATMUL_T else (k, n)).astype(dtype)
    if dtype is np.float64:
        text = text.replace("float(", "double(")
    into = rng.standard_normal((m, n)).astype(dtype) if "+= A" in text else None
    with_lanes, without = _both(monkeypatch, text, [a, b], Options(threads=2), into=into)
    _same_bits(with_lanes, without)


@pytest.mark.parametrize("shape", [(1, 1, 3, 1), (2, 3, 7, 5), (2, 5, 19, 4)])
def test_convolution_and_its_gradient_are_bitwise_the_scalar_emission(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, int, int, int]
) -> None:
    n, c, h, m = shape
    rng = np.random.default_rng(h)
    arrays = [
        rng.standard_normal((n, c, h, h + 12)).astype(np.float32),
        rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        if h >= 3
        else rng.standard_normal((m, c, 1, 1)).astype(np.float32),
        rng.standard_normal(m).astype(np.float32),
    ]
    with_lanes, without = _both(monkeypatch, CONV, arrays, Options(threads=2), grad=True)
    _same_bits(with_lanes, without)


def test_long_reductions_keep_their_blocked_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of 8 float Locals summed over a loop longer than `SUM_BLOCK` runs in
    blocks with Kahan's compensation (`cpu.llvm_sums`): as one group, on a vector
    partial, as accurately as on 8 scalar ones. (Not the same bits: a group's lane sums
    its block in order, where LLVM's vectoriser splits a scalar partial across lanes.)"""
    lanes = 8
    x = kit.buf("X", DType.FLOAT32, "N", lanes)
    y = kit.out("Y", DType.FLOAT32, lanes)
    names = [f"acc{k}" for k in range(lanes)]
    update = [
        Assign(n, kit.add(VarRef(n, DType.FLOAT32), kit.load(x, "i", k)))
        for k, n in enumerate(names)
    ]
    stores = [kit.store(y, (k,), VarRef(n, DType.FLOAT32)) for k, n in enumerate(names)]
    body: Stmt = Block((kit.loop("i", 0, "N", *update), *stores))
    for n in reversed(names):
        body = Local(n, DType.FLOAT32, Const(0.0, DType.FLOAT32), body)
    f = kit.func("sums", [x, y], "N", body)
    assert re.search(r"\.partial\"? = alloca <8 x float>", str(backend.build_module(f)))
    n = 3 * SUM_BLOCK + 5
    arrays = {
        "X": np.random.default_rng(5).uniform(0, 1, (n, lanes)).astype(np.float32),
        "Y": np.zeros(lanes, np.float32),
    }
    got = {}
    for grouped in (True, False):
        if not grouped:
            monkeypatch.setattr(llvm_lanes, "MIN_LANES", 1 << 20)
            assert "<8 x float>" not in str(backend.build_module(f))
        mine = {k: a.copy() for k, a in arrays.items()}
        monkeypatch.setattr(runtime, "_CACHE", OrderedDict())  # compiled afresh
        compile_function(f)(mine, {"N": n}, threads=1)
        got[grouped] = mine["Y"]
    exact = arrays["X"].astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(got[True], exact, rtol=2e-6)
    np.testing.assert_allclose(got[False], exact, rtol=2e-6)


def test_tile_accumulators_are_vectors_in_the_ir() -> None:
    """A packed matmul tile (8 rows x 32 lanes with 512-bit vectors) updates its
    accumulators with `<16 x float>` adds, one per row and half-panel, not 256
    scalar ones; its stores after the reduction are vector stores."""
    ir = _unoptimised_ir(MATMUL, Options(threads=2, vector_bits=512))
    vector_adds = re.findall(r"fadd reassoc contract <16 x float>", ir)
    scalar_adds = re.findall(r"fadd reassoc contract float ", ir)
    assert len(vector_adds) >= 16
    assert len(scalar_adds) < len(vector_adds)
    assert re.search(r"store <16 x float> .*, align 4", ir)


def test_contiguous_reads_only() -> None:
    """Lanes read `X[.., e + l]`: consecutive along the last subscript, the others
    equal; anything else (a stride, another dimension, another buffer) is not a vector
    load."""
    x = Buffer("X", DType.FLOAT32, (VarRef("R"), VarRef("S")), Role.IN)
    y = Buffer("Y", DType.FLOAT32, (VarRef("R"), VarRef("S")), Role.IN)
    i, j = VarRef("i"), VarRef("j")

    def at(buf: Buffer, r: object, c: object) -> Load:
        return Load(buf, (r, c))  # type: ignore[arg-type]

    def plus(e: object, k: int) -> Bin:
        return Bin(BinOp.ADD, e, Const(k, DType.INT64))  # type: ignore[arg-type]

    lanes = [at(x, i, plus(j, k)) for k in range(4)]
    assert llvm_lanes._contiguous(lanes) is lanes[0]
    shifted = [at(x, i, plus(plus(j, 5), k - 5)) for k in range(4)]  # j + 5 + (k - 5)
    assert llvm_lanes._contiguous(shifted) is shifted[0]
    strided = [at(x, i, Bin(BinOp.MUL, Const(2, DType.INT64), plus(j, k))) for k in range(4)]
    assert llvm_lanes._contiguous(strided) is None
    rows = [at(x, plus(i, k), j) for k in range(4)]
    assert llvm_lanes._contiguous(rows) is None
    mixed = [at(x if k < 2 else y, i, plus(j, k)) for k in range(4)]
    assert llvm_lanes._contiguous(mixed) is None
    backwards = [at(x, i, plus(j, -k)) for k in range(4)]
    assert llvm_lanes._contiguous(backwards) is None


def test_stores_that_read_an_earlier_lane_stay_in_order() -> None:
    """`Y[1 + l] = Y[l] + acc_l`: each lane reads what the lane before it stored (a
    running sum), so the stores are not one vector store; the compiled code agrees
    with the loop-IR interpreter."""
    lanes = 4
    x = kit.buf("X", DType.FLOAT32, lanes)
    y = kit.out("Y", DType.FLOAT32, lanes + 1)
    names = [f"acc{k}" for k in range(lanes)]
    stores = [
        kit.store(y, (k + 1,), kit.add(kit.load(y, k), VarRef(n, DType.FLOAT32)))
        for k, n in enumerate(names)
    ]
    body: Stmt = Block(tuple(stores))
    for k in reversed(range(lanes)):
        body = Local(names[k], DType.FLOAT32, kit.load(x, k), body)
    f = kit.func("running", [x, y], "", body)
    ir = str(backend.build_module(f))
    assert "load <4 x float>" in ir  # the accumulators are a group
    assert not re.search(r"store <4 x float> .*, align 4", ir)  # no vector store to Y
    arrays = {"X": np.arange(1, lanes + 1, dtype=np.float32), "Y": np.ones(lanes + 1, np.float32)}
    want, got = kit.run_both(f, arrays, {})
    np.testing.assert_array_equal(got["Y"], want["Y"])
    np.testing.assert_array_equal(got["Y"], [1, 2, 4, 7, 11])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.sampled_from([1, 2, 7, 9, 17, 129]),
    k=st.sampled_from([1, 3, 16, 31, 257]),
    n=st.sampled_from([1, 5, 15, 16, 17, 33, 47, 64]),
    text=st.sampled_from([MATMUL, MATMUL_T, MAXPLUS]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_are_bitwise_the_scalar_emission(
    m: int, k: int, n: int, text: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if text is MATMUL_T else (k, n)).astype(np.float32)
    with pytest.MonkeyPatch.context() as patch:
        with_lanes, without = _both(patch, text, [a, b], Options(threads=2))
    _same_bits(with_lanes, without)
