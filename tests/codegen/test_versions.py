"""Versions picked by the sizes (`loops.versions`) and their compile at first call
(`runtime.native.ProgramCode`).

The conv2d gradient's loops have three versions of its `I_grad` gather: padded in the
default loop order, padded in the L1-aliasing order (both inside the Alloc of the scratch
copy they read), and clamped (`cpu.pad`, `cpu.aliasing`).
Each case below picks one by its sizes; every result is compared with the reference
evaluator, and the compiles are counted.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.codegen.target import get_target, prepare
from compiler.cpu.cache import CompileCache
from compiler.loops import Alloc, Block, If
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

# one register tile per nest: no versions for fewer rows than its block (conftest)
pytestmark = pytest.mark.usefixtures("no_few_rows")

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


def _padded_and_clamped(f) -> tuple[If, If]:
    """The If of the padded gather's two loop orders, inside the Alloc of its scratch
    copy `O_grad_pad` (after the If of the copy itself), and the If of the clamped one."""
    (pad,) = [s for s in f.body.stmts if isinstance(s, Alloc) and s.buffer.name == "O_grad_pad"]
    _copy, order = [s for s in pad.body.stmts if isinstance(s, If)]
    (clamped,) = [s for s in f.body.stmts if isinstance(s, If)]
    return order, clamped


def _gather_versions(f) -> dict[str, tuple[int, bool]]:
    """The branch of each version of the gradient's I_grad gather (numbers of
    `choice_points(f)`): the L1-aliasing order, the default order, the clamped form."""
    order, clamped = _padded_and_clamped(f)
    number = {id(p): k for k, p in enumerate(V.choice_points(f))}
    padded = [  # each order's padded nest is guarded by "padding pays"
        next(p for p in V.choice_points(dataclasses.replace(f, body=side)) if isinstance(p, If))
        for side in (order.then, order.otherwise)
    ]
    return {
        "aliasing": (number[id(padded[0])], True),
        "default": (number[id(padded[1])], True),
        "clamped": (number[id(clamped)], True),
    }


def test_the_sizes_pick_one_of_three_versions_of_the_gather(grad_function) -> None:
    versions = _gather_versions(grad_function)
    for name, shapes in (("default", DEFAULT), ("aliasing", ALIASING), ("clamped", CLAMPED)):
        taken = V.branches(grad_function, _sizes(shapes))
        assert {v for v, branch in versions.items() if branch in taken} == {name}


def test_restricting_empties_exactly_the_branches_not_kept(grad_function) -> None:
    f = grad_function
    assert V.restrict(f, V.every_branch(f)) is f
    kept = V.branches(f, _sizes(DEFAULT))
    g = V.restrict(f, kept)
    aliasing, clamped = _padded_and_clamped(g)
    assert aliasing.then == Block(()) and clamped.then == Block(())
    assert V.restrict(f, V.branches(f, _sizes(CLAMPED))) != g
    # C = 3 is less than the 8 channels of a register tile and W = 7 narrower than its
    # 16 lanes: only the remainder loop's narrow fallback runs; C = 16, W = 32 run only
    # the register tiles
    wide = V.restrict(f, V.branches(f, {**_sizes(DEFAULT), "C": 16, "W": 32}))
    assert V.nodes(g) < 0.1 * V.nodes(f)
    assert V.nodes(wide) < 0.6 * V.nodes(f)


def test_conditions_and_bounds_of_the_sizes_alone_choose() -> None:
    i, n = VarRef("i"), VarRef("N")
    out = Buffer("B", DType.FLOAT32, (n,), Role.OUT)
    store = Store(out, (i,), Const(1.0, DType.FLOAT32))
    wide = Bin(BinOp.GT, n, Const(16, DType.INT64))
    loop = For("i", Const(0, DType.INT64), n, 1, If(wide, store))  # inside a loop
    reads = If(Bin(BinOp.GT, Load(out, (Const(0, DType.INT64),)), Const(0.0, DType.FLOAT32)), loop)
    shadowed = For("N", Const(0, DType.INT64), n, 1, If(wide, store))  # N: not the size
    tail = For("i", Const(3, DType.INT64), n, 1, store)  # empty if N <= 3
    f = Function("f", (out,), ("N",), Block((If(wide, loop, loop), reads, shadowed, tail)))
    inner = loop.body
    assert V.choice_points(f) == (f.body.stmts[0], inner, inner, inner, tail)  # by position
    assert V.branches(f, {"N": 17}) == {(0, True), (1, True), (3, True), (4, True)}
    assert V.branches(f, {"N": 3}) == {(0, False)}  # no run reaches the inner If at 3
    g = V.restrict(f, V.branches(f, {"N": 3}))
    assert g.body.stmts[0] == If(
        wide, Block(()), dataclasses.replace(loop, body=If(wide, Block(())))
    )
    assert g.body.stmts[3] == Block(())
    wide_only = V.restrict(f, V.branches(f, {"N": 17}))
    assert wide_only.body.stmts == (If(wide, loop), *f.body.stmts[1:])


def test_a_gradient_compiles_at_its_first_call_the_versions_its_sizes_take(conv_grad) -> None:
    code = conv_grad._native.code
    assert code.versions and code.compiles == 0  # nothing compiled at define
    assert conv_grad.info()["choice_points"] == 41 and conv_grad.info()["compiles"] == 0
    arrays = _inputs(DEFAULT)
    got = conv_grad(*arrays)
    assert code.compiles == 1
    assert code.compiled_branches == V.branches(conv_grad._native.function, _sizes(DEFAULT))
    for a, b in zip(got, _reference(conv_grad, arrays), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    conv_grad(*_inputs(DEFAULT, seed=1))
    assert code.compiles == 1 == conv_grad.info()["compiles"]  # the same sizes, the same code


def test_sizes_that_take_another_branch_compile_every_branch() -> None:
    g = compiler.define(CONV, target="llvm", cache=False).grad
    code = g._native.code
    for shapes in (CLAMPED, CLAMPED, DEFAULT, ALIASING, DEFAULT, CLAMPED):
        arrays = _inputs(shapes, seed=2)
        got = g(*arrays)
        assert code.compiles == (1 if shapes == CLAMPED and code.compiles < 2 else 2)
        for a, b in zip(got, _reference(g, arrays), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        out = {"I_grad": np.zeros_like(arrays[0])}  # the checked path (out=) routes the same
        g(*arrays, out=out)
        np.testing.assert_allclose(out["I_grad"], got[0], rtol=1e-6, atol=1e-6)
    assert code.compiled_branches == V.every_branch(g._native.function)
    assert g._native.compiled is code.for_sizes(list(_sizes(DEFAULT).values()))


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
    again(*_inputs(DEFAULT))  # not among the stored branches: every branch, compiled
    assert len(compiles) == 2 and len(list(tmp_path.glob("*.tcc"))) == len(entries) + 1
    third = compiler.define(CONV, target="llvm", cache=CompileCache(tmp_path)).grad
    got = third(*_inputs(DEFAULT))
    assert len(compiles) == 2  # the program's entry, then the entry of every branch
    for a, b in zip(got, _reference(third, _inputs(DEFAULT)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_the_pipeline_codegen_pass_compiles_every_version() -> None:
    program = pipeline.run(CONV, None, grad=True)
    assert isinstance(program, native.NativeProgram)
    assert program.code.compiles == 1
    assert program.code.compiled_branches == V.every_branch(program.function)


def test_concurrent_first_calls_compile_at_most_twice() -> None:
    g = compiler.define(CONV, target="llvm", cache=False).grad
    cases = [DEFAULT, CLAMPED] * 3
    arrays = [_inputs(shapes, seed=k) for k, shapes in enumerate(cases)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: g(*a), arrays, timeout=600))
    assert g._native.code.compiles <= 2
    for a, got in zip(arrays, results, strict=True):
        for x, y in zip(got, _reference(g, a), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)
