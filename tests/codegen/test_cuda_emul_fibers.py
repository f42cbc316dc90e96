"""The CUDA emulation's fiber launcher (cuda.cuda_fibers): hand-written kernels with
__syncthreads, __shared__ memory and warp shuffles equal NumPy; a missing barrier is
caught by the race check; a divergent barrier is an error, not a hang."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cuda.cuda_emulation import EmulationError, build_source

REDUCE = r"""
extern "C" __global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[128];
  unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned d = blockDim.x / 2; d > 0; d >>= 1) {
    if (t < d) s[t] += s[t + d];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
"""
REDUCE_ARGS = {"reduce": ["const float*", "float*", "int"]}

TRANSPOSE = r"""
#define TILE 8
extern "C" __global__ void transpose(const double* a, double* b, int rows, int cols) {
  __shared__ double tile[TILE][TILE + 1];
  int c = blockIdx.x * TILE + threadIdx.x, r = blockIdx.y * TILE + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = a[(long long)r * cols + c];
  __syncthreads();
  int oc = blockIdx.y * TILE + threadIdx.x, orow = blockIdx.x * TILE + threadIdx.y;
  if (orow < cols && oc < rows) b[(long long)orow * rows + oc] = tile[threadIdx.x][threadIdx.y];
}
"""

SHUFFLE = r"""
extern "C" __global__ void shuffles(const float* x, float* sum, float* bcast, float* up,
                                    float* xr, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
  float v = i < n ? x[i] : 0.0f;
  float s = v;
  for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
  float total = __shfl_sync(0xffffffffu, s, 0);     // lane 0's sum to every lane
  float before = __shfl_up_sync(0xffffffffu, v, 1, 8);  // within groups of 8
  float other = __shfl_xor_sync(0xffffffffu, v, 5);
  __syncwarp();
  if (i < n) { sum[i] = total; bcast[i] = lane; up[i] = before; xr[i] = other; }
}
"""


def test_block_reduction_in_shared_memory_equals_numpy() -> None:
    rng = np.random.default_rng(0)
    for race_check in (False, True):
        lib = build_source(REDUCE, REDUCE_ARGS, race_check=race_check)
        for n in (1, 7, 128, 333):
            x = rng.random(n, dtype=np.float32)
            blocks = -(-n // 128)
            out = np.zeros(blocks, np.float32)
            lib.call("reduce", (blocks, 1, 1), (128, 1, 1), [x, out, n])
            want = np.add.reduceat(x.astype(np.float64), np.arange(0, n, 128))
            np.testing.assert_allclose(out, want, rtol=1e-5)


def test_transpose_through_shared_memory_equals_numpy() -> None:
    lib = build_source(TRANSPOSE, {"transpose": ["const double*", "double*", "int", "int"]},
                       race_check=True)  # fmt: skip
    for rows, cols in ((1, 1), (7, 13), (17, 8), (33, 5)):
        a = np.random.default_rng(rows).random((rows, cols))
        b = np.full((cols, rows), np.nan)
        lib.call("transpose", (-(-cols // 8), -(-rows // 8), 1), (8, 8, 1), [a, b, rows, cols])
        np.testing.assert_array_equal(b, a.T)


def test_warp_shuffles_follow_cuda_rules() -> None:
    lib = build_source(SHUFFLE, {"shuffles": ["const float*"] + ["float*"] * 4 + ["int"]})
    n = 70  # three warps of a 96-thread block, the last one partly out of range
    x = np.arange(1, n + 1, dtype=np.float32)
    outs = [np.zeros(n, np.float32) for _ in range(4)]
    lib.call("shuffles", (1, 1, 1), (96, 1, 1), [x, *outs, n])
    sum_, bcast, up, xr = outs
    xp = np.concatenate([x, np.zeros(96 - n, np.float32)])
    lane = np.arange(96) % 32
    warp_sums = xp.reshape(3, 32).sum(axis=1)
    np.testing.assert_array_equal(sum_, np.repeat(warp_sums, 32)[:n])
    np.testing.assert_array_equal(bcast, lane[:n])
    idx = np.arange(96)
    src_up = np.where(idx % 8 >= 1, idx - 1, idx)
    np.testing.assert_array_equal(up, xp[src_up][:n])
    np.testing.assert_array_equal(xr, xp[idx ^ 5][:n])


def test_missing_barrier_is_a_reported_race() -> None:
    bad = REDUCE.replace("  __syncthreads();\n  for", "  for", 1)
    assert bad != REDUCE
    lib = build_source(bad, REDUCE_ARGS, race_check=True)
    x = np.ones(128, np.float32)
    with pytest.raises(EmulationError, match=r"race on __shared__ s\[64\] .*kernel reduce"):
        lib.call("reduce", (1, 1, 1), (128, 1, 1), [x, np.zeros(1, np.float32), 128])


def test_divergent_barrier_is_an_error_not_a_hang() -> None:
    dead = REDUCE.replace(
        "if (t < d) s[t] += s[t + d];\n    __syncthreads();",
        "if (t < d) { s[t] += s[t + d];\n    __syncthreads(); }",
    )
    assert dead != REDUCE
    lib = build_source(dead, REDUCE_ARGS)
    x = np.ones(128, np.float32)
    with pytest.raises(EmulationError, match="divergent barrier.*kernel reduce"):
        lib.call("reduce", (1, 1, 1), (128, 1, 1), [x, np.zeros(1, np.float32), 128])
    # barriers at two different lines, every thread waiting: also divergent
    split = REDUCE.replace(
        "  __syncthreads();\n  for",
        "  if (t % 2)\n    __syncthreads();\n  else\n    __syncthreads();\n  for",
        1,
    )
    lib = build_source(split, REDUCE_ARGS)
    with pytest.raises(EmulationError, match="lines"):
        lib.call("reduce", (1, 1, 1), (128, 1, 1), [x, np.zeros(1, np.float32), 128])
