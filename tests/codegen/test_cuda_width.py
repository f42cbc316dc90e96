"""32-bit index versions of CUDA kernels (`cuda.cuda_width`): the PTX of the 32-bit
softmax, matmul and conv2d kernels has no 64-bit division and fewer instructions; the
host proves from the sizes when every index fits in `int`; both versions agree with
NumPy on target "cuda-emulated" at odd sizes (the 64-bit one selected by lowering
`INT32_LIMIT`, not by allocating 2^31 elements); short constant loops are unrolled."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from compiler.cuda import cuda_width
from compiler.cuda.cuda import emit_cuda
from compiler.cuda.cuda_options import CudaOptions
from compiler.cuda.cuda_width import fits_int32, narrow_program
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.kernel import define
from compiler.poly.ranges import infer_ranges
from compiler.runtime.cuda import compile_cuda

ROOT = Path(__file__).resolve().parents[2]
HAS_NVRTC = importlib.util.find_spec("cuda") is not None and (
    importlib.util.find_spec("cuda.bindings") is not None
)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
EMULATED = "cuda-emulated"


def _program(text: str, options: CudaOptions | None = None):  # noqa: ANN202
    return compile_cuda(infer_ranges(check_def(parse(text).get(None))), options)


def _example(name: str) -> str:
    return (ROOT / "examples" / f"{name}.tc").read_text()


def _ptx_by_kernel(ptx: str) -> dict[str, list[str]]:
    """Each `.entry`'s instructions (not directives, labels, braces or comments)."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in ptx.splitlines():
        entry = re.match(r"\.visible \.entry (\w+)\(", line)
        if entry:
            current = found.setdefault(entry.group(1), [])
            continue
        text = line.strip()
        if re.match(r"(@!?%p\d+ )?[a-z]", text) and not text.endswith(":"):
            current.append(text)
    return found


def _ptx(program, narrow: bool) -> dict[str, list[str]]:  # noqa: ANN001
    from compiler.cuda.cuda_driver import compile_source

    gpu = narrow_program(program.gpu) if narrow else program.gpu
    index32 = {k.name for k in gpu.kernels} if narrow else set()
    source = emit_cuda(gpu, index32=index32)
    return _ptx_by_kernel(compile_source(source, arch="compute_90").decode())


WIDE_DIV = re.compile(r"\b(div|rem)\.[su]64\b")


@pytest.mark.skipif(not HAS_NVRTC, reason="needs cuda-bindings and nvidia-cuda-nvrtc")
@pytest.mark.parametrize("example", ["softmax", "matmul", "conv2d"])
def test_32_bit_kernels_have_no_64_bit_division_and_fewer_instructions(example: str) -> None:
    program = _program(_example(example))
    wide, narrow = _ptx(program, False), _ptx(program, True)
    assert set(narrow) == {f"{k}_i32" for k in wide}
    shared = {k.name for k in program.gpu.kernels if k.variant == "shared"}
    for name, instructions in wide.items():
        if name in shared:  # cuda_shared writes its own index arithmetic (not narrowed)
            continue
        small = narrow[f"{name}_i32"]
        assert not any(WIDE_DIV.search(i) for i in small), name
        assert len(small) < len(instructions), (name, len(small), len(instructions))
        assert any(re.match(r"(mad\.lo|add|mul\.lo)\.s32", i) for i in small), name
    # the collapsed index's decomposition is 64-bit division in the 64-bit version
    if example == "softmax":
        assert any(WIDE_DIV.search(i) for i in wide["softmax_k1"])


