"""target="llvm" end to end: every example and every TC construct, compared with the
reference evaluator (target="interp") in float32 and float64, on 1 and 2 threads.

Programs are written with `FT` for the float type, replaced by `float` and `double`.
Integer inputs draw from a per-case range (`ints`), so index tensors stay in range and
divisions meet negative operands and zero.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from compiler import loops
from compiler.cpu.model import lower
from compiler.diagnostics import ShapeError
from compiler.frontend.check import check_def
from compiler.kernel import define
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from compiler.shapes import output_shapes

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.tc"))
SIZES = {"N": 5, "M": 3, "K": 4, "C": 2, "H": 9, "W": 8, "KH": 3, "KW": 2, "D": 6, "V": 7}

# (id, source, integer input range [lo, hi))
CASES: list[tuple[str, str, tuple[int, int]]] = [
    ("lets", "def f(FT(N, M) A) -> (O) { O(i) +=! y * y + z where y = A(i, j) + 1.0, z = j }",
     (0, 2)),
    ("exists", "def f(FT(N) A, FT(M) B) -> (O) { O(i) = A(i) * 2.0 where exists B(i) }", (0, 2)),
    ("ternary_guard", "def f(FT(N) A) -> (O) { O(i) = i > 0 ? A(i - 1) : 7.0 where i in 0:N }",
     (0, 2)),
    ("and_guard", "def f(FT(N) A) -> (O) "
     "{ O(i) = (i > 0 && A(i) > 0.0) || A(i) < -1.0 ? 1.0 : -1.0 }", (0, 2)),
    ("int_div_mod", "def f(int32(N) A, int32(N) B) -> (Q, R, S, T) "
     "{ Q(i) = A(i) / B(i)  R(i) = A(i) % B(i)  S(i) = A(i) / 3  T(i) = A(i) % -3 }", (-9, 10)),
    ("int_div_index", "def f(FT(N) A) -> (O) { O(i) = A(i / 2) + A(i % 3) where i in 0:N }",
     (0, 2)),
    ("casts", "def f(FT(N) A, int32(N) I) -> (O, P) "
     "{ O(i) = FT(int32(A(i) * 3.0)) + FT(i)  P(i) = int8(I(i) * 50) }", (-5, 5)),
    ("indirect", "def f(FT(V, D) E, int32(N) idx) -> (O) { O(n, d) = E(idx(n), d) }", (0, 7)),
    ("min_max_times", "def f(FT(N, M) A) -> (P, Q, R) "
     "{ P(i) max=! A(i, j)  Q(i) min=! A(i, j)  R(i) *=! A(i, j) }", (0, 2)),
    ("int_min_max", "def f(int32(N, M) A) -> (P, Q, S) "
     "{ P(i) max=! A(i, j)  Q(i) min=! A(i, j)  S(i) +=! A(i, j) }", (-50, 50)),
    ("inplace_after_reduction", "def f(FT(N, K) A, FT(K, M) B, FT(M) bias) -> (C) "
     "{ C(i, j) +=! A(i, k) * B(k, j)  C(i, j) = C(i, j) + bias(j) }", (0, 2)),
    ("multi_output", "def f(FT(N, M) A) -> (S, T) { S(i) +=! A(i, j)  T(i, j) = A(i, j) / S(i) }",
     (0, 2)),
    ("zero_d", "def f(FT(N) A, FT b) -> (O, P) { O +=! A(i) * b  P = O + b }", (0, 2)),
    ("nonzero_min", "def f(FT(N) A) -> (O) { O(i) = A(i - 1) * 2.0 }", (0, 2)),
    ("non_rectangular", "def f(FT(N) A) -> (O) { O(i) +=! A(j) where i in 0:N, j in 0:i + 1 }",
     (0, 2)),
    ("strided", "def f(FT(H) A, FT(KW) W) -> (O) { O(i) +=! A(2 * i + k) * W(k) }", (0, 2)),
    ("scatter", "def f(FT(N) A, FT(K) W) -> (O) { O(i + k) +=! A(i) * W(k) }", (0, 2)),
    ("self_read_other_element", "def f(FT(N) A) -> (O) "
     "{ O(i) = A(i)  O(i) = O(i) + O(N - 1 - i) where i in 0:N }", (0, 2)),
    ("accumulate_into_out", "def f(FT(N, M) A) -> (O) { O(i) += A(i, j) }", (0, 2)),
    ("builtins", "def f(FT(N) A, FT(N) B) -> (O) "
     "{ O(i) = exp(A(i)) + tanh(B(i)) + fmax(A(i), B(i)) + min(A(i), B(i)) + max(A(i), 0.5) }",
     (0, 2)),
    ("bools", "def f(FT(N) A, FT(N) B) -> (O, P) "
     "{ O(i) = A(i) < B(i) || !(A(i) > 0.0)  P(i) = O(i) ? A(i) : B(i) }", (0, 2)),
    ("affine_where", "def f(FT(N, M) A) -> (O) { O(i) +=! A(i, j) where j - i in 0:2 }", (0, 2)),
]  # fmt: skip


def _inputs(kernel, ints: tuple[int, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for t in kernel.ranged.checked.inputs:
        shape = tuple(SIZES[d.name] if hasattr(d, "name") else d.value for d in t.dims or ())
        dtype = np.dtype(t.dtype.value)
        if dtype.kind in "iu":
            args.append(rng.integers(*ints, size=shape).astype(dtype))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def _compare(src: str, ints: tuple[int, int], threads: int, name: str | None = None) -> None:
    ref = define(src, name)
    fast = define(src, name, target="llvm", options=Options(threads=threads))
    args = _inputs(ref, ints)
    out = None
    if ref._accumulating:
        shapes = ref.output_shapes(*args)
        out = {k: np.full(shapes[k], 0.5, np.dtype(ref.ranged.checked.tensor(k).dtype.value))
               for k in ref._accumulating}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args, out=None if out is None else {k: v.copy() for k, v in out.items()})
        got = fast(*args, out=None if out is None else {k: v.copy() for k, v in out.items()})
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        rtol = 1e-4 if w.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def _variants(src: str) -> list[str]:
    return [src.replace("FT", "float")] + ([src.replace("FT", "double")] if "FT" in src else [])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("case", "src", "ints"), CASES, ids=[c[0] for c in CASES])
def test_construct_matches_interp(case: str, src: str, ints: tuple[int, int], threads: int) -> None:
    for text in _variants(src):
        _compare(text, ints, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_matches_interp(path: Path, threads: int) -> None:
    src = path.read_text()
    for text in (src, re.sub(r"\bfloat\b", "double", src)):
        _compare(text, (0, 2), threads)


def test_indirect_read_out_of_range_is_a_shape_error_naming_the_tensor() -> None:
    src = "def f(float(V, D) E, int32(N) idx) -> (O) { O(n, d) = E(idx(n), d) }"
    fast = define(src, target="llvm")
    ref = define(src)
    idx = np.array([0, 9, 1], dtype=np.int32)
    E = np.ones((4, 2), np.float32)
    with pytest.raises(ShapeError) as want:
        ref(E, idx)
    with pytest.raises(ShapeError) as got:
        fast(E, idx)
    assert got.value.message == want.value.message
    assert "'E'" in got.value.message and "index 9" in got.value.message
    assert (got.value.span.start, got.value.span.end) == (
        want.value.span.start,
        want.value.span.end,
    )


def test_guarded_out_of_range_read_is_not_an_error() -> None:
    src = "def f(float(V) E, int32(N) idx) -> (O) { O(n) = idx(n) < V ? E(idx(n)) : -1.0 }"
    idx = np.array([0, 9, 1], dtype=np.int32)
    (got,) = define(src, target="llvm")(np.arange(4, dtype=np.float32), idx)
    np.testing.assert_array_equal(got, [0.0, -1.0, 1.0])


@pytest.mark.parametrize("case", ["lets", "int_div_mod", "scatter", "non_rectangular", "casts"])
def test_loop_ir_interpreter_agrees(case: str) -> None:
    _, src, ints = next(c for c in CASES if c[0] == case)
    text = src.replace("FT", "float")
    ref = define(text)
    ranged = infer_ranges(check_def(ref.ranged.checked.definition))
    f = lower(ranged)
    loops.verify(f)
    args = _inputs(ref, ints)
    inputs = {t.name: a for t, a in zip(ranged.checked.inputs, args, strict=True)}
    sizes = ref._bind(args)[1]
    outs = {
        t.name: np.zeros(s, np.dtype(t.dtype.value))
        for t, s in zip(ranged.checked.outputs, output_shapes(ranged, sizes).values(), strict=True)
    }
    loops.run_function(f, {**inputs, **outs}, sizes)
    for w, t in zip(ref(*args), ranged.checked.outputs, strict=True):
        np.testing.assert_allclose(outs[t.name], w, rtol=1e-5, atol=1e-6)


def test_tcc_compile_emits_loops_and_llvm() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def tcc(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "compiler", "compile", "examples/matmul.tc", *args]
        return subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)

    loops_out = tcc("--emit", "loops")
    assert loops_out.returncode == 0 and "parallel for (m = 0; m < M; m += 1)" in loops_out.stdout
    llvm_out = tcc("--emit", "llvm")
    assert llvm_out.returncode == 0 and "define void @" in llvm_out.stdout
