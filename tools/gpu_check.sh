#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one go (a few minutes on an H100):
#   tools/gpu_check.sh [OUT_DIR]
# 1. the CUDA tests against a real device (tests/codegen/test_cuda_gpu.py: every example
#    and gradient at odd, unit and long sizes, with and without thread tiles, warp
#    reductions, torch CUDA tensors, CuPy arrays, streams; plus NVRTC and nvcc);
# 2. python -m tools.bench_cuda (tcc against torch CUDA, same process);
# 3. python -m tools.bench_cuda --sweep (tcc under CudaOptions variants).
# Logs and JSON go to OUT_DIR (default: gpu-check). Needs torch with CUDA and the [cuda]
# extra (cuda-bindings, nvidia-cuda-nvrtc); CuPy is used where installed.
set -o pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider -p no:benchmark -rs \
    tests/codegen/test_cuda_gpu.py tests/codegen/test_cuda_compile.py 2>&1 | tee "$out/tests.log" | tail -15 || status=1
timeout 120 python3 -m tools.bench_cuda --json "$out/bench.json" 2>&1 | tee "$out/bench.log" || status=1
timeout 200 python3 -m tools.bench_cuda --sweep --json "$out/sweep.json" 2>&1 | tee "$out/sweep.log" || status=1
exit $status