def test_the_host_proves_from_the_sizes_when_indices_fit() -> None:
    program = _program(_example("softmax"))
    k1 = next(k for k in program.gpu.kernels if k.name == "softmax_k1")  # N x D elements

    def covering(sizes: dict[str, int]) -> tuple[int, int, int]:
        # the collapsed kernel's grid (at these sizes the host would run its grid variant)
        return (-(-sizes["N"] * sizes["D"] // k1.block), 1, 1)

    small = {"N": 7, "D": 13}
    assert fits_int32(k1, program.gpu, small, program.grid(k1, small))
    # 2^16 * 2^15 = 2^31 elements: their offsets no longer fit (nothing is allocated)
    big = {"N": 2**16, "D": 2**15}
    assert not fits_int32(k1, program.gpu, big, covering(big))
    # with a grid covering the band, the value that ends the grid-stride loop is
    # about twice the extent: it must fit too
    over = {"N": 2**16, "D": 2**15 - 64}
    assert not fits_int32(k1, program.gpu, over, covering(over))
    under = {"N": 2**16, "D": 2**14 - 64}
    assert fits_int32(k1, program.gpu, under, covering(under))


def test_a_read_offset_past_int32_selects_64_bits() -> None:
    """A row sum of a (2^16 + 1) x 2^15 input: the band's rows and the loop's terms fit
    in int, the read's offsets n * D + d do not (at 2^16 rows the last is 2^31 - 1)."""
    program = _program("def rows(float(N, D) X) -> (S) { S(n) +=! X(n, d) }")
    plain = next(k for k in program.gpu.kernels if k.name == "rows_k0")
    grid = (256, 1, 1)  # one row a thread (these sizes would launch a split variant)
    assert not fits_int32(plain, program.gpu, {"N": 2**16 + 1, "D": 2**15}, grid)
    assert fits_int32(plain, program.gpu, {"N": 2**16, "D": 2**15}, grid)


def test_a_thread_count_past_int32_selects_64_bits() -> None:
    program = _program(_example("softmax"))
    k1 = next(k for k in program.gpu.kernels if k.name == "softmax_k1")
    sizes = {"N": 3, "D": 5}
    assert not fits_int32(k1, program.gpu, sizes, (2**23, 1, 1))  # 2^23 * 256 threads


CASES = {
    "softmax": (_example("softmax"), lambda s: {"X": (s[0], s[1])}),
    "matmul": (_example("matmul"), lambda s: {"A": (s[0], s[1]), "B": (s[1], s[2])}),
    "conv2d": (
        _example("conv2d"),
        lambda s: {"I": (s[0], 2, s[1] + 2, s[2] + 1), "W1": (3, 2, 3, 2), "B": (3,)},
    ),
}


def _numpy(name: str, args: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """NumPy (float64) references."""
    if name == "softmax":
        x = args["X"].astype(np.float64)
        m = x.max(1)
        e = np.exp(x - m[:, None])
        return e / e.sum(1)[:, None], m, e, e.sum(1)
    if name == "matmul":
        return (args["A"].astype(np.float64) @ args["B"].astype(np.float64),)
    i, w, b = (args[n].astype(np.float64) for n in ("I", "W1", "B"))
    kh, kw = w.shape[2:]
    h, ww = i.shape[2] - kh + 1, i.shape[3] - kw + 1
    out = np.zeros((i.shape[0], w.shape[0], h, ww))
    for y in range(kh):
        for x in range(kw):
            out += np.einsum("nchw,mc->nmhw", i[:, :, y : y + h, x : x + ww], w[:, :, y, x])
    return (out + b[None, :, None, None],)


@needs_gxx
@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sizes", [(1, 1, 1), (7, 13, 5), (17, 3, 11)], ids=str)
def test_both_versions_match_numpy_in_emulation(
    name: str, sizes: tuple[int, int, int], width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if width == 64:  # every index of these sizes past the lowered limit
        monkeypatch.setattr(cuda_width, "INT32_LIMIT", 1)
    text, shapes = CASES[name]
    rng = np.random.default_rng(sum(sizes))
    args = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes(sizes).items()}
    k = define(text, target=EMULATED)
    got = k(*args.values())
    for g, want in zip(got, _numpy(name, args), strict=True):
        np.testing.assert_allclose(g, want, rtol=2e-5, atol=2e-5)
    plan = k._native.plan(_sizes_of(k, args))
    assert plan and all(k._native.is_narrow(kernel) == (width == 32) for kernel, _ in plan)


def _sizes_of(k, args):  # noqa: ANN001, ANN202
    from compiler.shapes import bind_sizes

    return bind_sizes(k.ranged, {n: a.shape for n, a in args.items()})


@needs_gxx
@pytest.mark.parametrize("width", [32, 64])
def test_a_gather_with_a_bounds_check_in_both_versions(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if width == 64:
        monkeypatch.setattr(cuda_width, "INT32_LIMIT", 1)
    k = define("def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }",
               target=EMULATED)  # fmt: skip
    E = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    idx = np.array([4, 0, 2, 2, 1, 3, 0], np.int32)
    np.testing.assert_array_equal(k(E, idx)[0], E[idx])


def test_short_constant_loops_are_unrolled() -> None:
    source = _program("def rows(float(N, 3) A) -> (O) { O(i) +=! A(i, k) * A(i, k) }").source
    lines = source.splitlines()
    pragmas = [i for i, line in enumerate(lines) if line.strip() == "#pragma unroll"]
    assert pragmas
    assert all(re.match(r"\s*for \(long long \w+ = 0LL; \w+ < 3LL;", lines[i + 1]) for i in pragmas)
    # a loop over a size is not (the shared-memory tiling's own loops over its constant
    # register tile are, cuda.cuda_shared: the mapped kernels are checked without it)
    plain = _program(_example("matmul"), CudaOptions(shared_memory=False)).source
    assert "#pragma unroll" not in plain


@needs_gxx
def test_unrolled_reduction_matches_numpy() -> None:
    k = define("def rows(float(N, 3) A) -> (O) { O(i) +=! A(i, k) * A(i, k) }", target=EMULATED)
    A = np.random.default_rng(3).standard_normal((11, 3)).astype(np.float32)
    np.testing.assert_allclose(k(A)[0], (A.astype(np.float64) ** 2).sum(1), rtol=1e-5)


def _examples_and_gradients() -> list[tuple[str, str]]:
    from compiler.backward import grad

    found = []
    for path in sorted((ROOT / "examples").glob("*.tc")):
        found += [
            (path.stem, path.read_text()),
            (f"{path.stem}_grad", grad(path.read_text(), None)),
        ]
    return found


SOURCES = _examples_and_gradients()


@pytest.mark.skipif(not HAS_NVRTC, reason="needs cuda-bindings and nvidia-cuda-nvrtc")
@pytest.mark.parametrize(("name", "text"), SOURCES, ids=[s[0] for s in SOURCES])
def test_nvrtc_compiles_the_32_bit_version_of_every_kernel(name: str, text: str) -> None:
    entries = _ptx(_program(text), narrow=True)
    assert entries and all(n.endswith("_i32") for n in entries)


@needs_gxx
@pytest.mark.parametrize("example", ["conv2d", "softmax", "layernorm", "maxpool"])
def test_gradients_in_64_bits_match_llvm(example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.codegen.test_cuda_emulated import ODD, _compare, _inputs

    monkeypatch.setattr(cuda_width, "INT32_LIMIT", 1)
    text = _example(example)
    # no compile cache: a program another test compiled chose its widths without the patch
    ref, got = define(text), define(text, target=EMULATED, cache=None)
    args = _inputs(ref, ODD, (0, 2))
    _compare(ref, got, args)
    outs = ref(*args)
    rng = np.random.default_rng(1)
    seeds = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
    want = ref.vjp(*args, grad_outputs=seeds)
    have = got.vjp(*args, grad_outputs=seeds)
    for w, g in zip(want, have, strict=True):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    programs = [got._native, got.grad._native]
    assert all(not p.is_narrow(k) for p in programs for plan in p._plans.values() for k, _ in plan)
