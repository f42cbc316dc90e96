"""Transposed register-tile lanes (`cpu.cpu_model.transposed_lanes`, `cpu.transpose`):
a weight gradient `WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw)` tiles
its lanes along `m` and rows along `c`, reading and writing transposed copies; checked
against the reference evaluator at odd sizes (1, primes, extents below and between
multiples of the lanes and rows), strides 1 and 2, every vector width, float32 and
float64, with `+=!` and with a `+=` that adds to an earlier statement's values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import loops as L
from compiler import pipeline
from compiler.options import Options
from tests.codegen.kit import find, reference_and_llvm

# the output height and width of a stride-s convolution, as AD writes them
OUT = {1: ("H - KH + 1", "W - KW + 1"), 2: ("(H + KH) / 2 - KH + 1", "(W + KW) / 2 - KW + 1")}
WGRAD = (
    "def wg(float(N, C, H, W) I, float(N, M, HO, WO) G, float(M, C, KH, KW) W1) "
    "-> (float(M, C, KH, KW) WG) { "
    "INIT WG(m, c, kh, kw) OP G(n, m, h, w) * I(n, c, S * h + kh, S * w + kw) "
    "where h in 0:HO, w in 0:WO, kh in 0:KH, kw in 0:KW }"
)


def _text(stride: int, dtype: type, accumulate: bool = False) -> str:
    ho, wo = OUT[stride]
    init = "WG(m, c, kh, kw) = W1(m, c, kh, kw)\n" if accumulate else ""
    text = WGRAD.replace("INIT ", init).replace("OP", "+=" if accumulate else "+=!")
    text = text.replace("S *", f"{stride} *").replace("HO", ho).replace("WO", wo)
    return text.replace("float(", "double(") if dtype is np.float64 else text


def _arrays(n: int, c: int, m: int, hw: int, stride: int, dtype: type, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = max(0, (hw - 3) // stride + 1)
    return [
        rng.standard_normal((n, c, hw, hw)).astype(dtype),
        rng.standard_normal((n, m, out, out)).astype(dtype),
        rng.standard_normal((m, c, 3, 3)).astype(dtype),
    ]


def _check(text: str, arrays: list[np.ndarray], options: Options) -> None:
    e, g = reference_and_llvm(text, arrays, options)
    tol = 1e-12 if g.dtype == np.float64 else 3e-5
    scale = max(1.0, float(np.abs(e).max(initial=0)))
    np.testing.assert_allclose(g, e, rtol=tol, atol=tol * scale * np.sqrt(arrays[0].size))


@pytest.mark.parametrize("stride", [1, 2])
def test_the_weight_gradient_tiles_lanes_along_m_from_transposed_copies(stride: int) -> None:
    options = Options(threads=2)
    lowered = pipeline.run(_text(stride, np.float32), upto="lower", options=options)
    allocs = {a.buffer.name for a in find(lowered.function.body, L.Alloc)}
    assert {"G.t1", "WG.t0"} <= allocs
    loads = [x for x in find(lowered.function.body, L.Load) if x.buffer.name == "G"]
    copies = [s for s in find(lowered.function.body, L.Store) if s.buffer.name == "G.t1"]
    # G is read only by the copy (once in each row-block version of the nest: loops.versions
    # runs one); the tile reads G.t1[n, h, w, m + lane]
    assert loads and len(loads) == len(copies)
    assert all(isinstance(s.value, L.Load) and s.value.buffer.name == "G" for s in copies)
    tiled = [x for x in find(lowered.function.body, L.Load) if x.buffer.name == "G.t1"]
    assert tiled and all(isinstance(x.index[-1], (L.VarRef, L.Bin)) for x in tiled)
    locals_ = find(lowered.function.body, L.Local)
    assert len(locals_) >= 16  # a register tile, not the memory form alone


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([128, 256, 512]),
    stride=st.sampled_from([1, 2]),
    c=st.sampled_from([1, 3, 8, 9]),
    m=st.sampled_from([1, 7, 16, 17, 33]),
    hw=st.sampled_from([3, 4, 11]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_transposed_tiles_match_the_reference(
    bits: int, stride: int, c: int, m: int, hw: int, dtype: type, seed: int
) -> None:
    arrays = _arrays(2, c, m, hw, stride, dtype, seed)
    _check(_text(stride, dtype), arrays, Options(threads=2, vector_bits=bits))


@pytest.mark.parametrize(("n", "c", "m", "hw"), [(1, 3, 17, 3), (2, 9, 33, 7), (1, 1, 1, 4)])
def test_a_plain_reduction_adds_to_the_values_before_it(n: int, c: int, m: int, hw: int) -> None:
    # `+=` after `=`: the tile starts from the output's values (copied in, copied back)
    arrays = _arrays(n, c, m, hw, 1, np.float64, n + c + m)
    _check(_text(1, np.float64, accumulate=True), arrays, Options(threads=2))


CONV2 = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) "
    "{ O(n, m, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * W1(m, c, kh, kw) }"
)


@pytest.mark.parametrize(("n", "c", "m", "hw"), [(1, 1, 1, 3), (2, 3, 17, 12), (3, 5, 33, 19)])
def test_a_strided_convolution_with_lanes_along_m_matches_the_reference(
    n: int, c: int, m: int, hw: int
) -> None:
    rng = np.random.default_rng(n * m + hw)
    arrays = [
        rng.standard_normal((n, c, hw, hw)).astype(np.float32),
        rng.standard_normal((m, c, 3, 3)).astype(np.float32),
    ]
    lowered = pipeline.run(CONV2, upto="lower", options=Options(threads=2))
    assert "W1.t0" in {a.buffer.name for a in find(lowered.function.body, L.Alloc)}
    _check(CONV2, arrays, Options(threads=2))
