"""Data-dependent scatters (`E_grad(idx(b), d) +=! ...`) on the LLVM target.

The oracle is `compiler.interp` (and `np.add.at` where it is simpler to state): the
native code must accumulate repeated indices, initialise the whole output for `+=!`,
run the statement serially (and say so), and raise interp's ShapeError for a store
index out of range.
"""

from __future__ import annotations

from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import compiler
from compiler import cli, pipeline
from compiler.cpu import cache as C
from compiler.cpu.model import schedule
from compiler.diagnostics import ShapeError
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.parser import parse
from compiler.loops import For, Function, LoopKind, Visitor
from compiler.poly.build import build_statements
from compiler.poly.ranges import infer_ranges
from compiler.poly.schedule import NestKind

EMBEDDING = "def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"
EMBEDDING_GRAD = (
    "def emb_grad(float(V, D) E, int32(B) idx, float(B, D) O_grad) -> (float(V, D) E_grad) {\n"
    "    E_grad(idx(b), d) +=! O_grad(b, d) where b in 0:B, d in 0:D\n"
    "}\n"
)
# the output's size M comes from constants= (no input has it); `{{ }}` are literal braces
HISTOGRAM = "def hist(int32(N) I, float(N) W) -> (float({M}) H) {{ H(I(i)) +=! W(i) }}"
COUNT = "def count(int32(N) I) -> (int32({M}) H) {{ H(I(i)) +=! 1 where i in 0:N }}"


def _ranged(src: str) -> RangedDef:
    return infer_ranges(check_def(parse(src).get()))


def _both(src: str, **kwargs: object) -> tuple[compiler.Kernel, compiler.Kernel]:
    return (
        compiler.define(src, target="llvm", **kwargs),  # type: ignore[arg-type]
        compiler.define(src, target="interp", **kwargs),  # type: ignore[arg-type]
    )


def _loops(f: Function) -> list[For]:
    found: list[For] = []

    class _Loops(Visitor):
        def visit_For(self, node: For) -> None:
            found.append(node)
            self.generic_visit(node)

    _Loops().visit(f.body)
    return found


# ------------------------------------------------------------------ values


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_gradient_equals_interp(dtype: type) -> None:
    src = EMBEDDING if dtype is np.float32 else EMBEDDING.replace("float", "double")
    native, ref = _both(src)
    rng = np.random.default_rng(1)
    table = rng.standard_normal((9, 6)).astype(dtype)
    idx = np.array([3, 0, 3, 8, 3, 5, 0], np.int32)  # 3 three times, 0 twice
    d_out = rng.standard_normal((7, 6)).astype(dtype)
    got = native.vjp(table, idx, grad_outputs=(d_out,))
    want = ref.vjp(table, idx, grad_outputs=(d_out,))
    assert got[1] is None and want[1] is None  # no gradient for the integer input
    assert got[0].dtype == dtype
    tol = 1e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol)
    expected = np.zeros_like(table)
    np.add.at(expected, idx, d_out)
    np.testing.assert_allclose(got[0], expected, rtol=tol, atol=tol)
    assert not got[0][[1, 2, 4, 6, 7]].any()  # rows never indexed stay zero


def test_embedding_gradient_resets_between_calls() -> None:
    native = compiler.define(EMBEDDING_GRAD, target="llvm")
    table = np.zeros((4, 2), np.float32)
    idx = np.array([1, 1], np.int32)
    d_out = np.ones((2, 2), np.float32)
    for _ in range(2):  # `+=!` starts from zero each call, not from the last result
        (grad,) = native(table, idx, d_out)
        np.testing.assert_array_equal(grad, [[0, 0], [2, 2], [0, 0], [0, 0]])


def test_histogram_float_weights() -> None:
    native, ref = _both(HISTOGRAM, constants={"M": 6})
    idx = np.array([0, 5, 5, 2, 5, 0, 1], np.int32)
    weights = np.arange(1, 8, dtype=np.float32)
    (got,) = native(idx, weights)
    (want,) = ref(idx, weights)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, [7.0, 7.0, 4.0, 0.0, 0.0, 10.0])


def test_histogram_counts_int32() -> None:
    native, ref = _both(COUNT, constants={"M": 4})
    idx = np.array([3, 3, 1, 3, 0], np.int32)
    (got,) = native(idx)
    (want,) = ref(idx)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.bincount(idx, minlength=4))


def test_accumulate_without_init_into_out() -> None:
    src = "def acc(int32(N) I, float(N) W, float(M) Z) -> (float(M) H) { H(I(i)) += W(i) }"
    native, ref = _both(src)
    idx = np.array([2, 0, 2], np.int32)
    weights = np.array([1.0, 2.0, 4.0], np.float32)
    zeros = np.zeros(3, np.float32)
    start = np.array([10.0, 20.0, 30.0], np.float32)
    got_out, want_out = start.copy(), start.copy()
    native(idx, weights, zeros, out=(got_out,))
    ref(idx, weights, zeros, out=(want_out,))
    np.testing.assert_array_equal(got_out, want_out)
    np.testing.assert_array_equal(got_out, [12.0, 20.0, 35.0])


