"""The CUDA C of every example and gradient compiles with NVRTC (cuda-bindings) and with
nvcc (warnings as errors) where they are installed; target="cuda" without a GPU is a
clear error; the gather pass leaves no atomicAdd in gradients but for data-dependent
scatters; structural facts of the mapping (coalescing, 64-bit indices, literals)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compiler.backward import grad
from compiler.cuda.cuda_options import CudaOptions
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.kernel import define
from compiler.poly.ranges import infer_ranges
from compiler.runtime.cuda import compile_cuda

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tc"))
HAS_BINDINGS = importlib.util.find_spec("cuda") is not None and (
    importlib.util.find_spec("cuda.bindings") is not None
)


def _gpu_present() -> bool:
    if not HAS_BINDINGS:
        return False
    from compiler.cuda.cuda_driver import CudaUnavailable, current_device

    try:
        current_device()
    except CudaUnavailable:
        return False
    return True


def _program(text: str, options: CudaOptions | None = None):  # noqa: ANN202
    return compile_cuda(infer_ranges(check_def(parse(text).get(None))), options)


def _sources() -> list[tuple[str, str]]:
    found = []
    for path in EXAMPLES:
        text = path.read_text()
        found.append((path.stem, text))
        found.append((f"{path.stem}_grad", grad(text, None)))
    return found


SOURCES = _sources()


@pytest.mark.skipif(not HAS_BINDINGS, reason="needs cuda-bindings (the [cuda] extra)")
@pytest.mark.parametrize(("name", "text"), SOURCES, ids=[s[0] for s in SOURCES])
def test_nvrtc_compiles_every_example_and_gradient(name: str, text: str) -> None:
    from compiler.cuda.cuda_driver import compile_source

    program = _program(text)
    ptx = compile_source(program.source, arch="compute_80").decode()
    for kernel in program.gpu.kernels:
        assert f".entry {kernel.name}(" in ptx


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_compiles_every_example_and_gradient_without_warnings(tmp_path: Path) -> None:
    for name, text in SOURCES:
        src = tmp_path / f"{name}.cu"
        src.write_text(_program(text).source)
        cmd = ["nvcc", "-ptx", "-Werror", "all-warnings", "-arch=compute_80", str(src),
               "-o", str(tmp_path / f"{name}.ptx")]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{name}: {done.stderr}"


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present")
def test_cuda_target_without_a_gpu_is_a_clear_error() -> None:
    from compiler.diagnostics import TCError

    with pytest.raises(TCError, match="GPU|cuda-bindings") as err:
        define("def f(float(N) A) -> (B) { B(i) = A(i) * 2.0 }", target="cuda")
    assert "cuda-emulated" in (err.value.diagnostics[0].hint or "")


def test_gradients_use_atomics_only_for_data_dependent_scatters() -> None:
    """The gather pass on the GPU: every affine scatter of a gradient became a gather,
    so the only kernels with atomicAdd come from data-dependent scatters."""
    texts = [t for _, t in SOURCES if "_grad" in _]
    texts.append(grad("def emb(float(V, D) E, int32(B) idx) -> (O) { O(b, d) = E(idx(b), d) }"))
    seen_atomic = 0
    for text in texts:
        program = _program(text)
        for kernel in program.gpu.kernels:
            stmt = program.statements[kernel.phase]
            if kernel.mode == "atomic":
                seen_atomic += 1
                assert stmt in program.scatters, f"atomicAdd for an affine statement {stmt}"
        assert program.source.count("atomicAdd(&") == sum(
            1 for k in program.gpu.kernels if k.mode == "atomic"
        )
    assert seen_atomic == 1  # the embedding's gradient (the corpus: tools/corpus_cuda.py)


def test_matmul_maps_n_to_threads_and_accumulates_in_a_register() -> None:
    src = (ROOT / "examples" / "matmul.tc").read_text()
    program = _program(src)
    plain = program.gpu.kernels[0]
    tiled = [k for k in program.gpu.kernels if k.variant == "tile"]
    assert plain.mode == "parallel" and plain.name == "matmul_k0"
    text = program.source
    assert "const float* __restrict__ A" in text and "float* __restrict__ C" in text
    assert "float acc = 0.0f;" in text and "acc = fmaf(A[m * K + k], B[k * N + n], acc);" in text
    # n, the innermost band loop (unit stride in C), varies fastest with the thread index
    assert re.search(r"const long long n = tcc_t % tcc_e1;", text)
    assert "long long tcc_t = ((long long)blockIdx.x * blockDim.x + threadIdx.x)" in text
    # thread tiles (cuda.cuda_tile): tiled, x rest, y rest, for large bands only
    assert [k.name for k in tiled] == ["matmul_k0t0", "matmul_k0t1", "matmul_k0t2"]
    assert all(k.phase == 0 and k.when is not None for k in program.gpu.kernels)

    def ran(sizes: dict[str, int]) -> list[str]:
        return [k.name for k in program.gpu.kernels if program.grid(k, sizes)[0] > 0]

    # a large contraction stages tiles in shared memory (cuda.cuda_shared); without it,
    # the thread tiles
    assert ran({"M": 4096, "K": 4096, "N": 4096}) == ["matmul_k0m"]
    plain_program = _program(src, CudaOptions(shared_memory=False))
    assert not [k for k in plain_program.gpu.kernels if k.variant == "shared"]
    assert [k.name for k in plain_program.gpu.kernels
            if plain_program.grid(k, {"M": 4096, "K": 4096, "N": 4096})[0] > 0] == ["matmul_k0t0"]  # fmt: skip
    # few outputs of a long reduction: split into partials over k (cuda.cuda_split)
    assert ran({"M": 64, "K": 4096, "N": 64}) == ["matmul_k0s1", "matmul_k0s2"]
    assert ran({"M": 64, "K": 24, "N": 64}) == ["matmul_k0"]  # 3 partials: too few
    # 8 x 4 outputs a thread: one load of A a row and of B a column per k, 32 FMAs
    # (a sum's product is the one multiply-add that fuses: docs/internals/numerics.md)
    assert "acc_m7_n3 = fmaf(A[(m + 7LL) * K + k], B[k * N + (n + 96LL)], acc_m7_n3);" in text
    assert "const long long n = n_t * 128LL + n_l;" in text


def test_band_with_dependent_bounds_uses_block_y() -> None:
    src = "def f(float(N) A) -> (O) { O(i, j) = A(j) where i in 0:N, j in 0:i + 1 }"
    program = _program(src)
    (kernel,) = program.gpu.kernels
    assert kernel.dims == (("i", "y"),)
    assert "blockIdx.y" in program.source


def test_literals_have_the_right_type() -> None:
    from compiler.cuda.cuda import literal
    from compiler.loops import DType

    assert literal(1.0, DType.FLOAT32) == "1.0f"
    assert literal(0.5, DType.FLOAT64) == "0.5"
    assert literal(-(2**63), DType.INT64) == "(-9223372036854775807LL - 1LL)"
    assert literal(3, DType.INT8) == "((signed char)3)"
    assert literal(float("inf"), DType.FLOAT32) == "__int_as_float(0x7f800000)"


def test_tcc_compile_emits_cuda_with_launch_comments() -> None:
    import sys

    def tcc(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "compiler", "compile", "examples/conv2d.tc", *args]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)

    fwd = tcc("--emit", "cuda")
    assert fwd.returncode == 0, fwd.stderr
    # the convolution: one thread an output, its shared-memory GEMM tiling (many outputs,
    # cuda.cuda_shared), 3 thread-tile kernels, a split reduction's two passes (few
    # outputs, cuda.cuda_split) and a warp reduction (for kernels of 16 columns or more);
    # the bias: one thread an output
    assert fwd.stdout.count('extern "C" __global__') == 9
    assert "// launch: conv2d_k0m<<<" in fwd.stdout
    assert "// launch: conv2d_k0<<<dim3(" in fwd.stdout
    back = tcc("--grad", "--emit", "cuda")
    assert back.returncode == 0, back.stderr
    assert "conv2d_grad_k" in back.stdout and "atomicAdd(&" not in back.stdout


def test_zero_fills_that_the_next_kernel_overwrites_are_dropped() -> None:
    """conv2d's gradient zeroes B_grad, I_grad and W1_grad before kernels that write every
    element of them without reading them: those fills launch no kernel (I_grad's is the
    clamped gather: the GPU schedule reads no padded copy, `cpu.pad`). maxpool's I_grad
    fill stays: its gradient adds into it."""
    conv = _program(grad((ROOT / "examples" / "conv2d.tc").read_text()))
    assert "_pad" not in conv.source
    for name in ("B_grad", "I_grad", "W1_grad"):
        assert not re.findall(rf"{name}\[[^\]]*\] = 0\.0f;", conv.source), name
    pool = _program(grad((ROOT / "examples" / "maxpool.tc").read_text()))
    assert re.search(r"I_grad\[[^\]]*\] = 0\.0f;", pool.source)
