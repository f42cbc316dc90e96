"""target="cuda-emulated": the generated CUDA C compiled by g++ with tcc's emulation
header, compared with the reference evaluator (target="interp"): every example and its
gradient, every TC construct of the LLVM end-to-end cases, float32 and float64, odd
sizes (1, primes), block and grid sizes that do not divide the extents."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from compiler.cuda.cuda_options import CudaOptions
from compiler.diagnostics import OptionsError, ShapeError
from compiler.kernel import define
from tests.codegen.test_llvm_e2e import CASES

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.tc"))
ODD = {"N": 3, "M": 5, "K": 7, "C": 2, "H": 11, "W": 7, "KH": 3, "KW": 2, "D": 13, "V": 7}
ONES = dict.fromkeys(ODD, 1) | {"H": 3, "W": 2, "KH": 3, "KW": 2, "D": 1, "V": 1}
# reductions of 16 terms or more (warp reductions, cuda.cuda_warp: softmax's rows,
# the convolution's weight gradient)
LONG = ODD | {"D": 37, "H": 18, "W": 19, "K": 33}
SMALL = CudaOptions(block=32, grid=3)  # grid-stride loops: each thread does several elements
# thread tiles at any band size (cuda.cuda_tile): 3 x 2 outputs a thread, with rests
TILED = CudaOptions(block=64, thread_tile=(3, 2), tile_threads=1)


def _inputs(kernel, sizes: dict[str, int], ints: tuple[int, int], seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    args = []
    for t in kernel.ranged.checked.inputs:
        shape = tuple(sizes[d.name] if hasattr(d, "name") else d.value for d in t.dims or ())
        dtype = np.dtype(t.dtype.value)
        if dtype.kind in "iu":
            args.append(rng.integers(*ints, size=shape).astype(dtype))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def _compare(ref, got_kernel, args: list) -> None:
    out = None
    if ref._accumulating:
        shapes = ref.output_shapes(*args)
        out = {
            k: np.full(shapes[k], 0.5, np.dtype(ref.ranged.checked.tensor(k).dtype.value))
            for k in ref._accumulating
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args, out=None if out is None else {k: v.copy() for k, v in out.items()})
        got = got_kernel(*args, out=None if out is None else {k: v.copy() for k, v in out.items()})
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = 1e-4 if w.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _variants(src: str) -> list[str]:
    return [src.replace("FT", "float")] + ([src.replace("FT", "double")] if "FT" in src else [])


@pytest.mark.parametrize(("case", "src", "ints"), CASES, ids=[c[0] for c in CASES])
def test_construct_matches_interp(case: str, src: str, ints: tuple[int, int]) -> None:
    for text in _variants(src):
        ref = define(text)
        for options in (None, SMALL, TILED):
            got = define(text, target="cuda-emulated", options=options)
            _compare(ref, got, _inputs(ref, ODD, ints))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("options", [SMALL, TILED], ids=["small", "tiled"])
def test_example_and_gradient_match_interp(path: Path, options: CudaOptions) -> None:
    src = path.read_text()
    for text in (src, re.sub(r"\bfloat\b", "double", src)):
        ref = define(text)
        got = define(text, target="cuda-emulated", options=options)
        for sizes in (ODD, ONES, LONG):
            args = _inputs(ref, sizes, (0, 2))
            _compare(ref, got, args)
            outs = ref(*args)
            rng = np.random.default_rng(1)
            seeds = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
            want = ref.vjp(*args, grad_outputs=seeds)
            have = got.vjp(*args, grad_outputs=seeds)
            for w, g in zip(want, have, strict=True):
                if w is None:
                    assert g is None
                    continue
                tol = 1e-4 if w.dtype == np.float32 else 1e-10
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_data_dependent_scatter_runs_with_atomics_and_matches_interp() -> None:
    src = "def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"
    ref = define(src)
    got = define(src, target="cuda-emulated")
    serial = define(src, target="cuda-emulated", options=CudaOptions(atomics=False))
    assert "atomicAdd(&E_grad[" in got.grad._native.source
    assert "atomicAdd(" not in serial.grad._native.source.replace("tcc_report", "")
    rng = np.random.default_rng(0)
    E = rng.standard_normal((5, 3)).astype(np.float32)
    idx = rng.integers(0, 5, size=11).astype(np.int32)
    dO = rng.standard_normal((11, 3)).astype(np.float32)
    want, _ = ref.vjp(E, idx, grad_outputs=(dO,))
    for k in (got, serial):
        have, none = k.vjp(E, idx, grad_outputs=(dO,))
        assert none is None
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_integer_histogram_runs_on_one_thread() -> None:
    src = "def count(int32(N) I) -> (int32(5) H) { H(I(i)) +=! 1 where i in 0:N }"
    got = define(src, target="cuda-emulated")
    assert "(one thread: " in got._native.source and "atomicAdd(&H" not in got._native.source
    I = np.array([0, 4, 4, 1, 4, 0, 2], np.int32)  # noqa: E741
    np.testing.assert_array_equal(got(I)[0], define(src)(I)[0])


def test_indirect_read_out_of_range_is_the_same_shape_error() -> None:
    src = "def f(float(V, D) E, int32(N) idx) -> (O) { O(n, d) = E(idx(n), d) }"
    idx = np.array([0, 9, 1], dtype=np.int32)
    E = np.ones((4, 2), np.float32)
    with pytest.raises(ShapeError) as want:
        define(src)(E, idx)
    with pytest.raises(ShapeError) as got:
        define(src, target="cuda-emulated")(E, idx)
    assert got.value.message == want.value.message
    assert "'E'" in got.value.message and "index 9" in got.value.message


@pytest.mark.parametrize(
    "options",
    [
        {"block": 0},
        {"block": 2048},
        {"block": True},
        {"grid": 0},
        {"fast_math": 1},
        {"arch": "hopper"},
    ],
)
def test_bad_cuda_options_are_options_errors(options: dict) -> None:
    with pytest.raises(OptionsError, match="CudaOptions"):
        CudaOptions(**options)


def test_cuda_target_takes_cuda_options_only() -> None:
    from compiler.options import Options

    with pytest.raises(OptionsError, match="CudaOptions"):
        define("def f(float(N) A) -> (B) { B(i) = A(i) }", target="cuda-emulated",
               options=Options())  # fmt: skip


def test_float16_is_a_clear_error() -> None:
    with pytest.raises(OptionsError, match="float16"):
        define("def f(half(N) A) -> (B) { B(i) = A(i) }", target="cuda-emulated")


def test_fast_math_uses_intrinsics_and_stays_close() -> None:
    src = "def f(float(N) A) -> (B) { B(i) = exp(A(i)) + log(1.0 + A(i) * A(i)) }"
    fast = define(src, target="cuda-emulated", options=CudaOptions(fast_math=True))
    plain = define(src, target="cuda-emulated")
    assert "__expf(" in fast._native.source and "__logf(" in fast._native.source
    assert "expf(" in plain._native.source and "__expf" not in plain._native.source
    A = np.linspace(-2, 2, 37, dtype=np.float32)
    np.testing.assert_allclose(fast(A)[0], define(src)(A)[0], rtol=1e-5)


def _on_fibers(kernel: object, word: str) -> None:
    """Make `kernel`'s emulation insert `word` at the start of every kernel body, so
    each runs on the fiber launcher (cuda.cuda_fibers) instead of the fast path."""
    from compiler.cuda.cuda_emulation import EmulatedModule, build_emulated
    from compiler.runtime.cuda import _Kernels

    program = kernel._native

    def build(sub: object) -> EmulatedModule:
        source = re.sub(r"(__global__ void [^{]*\{\n)", lambda m: m[1] + word + "\n",
                        program._emit(sub))  # fmt: skip
        library = build_emulated(source, sub)
        assert library.fibers == {k.name for k in sub.kernels}
        return EmulatedModule(library)

    vars(program)["_emulation"] = _Kernels(program.gpu, build)


@pytest.mark.parametrize("word", ["__syncthreads();", "__shared__ float tile[32];"])
def test_generated_kernels_run_on_fibers(word: str) -> None:
    """A generated kernel with a barrier or shared memory runs (as fibers, one stack a
    thread), and equals the fast path: here with thread tiles' phases and the warp
    reductions (tcc_warp_sum as the GPU's __shfl_down_sync halving)."""
    src = "def r(float(N, D) I, float(D) b) -> (O) { O(n) +=! I(n, d) * b(d) }"
    opts = CudaOptions(block=64)
    plain, fibers = (
        define(src, target="cuda-emulated", options=opts),
        define(src, target="cuda-emulated", options=opts),
    )
    _on_fibers(fibers, word)
    rng = np.random.default_rng(1)
    for n, d in [(1, 1), (3, 33), (67, 5)]:
        x, b = rng.standard_normal((n, d), np.float32), rng.standard_normal(d, np.float32)
        np.testing.assert_array_equal(fibers(x, b)[0], plain(x, b)[0])
    mm = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    opts = CudaOptions(block=32, tile_threads=1, thread_tile=(2, 2))
    plain, fibers = (
        define(mm, target="cuda-emulated", options=opts),
        define(mm, target="cuda-emulated", options=opts),
    )
    _on_fibers(fibers, word)
    A, B = rng.standard_normal((7, 5), np.float32), rng.standard_normal((5, 70), np.float32)
    np.testing.assert_array_equal(fibers(A, B)[0], plain(A, B)[0])


def test_cuda_target_objects_compile_for_a_registry() -> None:
    from compiler.runtime.cuda import TARGET_OBJECTS

    ranged = define("def f(float(N) A) -> (B) { B(i) = A(i) + 1.0 }").ranged
    program = TARGET_OBJECTS["cuda-emulated"].compile(ranged, CudaOptions(block=64))
    assert program.emulated and program.options.block == 64
    B = np.zeros(5, np.float32)
    program.run({"A": np.arange(5, dtype=np.float32)}, {"N": 5}, {"B": B})
    np.testing.assert_array_equal(B, np.arange(5) + 1)
    assert (
        TARGET_OBJECTS["cuda"].options_type is CudaOptions and not TARGET_OBJECTS["cuda"].emulated
    )


WARP_OPS = {
    "sum": ("O(n) +=! exp(I(n, d)) * b(d)", lambda x, b: (np.exp(x) * b).sum(1)),
    "prod": ("O(n) *=! 1.0 + I(n, d) * b(d) * 0.0625", lambda x, b: (1 + x * b * 0.0625).prod(1)),
    "max": ("O(n) max=! I(n, d) * b(d)", lambda x, b: (x * b).max(1)),
    "min": ("O(n) min=! I(n, d) * b(d)", lambda x, b: (x * b).min(1)),
}


@pytest.mark.parametrize("op", list(WARP_OPS))
@pytest.mark.parametrize("dtype", ["float", "double"])
def test_warp_reductions_match_numpy(op: str, dtype: str) -> None:
    """Small bands of long reductions run a warp an output (cuda.cuda_warp): the
    lanes' partial results combined in the GPU's shuffle order, then `init op total`;
    lengths around 32 (lanes without a term, lanes with one more), NaN for max/min."""
    stmt, want = WARP_OPS[op]
    src = f"def r({dtype}(N, D) I, {dtype}(D) b) -> (O) {{ {stmt} }}"
    kernel = define(src, target="cuda-emulated", options=CudaOptions(block=64))
    program = kernel._native
    np_dtype = np.float32 if dtype == "float" else np.float64
    rng = np.random.default_rng(5)
    for n, d in [(3, 16), (5, 31), (2, 33), (4, 64), (3, 101)]:
        x, b = rng.standard_normal((n, d)).astype(np_dtype), rng.standard_normal(d).astype(np_dtype)
        if op in ("max", "min"):
            x[1, d // 2] = np.nan  # NaN propagates, whichever lane holds it
        grids = program.grids({"N": n, "D": d})
        assert [k.name for k, g in zip(program.gpu.kernels, grids, strict=True) if g[0]] == [
            "r_k0w"
        ]
        (got,) = kernel(x, b)
        tol = 1e-5 if dtype == "float" else 1e-12
        np.testing.assert_allclose(got, want(x, b), rtol=tol, atol=tol)


def test_warp_reductions_only_for_long_coalesced_reductions() -> None:
    """Below 16 terms, above `warp_outputs` outputs, for a column sum (whose lanes would
    read 32 rows apart) and with `warp_outputs=0`, one thread an output runs."""
    rows = "def r(float(N, D) I) -> (O) { O(n) +=! I(n, d) }"
    cols = "def c(float(N, D) I) -> (O) { O(d) +=! I(n, d) }"
    small = CudaOptions(block=64, warp_outputs=8)
    program = define(rows, target="cuda-emulated", options=small)._native
    # r_k0s1, r_k0s2: the split form (cuda.cuda_split), for 64 partials an output or more
    assert [k.name for k in program.gpu.kernels] == ["r_k0", "r_k0s1", "r_k0s2", "r_k0w"]
    for sizes, want in [({"N": 8, "D": 16}, [0, 0, 0, 1]), ({"N": 8, "D": 15}, [1, 0, 0, 0]),
                        ({"N": 9, "D": 64}, [1, 0, 0, 0])]:  # fmt: skip
        assert [int(program.grid(k, sizes)[0] > 0) for k in program.gpu.kernels] == want

    def warps(src: str, options: CudaOptions | None = None) -> list[str]:
        kernels = define(src, target="cuda-emulated", options=options)._native.gpu.kernels
        return [k.name for k in kernels if k.name.endswith("w")]

    assert warps(cols) == []
    assert warps(rows, CudaOptions(warp_outputs=0)) == []
    assert warps(rows, CudaOptions(block=48)) == []


def test_exactly_one_variant_runs_where_several_apply() -> None:
    """A band both large enough for thread tiles (tile_threads=1) and small enough for a
    warp reduction runs the tiles only: running both would add the terms twice into an
    output that `+=` accumulates into."""
    src = "def f(double(N, D) I, double(M, D) W) -> (O) { O(n, m) += I(n, d) * W(m, d) }"
    options = CudaOptions(block=64, thread_tile=(2, 2), tile_threads=1)
    kernel = define(src, target="cuda-emulated", options=options)
    program = kernel._native
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((5, 40)), rng.standard_normal((3, 40))
    (out,) = kernel(x, w, out={"O": np.full((5, 3), 0.5)})
    np.testing.assert_allclose(out, 0.5 + x @ w.T, rtol=1e-12, atol=1e-12)
    grids = program.grids({"N": 5, "D": 40, "M": 3})
    ran = [k.name for k, g in zip(program.gpu.kernels, grids, strict=True) if g[0]]
    assert ran == ["f_k0t1", "f_k0t2"]  # no whole strip of 64 columns: no f_k0t0
    assert {k.name for k in program.gpu.kernels} >= {"f_k0", "f_k0w"}


def test_variant_kernels_are_built_when_first_selected() -> None:
    """`define` builds the one-thread-an-output kernels (their 32-bit versions,
    cuda.cuda_width); a thread-tile kernel is built by the first call whose sizes
    select it (runtime.cuda._Kernels), and only once."""
    src = "def mm(double(M, K) A, double(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    options = CudaOptions(block=64, thread_tile=(2, 2), tile_threads=4)
    kernel = define(src, target="cuda-emulated", options=options)
    built = kernel._native._emulation._modules
    assert set(built) == {"mm_k0_i32"}
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((3, 5)), rng.standard_normal((5, 3))
    np.testing.assert_allclose(kernel(A, B)[0], A @ B, rtol=1e-12, atol=1e-12)
    assert set(built) == {"mm_k0_i32"}  # 9 outputs: fewer than 2 * 2 * 4
    A, B = rng.standard_normal((8, 5)), rng.standard_normal((5, 130))
    np.testing.assert_allclose(kernel(A, B)[0], A @ B, rtol=1e-12, atol=1e-12)
    tiles = {"mm_k0t0_i32", "mm_k0t1_i32"}  # 2 strips of 64, 2 columns left
    assert set(built) == {"mm_k0_i32"} | tiles
    module = built["mm_k0t0_i32"]
    kernel(A, B)
    assert built["mm_k0t0_i32"] is module and built["mm_k0t1_i32"] is module


# fuzz seed 127208: a copy loop's extent is a select (`O`'s second dimension is
# `N == 1 ? 1 : 2`), printed `s1 < N == 1LL ? 1LL : 2LL`, which C reads as
# `(s1 < N) == 1 ? 1 : 2`: an endless loop that wrote past `O_old` (a segfault)
SELECT_EXTENT = """def f(float(N) A, float(N) B) -> (O) {
    O(i1, i2) = 0.5 + A(i1) where i2 in 0:min(N, 2)
    O(i3, i4) = O(i3, i4 - 1) + B(i3 / 2) where i3 in 0:N, i4 in 1:min(N, 2)
}"""


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_a_loop_bound_that_is_a_select(n: int) -> None:
    from compiler.frontend.check import check_def
    from compiler.frontend.parser import parse
    from compiler.poly.ranges import infer_ranges
    from compiler.runtime.cuda import cuda_source

    ref = define(SELECT_EXTENT, target="interp")
    got = define(SELECT_EXTENT, target="cuda-emulated")
    _compare(ref, got, _inputs(ref, {"N": n}, (0, 3), seed=n))
    text = cuda_source(infer_ranges(check_def(parse(SELECT_EXTENT).get(None))))
    assert "< N == 1LL" not in text and "< (N == 1LL ? 1LL : 2LL)" in text