def test_two_dimensional_shifted_scatter_then_a_gather() -> None:
    src = (
        "def f(int32(N) I, int32(N) J, float(N) W, float(R, S) Z) -> (float(R, S) H, G) {\n"
        "    H(I(i), J(i) + 1) +=! W(i)\n"
        "    G(r) +=! H(r, s) * 2.0\n"
        "}\n"
    )
    native, ref = _both(src)
    rows = np.array([0, 2, 2, 1, 0], np.int32)
    cols = np.array([0, 1, 1, 2, 0], np.int32)
    weights = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    zeros = np.zeros((3, 4), np.float32)
    got = native(rows, cols, weights, zeros)
    want = ref(rows, cols, weights, zeros)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    expected = np.zeros((3, 4), np.float32)
    np.add.at(expected, (rows, cols + 1), weights)
    np.testing.assert_allclose(got[0], expected)
    np.testing.assert_allclose(got[1], 2 * expected.sum(axis=1))


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("bad", [9, -1])
def test_out_of_range_store_raises_interps_error(bad: int) -> None:
    table = np.ones((9, 3), np.float32)
    idx = np.array([0, bad, 2], np.int32)
    d_out = np.ones((3, 3), np.float32)
    messages = []
    for k in _both(EMBEDDING_GRAD):
        with pytest.raises(ShapeError) as info:
            k(table, idx, d_out)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert f"write out of range: index {bad} for dimension 0 of 'E_grad' (size 9)" in messages[0]
    assert "E_grad(idx(b), d)" in messages[0]  # the caret line shows the left-hand side


def test_out_of_range_histogram_bin_on_both_targets() -> None:
    idx = np.array([0, 1, 6], np.int32)
    weights = np.ones(3, np.float32)
    messages = []
    for k in _both(HISTOGRAM, constants={"M": 6}):
        with pytest.raises(ShapeError, match=r"index 6 for dimension 0 of 'H' \(size 6\)") as info:
            k(idx, weights)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_read_in_the_subscript_is_checked_too() -> None:
    # the index tensor is shorter than the range of b: idx(b) itself reads out of range
    src = (
        "def f(int32(K) idx, float(B) W, float(V) Z) -> (float(V) H) {\n"
        "    H(idx(b)) +=! W(b) where b in 0:B\n"
        "}\n"
    )
    args = (np.array([0, 1], np.int32), np.ones(3, np.float32), np.zeros(4, np.float32))
    for k in _both(src):
        with pytest.raises(ShapeError, match=r"index 2 out of range for dimension 0 of 'idx'"):
            k(*args)


def test_write_check_survives_the_disk_cache(tmp_path: Path) -> None:
    table = np.ones((4, 2), np.float32)
    d_out = np.ones((2, 2), np.float32)
    for _ in range(2):  # the second define loads the entry the first one wrote
        k = compiler.define(EMBEDDING_GRAD, target="llvm", cache=C.CompileCache(tmp_path))
        with pytest.raises(ShapeError, match=r"write out of range: index 4 for dimension 0"):
            k(table, np.array([1, 4], np.int32), d_out)
    assert len(list(tmp_path.glob("*.tcc"))) == 1


# ------------------------------------------------------------------ structure


def test_build_marks_the_write_as_non_affine() -> None:
    (poly,) = build_statements(_ranged(EMBEDDING_GRAD))
    assert poly.nonaffine_write is not None
    assert poly.nonaffine_write.dims == (0,)
    want = isl.Map(
        "[V, D, B] -> { S0[b, d] -> E_grad[t, d] : 0 <= b < B and 0 <= d < D and 0 <= t < V }"
    )
    m = 2**63 - 1  # sizes are positive int64s (isl_bridge's context)
    context = isl.Set(f"[V, D, B] -> {{ : 0 < V <= {m} and 0 < D <= {m} and 0 < B <= {m} }}")
    got = poly.write.intersect_params(context)
    assert got.is_equal(want.intersect_params(context))
    assert poly.nonaffine_write.may_write.is_equal(poly.write)
    assert not poly.write.is_single_valued()  # a may-write, never an exact one


def test_schedule_is_serial_with_an_init_over_the_box() -> None:
    init, main = schedule(_ranged(EMBEDDING_GRAD)).nests
    assert init.kind is NestKind.INIT and init.outer == ("d0", "d1")
    box = isl.Set("[V, D, B] -> { I0[d0, d1] : 0 <= d0 < V and 0 <= d1 < D }")
    assert init.domain.is_equal(box.intersect_params(init.domain.params()))
    assert main.kind is NestKind.STMT
    assert not main.parallel and not main.accumulate
    assert main.write_checks == (0,)


def test_lowered_scatter_has_no_parallel_loop_and_a_note() -> None:
    lowered = pipeline.lower(_ranged(EMBEDDING_GRAD))
    loops = _loops(lowered.function)
    scatter_loops = [f for f in loops if f.var in ("b", "d")]
    assert len(scatter_loops) == 2
    assert all(f.kind is LoopKind.SERIAL for f in scatter_loops)
    assert [c.write for c in lowered.checks] == [True]
    assert lowered.notes == (
        "statement 0 (E_grad(idx(b), d) +=! O_grad(b, d) where b in 0:B, d in 0:D): "
        "serial: data-dependent scatter",
    )


def test_tcc_compile_emit_loops_prints_the_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "emb.tc"
    path.write_text(EMBEDDING + "\n")
    assert cli.main(["compile", str(path), "--grad", "--emit", "loops"]) == 0
    out = capsys.readouterr().out
    assert "// statement 0 (E_grad(idx(b), d) +=! O_grad(b, d)" in out
    assert "serial: data-dependent scatter" in out
    assert "E_grad[int64(idx[b]), d]" in out
