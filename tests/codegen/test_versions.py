"""Versions picked by the sizes (`loops.versions`) and their compile at first call
(`runtime.native.ProgramCode`).

The conv2d gradient has three versions of its `I_grad` gather: padded in the default
loop order, padded in the L1-aliasing order, and clamped (`poly.pad`, `poly.aliasing`).
Each case below picks one by its sizes; every result is compared with the reference
evaluator, and the compiles are counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.codegen.cache import CompileCache
from compiler.codegen.target import get_target, prepare
from compiler.loops import Block, If
from compiler.loops import versions as V
from compiler.loops.ir import (
    Bin,
    BinOp,
    Buffer,
    Const,
    DType,
    For,
    Function,
    Load,
    Role,
    Store,
    VarRef,
)
from compiler.options import Options
from compiler.runtime import native

ROOT = Path(__file__).resolve().parents[2]
CONV = (ROOT / "examples" / "conv2d.tc").read_text()
# (I shape, W1 shape): the version of I_grad each takes
DEFAULT = ((1, 3, 9, 7), (2, 3, 3, 3))  # padded, default order
ALIASING = ((1, 2, 14, 14), (3, 2, 3, 3))  # (H + KH - 1) (W + KW - 1) 4 = 1024 bytes
CLAMPED = ((1, 2, 5, 5), (3, 2, 5, 5))  # a 1x1 output: padding would not pay


@pytest.fixture(scope="module")
def conv_grad() -> compiler.Kernel:
    return compiler.define(CONV, target="llvm", cache=False).grad


@pytest.fixture(scope="module")
def grad_function():
    lowered = pipeline.run(CONV, None, upto="lower", grad=True)
    return prepare(get_target("llvm"), lowered.function, Options())


def _sizes(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> dict[str, int]:
    (n, c, h, w), (m, _, kh, kw) = shapes
    return {"N": n, "C": c, "H": h, "W": w, "M": m, "KH": kh, "KW": kw}


def _inputs(shapes, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    i_shape, w_shape = shapes
    n, _, h, w = i_shape
    m, _, kh, kw = w_shape
    return [
        rng.standard_normal(i_shape).astype(np.float32),
        rng.standard_normal(w_shape).astype(np.float32),
        rng.standard_normal(m).astype(np.float32),
        rng.standard_normal((n, m, h - kh + 1, w - kw + 1)).astype(np.float32),
    ]


def _reference(kernel: compiler.Kernel, arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    return compiler.define(kernel.text, target="interp")(*arrays)


def test_the_conv2d_gradient_has_three_versions_of_its_gather(grad_function) -> None:
    points = V.choice_points(grad_function)
    assert len(points) == 4  # aliasing order?, padding pays? (in each order), clamped?
    taken = {
        name: V.branches(grad_function, _sizes(shapes))
        for name, shapes in (("default", DEFAULT), ("aliasing", ALIASING), ("clamped", CLAMPED))
    }
    assert taken["default"] == {(0, False), (2, True)}
    assert taken["aliasing"] == {(0, True), (1, True)}
    assert taken["clamped"] == {(0, False), (3, True)}
    assert V.every_branch(grad_function) == {(0, True), (0, False), (1, True), (2, True), (3, True)}


def test_restricting_empties_exactly_the_branches_not_kept(grad_function) -> None:
    f = grad_function
    assert V.restrict(f, V.every_branch(f)) is f
    kept = V.branches(f, _sizes(DEFAULT))
    g = V.restrict(f, kept)
    assert V.choice_points(g)[0].cond == V.choice_points(f)[0].cond
    assert len(V.choice_points(g)) == 3  # point 1 was in the emptied branch of point 0
    assert V.nodes(g) < 0.75 * V.nodes(f)
    empty = [p for p in V.choice_points(g) if p.then == Block(())]
    assert len(empty) == 2  # the aliasing order's then-branch and the clamped version
    assert V.restrict(f, V.branches(f, _sizes(CLAMPED))) != g


def test_only_size_conditions_outside_loops_choose() -> None:
    i, n = VarRef("i"), VarRef("N")
    out = Buffer("B", DType.FLOAT32, (n,), Role.OUT)
    store = Store(out, (i,), Const(1.0, DType.FLOAT32))
    wide = Bin(BinOp.GT, n, Const(16, DType.INT64))
    loop = For("i", Const(0, DType.INT64), n, 1, If(wide, store))  # inside a loop
    reads = If(Bin(BinOp.GT, Load(out, (Const(0, DType.INT64),)), Const(0.0, DType.FLOAT32)), loop)
    f = Function("f", (out,), ("N",), Block((If(wide, loop, loop), reads, loop)))
    assert V.choice_points(f) == (f.body.stmts[0],)
    assert V.branches(f, {"N": 17}) == {(0, True)}
    assert V.branches(f, {"N": 16}) == {(0, False)}
    assert V.restrict(f, frozenset({(0, False)})).body.stmts[0] == If(wide, Block(()), loop)


def test_a_gradient_compiles_at_its_first_call_the_versions_its_sizes_take(conv_grad) -> None:
    code = conv_grad._native.code
    assert code.versions and code.compiles == 0  # nothing compiled at define
    arrays = _inputs(DEFAULT)
    got = conv_grad(*arrays)
    assert code.compiles == 1
    assert code.compiled_branches == V.branches(conv_grad._native.function, _sizes(DEFAULT))
    for a, b in zip(got, _reference(conv_grad, arrays), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    conv_grad(*_inputs(DEFAULT, seed=1))
    assert code.compiles == 1  # the same sizes: the same code


@pytest.mark.parametrize(
    "shapes", [ALIASING, CLAMPED, DEFAULT], ids=["aliasing", "clamped", "default"]
)
def test_sizes_that_take_another_version_compile_the_union(conv_grad, shapes) -> None:
    code = conv_grad._native.code
    arrays = _inputs(shapes, seed=2)
    before = code.compiled_branches or frozenset()
    got = conv_grad(*arrays)
    needed = V.branches(conv_grad._native.function, _sizes(shapes))
    assert needed <= code.compiled_branches
    assert code.compiled_branches == before | needed
    for a, b in zip(got, _reference(conv_grad, arrays), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    out = {"I_grad": np.zeros_like(arrays[0])}  # the checked path (out=) routes the same way
    conv_grad(*arrays, out=out)
    np.testing.assert_allclose(out["I_grad"], got[0], rtol=1e-6, atol=1e-6)


def test_every_version_compiles_once_however_the_calls_go() -> None:
    g = compiler.define(CONV, target="llvm", cache=False).grad
    for shapes in (CLAMPED, DEFAULT, CLAMPED, ALIASING, DEFAULT, ALIASING):
        g(*_inputs(shapes))
    code = g._native.code
    assert code.compiles == 3
    assert code.compiled_branches == V.every_branch(g._native.function)
    assert g._native.compiled is g._native.code.for_sizes(list(_sizes(DEFAULT).values()))


def test_the_disk_cache_holds_each_set_of_versions(tmp_path: Path, monkeypatch) -> None:
    compiles: list[int] = []
    real = native.compile_to_object

    def counted(f, **kwargs):
        compiles.append(1)
        return real(f, **kwargs)

    monkeypatch.setattr(native, "compile_to_object", counted)
    arrays = _inputs(CLAMPED)
    first = compiler.define(CONV, target="llvm", cache=tmp_path).grad
    want = first(*arrays)
    assert len(compiles) == 1  # at the call: neither define compiled (both have versions)
    entries = sorted(p.name for p in tmp_path.glob("*.tcc"))

    again = compiler.define(CONV, target="llvm", cache=CompileCache(tmp_path)).grad
    got = again(*arrays)
    assert len(compiles) == 1  # loaded from disk: no compile
    assert sorted(p.name for p in tmp_path.glob("*.tcc")) == entries
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_pipeline_codegen_pass_compiles_every_version() -> None:
    program = pipeline.run(CONV, None, grad=True)
    assert isinstance(program, native.NativeProgram)
    assert program.code.compiles == 1
    assert program.code.compiled_branches == V.every_branch(program.function)
