"""The `__device__` helpers every generated CUDA C source starts with (`cuda.cuda`).

Integer division and remainder by zero give 0 (`tcc_div`, `tcc_rem`; the loop IR's
rule), `tcc_floordiv`/`tcc_mod` round toward -inf, `tcc_min`/`tcc_max` propagate NaN,
`tcc_report` records the first failed bounds check (an atomicCAS on the error record),
and the warp reductions (`tcc_warp_sum` & co., not in the emulation, whose header has
its own) combine a warp's values in lane 0. The templates take one type: a 32-bit
kernel (`cuda.cuda_width`) widens an `int` operand beside a `long long` one.
"""

from __future__ import annotations

PREAMBLE = r"""// helpers: integer division by zero gives 0 (the loop IR's rule), never a trap
template <typename T> __device__ __forceinline__ T tcc_div(T a, T b) {
  if (b == T(0)) return T(0);
  if (T(-1) < T(0) && b == T(-1)) return T((unsigned long long)0 - (unsigned long long)a);
  return T(a / b);
}
template <typename T> __device__ __forceinline__ T tcc_rem(T a, T b) {
  if (b == T(0) || (T(-1) < T(0) && b == T(-1))) return T(0);
  return T(a % b);
}
template <typename T> __device__ __forceinline__ T tcc_floordiv(T a, T b) {
  T q = tcc_div(a, b), r = tcc_rem(a, b);
  return (T(-1) < T(0) && r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(q - T(1)) : q;
}
template <typename T> __device__ __forceinline__ T tcc_mod(T a, T b) {
  T r = tcc_rem(a, b);
  return (T(-1) < T(0) && r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(r + b) : r;
}
// min/max propagate NaN (NumPy's minimum/maximum, the loop IR's Min/Max): b != b only for a NaN
template <typename T> __device__ __forceinline__ T tcc_min(T a, T b) { return (b < a || b != b) ? b : a; }
template <typename T> __device__ __forceinline__ T tcc_max(T a, T b) { return (a < b || b != b) ? b : a; }
__device__ __forceinline__ float tcc_ffloordiv(float a, float b) { return floorf(a / b); }
__device__ __forceinline__ double tcc_ffloordiv(double a, double b) { return floor(a / b); }
__device__ __forceinline__ float tcc_fmod(float a, float b) { return a - b * floorf(a / b); }
__device__ __forceinline__ double tcc_fmod(double a, double b) { return a - b * floor(a / b); }
__device__ __forceinline__ void tcc_report(long long* e, long long id, long long value) {
  if (atomicCAS((unsigned long long*)e, 0ULL, (unsigned long long)id) == 0ULL) e[1] = value;
}
#ifndef TCC_EMULATION
// warp reductions (every lane of the warp calls them): lane 0 gets the combination
template <typename T> __device__ __forceinline__ T tcc_warp_sum(T v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  return v;
}
template <typename T> __device__ __forceinline__ T tcc_warp_prod(T v) {
  for (int d = 16; d > 0; d >>= 1) v *= __shfl_down_sync(0xffffffffu, v, d);
  return v;
}
template <typename T> __device__ __forceinline__ T tcc_warp_max(T v) {
  for (int d = 16; d > 0; d >>= 1) v = tcc_max(v, __shfl_down_sync(0xffffffffu, v, d));
  return v;
}
template <typename T> __device__ __forceinline__ T tcc_warp_min(T v) {
  for (int d = 16; d > 0; d >>= 1) v = tcc_min(v, __shfl_down_sync(0xffffffffu, v, d));
  return v;
}
#endif
"""

__all__ = ["PREAMBLE"]
