"""Barriers in the CUDA emulation: a block's threads run as cooperating fibers.

Requires: a kernel's CUDA C that uses `__syncthreads`, `__shared__`, `__syncwarp` or a
warp shuffle (`__shfl_sync`, `__shfl_up_sync`, `__shfl_down_sync`, `__shfl_xor_sync`);
the emulation header (`cuda_emulation.HEADER`) before it.
Ensures:  `FIBER_HEADER` (appended to the emulation header) runs such a kernel as a GPU
would, one block after another: each thread of the block is a fiber (`ucontext`:
`makecontext` gives each thread its own stack, `swapcontext` switches), and a small
scheduler resumes them in thread order until each blocks or ends.

- `__syncthreads()` parks the thread; when every thread of the block is parked the
  barrier opens. A thread that ends while others wait, or threads parked at different
  `__syncthreads` (lines), is a *divergent barrier*: the launch fails with that message
  (on a GPU it hangs or is undefined), never hangs.
- `__shared__` variables are `static thread_local`: one instance for the block (blocks
  run one after another on one OS thread; another OS thread has its own).
- A warp shuffle deposits the lane's value and parks; when every lane of the mask has
  deposited, each gets its source lane's value (CUDA's rules for `width`, a source
  out of range reads the lane's own value). `__syncwarp(mask)` is the same without a
  value. A lane of the mask that ended, or waits at another barrier, is a deadlock.
- `tcc_warp_sum` & co. (the generated warp reductions) are the GPU's shuffle halving.
- *Race check* (`race_source`, `CudaOptions(race_check=True)`): each `__shared__` array
  declaration becomes a `tcc_emu::Shared` whose elements record their last writer and
  readers with the barrier epoch; two threads of a block, one of them writing, touching
  one element between two barriers (not separated by a `__syncwarp` of their warp) is
  reported, with the kernel, the array, the element and its byte offset, as a launch
  error. Elements are proxies (`tcc_emu::Ref`): a function template that must deduce a
  type from one needs a cast.

Worked example, a tree reduction in shared memory:

    __shared__ float s[256];
    s[threadIdx.x] = x[...];  __syncthreads();         // fibers 0..255 park, then resume
    for (int d = 128; d > 0; d >>= 1) {
      if (threadIdx.x < d) s[threadIdx.x] += s[threadIdx.x + d];
      __syncthreads();                                  // one epoch per step
    }

Dropping the first `__syncthreads` is reported by the race check: thread 0 reads
`s[128]`, which thread 128 wrote in the same epoch. The fast path (no fibers) stays
for every kernel without these words.
"""

from __future__ import annotations

import re

BARRIER_WORDS = ("__syncthreads", "__shared__", "__syncwarp", "__shfl")

FIBER_HEADER = r"""// tcc: fibers for __syncthreads, __shared__ and warp shuffles
#include <ucontext.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#define __shared__ static thread_local
namespace tcc_emu {
enum State { RUN, BAR, WARP, DONE };
struct Fiber {
  ucontext_t ctx; char* stack; State state; dim3 tid; unsigned long long calls;
  int line; unsigned mask; int kind; long long arg; int width;
  unsigned long long value, result;
  unsigned long long warp_epoch;
};
struct Block {
  ucontext_t sched; std::vector<Fiber> fibers; unsigned current = 0, n = 0;
  void (*body)(void*) = nullptr; void* closure = nullptr; const char* kernel = "";
  std::vector<char*> stacks; std::vector<unsigned long long> warp_epoch;
};
const size_t STACK = 256 * 1024;
inline thread_local Block* block = nullptr;  // the block running (null: the fast path)
inline thread_local Block the_block;  // its fibers and stacks, reused by every launch
inline thread_local unsigned long long epoch = 1;  // one per block barrier, never reused
inline thread_local std::string error;
inline void fail(const std::string& message) { if (error.empty()) error = message; }
inline std::string thread_name(const Block* b, unsigned t) {
  const dim3& i = b->fibers[t].tid;
  return "thread (" + std::to_string(i.x) + "," + std::to_string(i.y) + "," +
         std::to_string(i.z) + ") of block (" + std::to_string(blockIdx.x) + "," +
         std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + ")";
}
inline void park(State s) {
  Fiber& f = block->fibers[block->current];
  f.state = s; f.calls = tcc_emu_calls;
  swapcontext(&f.ctx, &block->sched);
}
inline void entry() {
  Block* b = block;
  b->body(b->closure);
  b->fibers[b->current].state = DONE;  // then uc_link: back to the scheduler
}
inline unsigned lanes_of(const Block* b, unsigned w) {  // the lanes warp w has
  unsigned left = b->n - 32 * w;
  return left >= 32 ? 0xffffffffu : ((1u << left) - 1u);
}
inline unsigned source_lane(const Fiber& f, unsigned lane) {
  unsigned width = (unsigned)f.width, base = lane & ~(width - 1u), src = lane;
  long long a = f.arg;
  if (f.kind == 0) src = base + (unsigned)(a & (long long)(width - 1u));
  if (f.kind == 1) src = (lane - base) >= (unsigned long long)a ? lane - (unsigned)a : lane;
  if (f.kind == 2) src = (lane - base) + (unsigned long long)a < width ? lane + (unsigned)a : lane;
  if (f.kind == 3) { src = lane ^ (unsigned)a; if (src >= base + width) src = lane; }
  return src;
}
// one warp's parked lanes whose whole mask has arrived: compute results, resume them
inline bool release_warp(Block* b, unsigned w) {
  unsigned have = lanes_of(b, w);
  for (unsigned l = 0; l < 32; ++l) {
    if (!(have >> l & 1u)) continue;
    Fiber& f = b->fibers[32 * w + l];
    if (f.state != WARP) continue;
    unsigned mask = f.mask & have;
    bool ready = true;
    for (unsigned m = 0; m < 32; ++m) {
      if (!(mask >> m & 1u)) continue;
      const Fiber& g = b->fibers[32 * w + m];
      if (g.state != WARP) { ready = false; break; }
      if (g.kind != f.kind || (g.mask & have) != mask || g.line != f.line) {
        fail(std::string("warp-divergent shuffle or __syncwarp in kernel ") + b->kernel + ": " +
             thread_name(b, 32 * w + l) + " at line " + std::to_string(f.line) + ", " +
             thread_name(b, 32 * w + m) + " at line " + std::to_string(g.line));
        return false;
      }
    }
    if (!ready) continue;
    for (unsigned m = 0; m < 32; ++m) {
      if (!(mask >> m & 1u)) continue;
      Fiber& g = b->fibers[32 * w + m];
      unsigned src = source_lane(g, m);
      g.result = (mask >> src & 1u) ? b->fibers[32 * w + src].value : g.value;
    }
    b->warp_epoch[w] += 1;
    for (unsigned m = 0; m < 32; ++m)
      if (mask >> m & 1u) b->fibers[32 * w + m].state = RUN;
    return true;
  }
  return false;
}
inline std::string states(const Block* b) {
  unsigned count[4] = {0, 0, 0, 0};
  for (const Fiber& f : b->fibers) count[f.state] += 1;
  return std::to_string(count[BAR]) + " at __syncthreads, " + std::to_string(count[WARP]) +
         " at a warp shuffle or __syncwarp, " + std::to_string(count[DONE]) + " ended";
}
// run one block to completion (true) or to a reported error (false)
inline bool run_block(Block* b) {
  for (unsigned t = 0; t < b->n; ++t) {
    Fiber& f = b->fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = b->stacks[t]; f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &b->sched;
    makecontext(&f.ctx, (void (*)())entry, 0);
    f.state = RUN; f.calls = 0;
  }
  for (unsigned w = 0; w < b->warp_epoch.size(); ++w) b->warp_epoch[w] = 0;
  epoch += 1;
  for (;;) {
    for (unsigned t = 0; t < b->n; ++t) {
      Fiber& f = b->fibers[t];
      if (f.state != RUN) continue;
      b->current = t; threadIdx = f.tid; tcc_emu_calls = f.calls;
      swapcontext(&b->sched, &f.ctx);
    }
    bool moved = false;
    for (unsigned w = 0; w < b->warp_epoch.size(); ++w)
      while (release_warp(b, w)) moved = true;
    if (!error.empty()) return false;
    if (moved) continue;
    unsigned bar = 0, done = 0, line = 0, other = 0;
    for (const Fiber& f : b->fibers) {
      if (f.state == DONE) done += 1;
      if (f.state != BAR) continue;
      if (bar == 0) line = (unsigned)f.line;
      else if ((unsigned)f.line != line) other = (unsigned)f.line;
      bar += 1;
    }
    if (done == b->n) return true;
    if (bar == b->n && other == 0) { epoch += 1; for (Fiber& f : b->fibers) f.state = RUN; continue; }
    std::string where = other ? " (threads wait at __syncthreads of lines " +
        std::to_string(line) + " and " + std::to_string(other) + ")" : "";
    fail(std::string("divergent barrier (deadlock) in kernel ") + b->kernel + " block (" +
         std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + "): " + states(b) + " of " + std::to_string(b->n) +
         " threads" + where);
    return false;
  }
}
template <typename F> void tramp(void* f) { (*(F*)f)(); }
// the fiber launcher: every block of the grid, its threads as fibers; 0 or 1 (error)
template <typename F>
int launch(const char* kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
           unsigned by, unsigned bz, F body) {
  error.clear();
  Block& b = the_block;
  b.n = bx * by * bz; b.kernel = kernel; b.body = tramp<F>; b.closure = &body;
  b.fibers.resize(b.n);
  b.warp_epoch.assign((b.n + 31) / 32, 0);
  while (b.stacks.size() < b.n) b.stacks.push_back((char*)std::malloc(STACK));
  for (unsigned t = 0; t < b.n; ++t) b.fibers[t].tid = dim3{t % bx, (t / bx) % by, t / (bx * by)};
  gridDim = dim3{gx, gy, gz}; blockDim = dim3{bx, by, bz};
  Block* outer = block;
  block = &b;
  bool ok = true;
  for (unsigned z = 0; ok && z < gz; ++z) for (unsigned y = 0; ok && y < gy; ++y)
  for (unsigned x = 0; ok && x < gx; ++x) {
    blockIdx = dim3{x, y, z};
    ok = run_block(&b) && error.empty();
  }
  block = outer;
  return error.empty() ? 0 : 1;
}
inline unsigned lane_id() { return block->current % 32u; }
template <typename T> T shuffle(int line, unsigned mask, T v, long long arg, int width, int kind) {
  Fiber& f = block->fibers[block->current];
  f.line = line; f.mask = mask; f.kind = kind; f.arg = arg; f.width = width;
  f.value = 0; std::memcpy(&f.value, &v, sizeof(T));
  park(WARP);
  T out; std::memcpy(&out, &block->fibers[block->current].result, sizeof(T));
  return out;
}
inline void syncwarp(int line, unsigned mask) { shuffle<int>(line, mask, 0, 0, 32, 4); }
inline void syncthreads(int line) {
  block->fibers[block->current].line = line;
  park(BAR);
}
// the race check's shared arrays: a shadow record per element
struct Shadow {
  unsigned long long w_epoch = 0, r_epoch = 0, w_warp = 0, r_warp = 0;
  unsigned writer = 0, reader = 0; bool many = false;
};
inline unsigned long long warp_epoch_of(unsigned t) { return block->warp_epoch[t / 32]; }
inline bool ordered(unsigned t0, unsigned long long e0, unsigned long long w0, unsigned t1) {
  if (e0 != epoch || t0 == t1) return true;
  return t0 / 32 == t1 / 32 && w0 != warp_epoch_of(t1);
}
inline void race(const char* name, size_t index, size_t size, unsigned t0, const char* what0,
                 const char* what1) {
  fail(std::string("race on __shared__ ") + name + "[" + std::to_string(index) + "] (byte " +
       std::to_string(index * size) + " of " + name + ") in kernel " + block->kernel + ": " +
       thread_name(block, t0) + " " + what0 + " it and " + thread_name(block, block->current) +
       " " + what1 + " it between two barriers");
}
template <typename T> struct Ref {
  T* p; Shadow* s; const char* name; size_t index;
  T get() const {
    if (block) {
      unsigned t = block->current;
      if (!ordered(s->writer, s->w_epoch, s->w_warp, t)) race(name, index, sizeof(T), s->writer, "wrote", "read");
      if (s->r_epoch == epoch && s->reader != t) s->many = true;
      if (s->r_epoch != epoch) s->many = false;
      s->reader = t; s->r_epoch = epoch; s->r_warp = warp_epoch_of(t);
    }
    return *p;
  }
  void set(T v) const {
    if (block) {
      unsigned t = block->current;
      if (!ordered(s->writer, s->w_epoch, s->w_warp, t)) race(name, index, sizeof(T), s->writer, "wrote", "wrote");
      if (s->r_epoch == epoch && (s->many || !ordered(s->reader, s->r_epoch, s->r_warp, t)))
        race(name, index, sizeof(T), s->reader, "read", "wrote");
      s->writer = t; s->w_epoch = epoch; s->w_warp = warp_epoch_of(t);
    }
    *p = v;
  }
  operator T() const { return get(); }
  const Ref& operator=(T v) const { set(v); return *this; }
  const Ref& operator=(const Ref& r) const { set(r.get()); return *this; }
  const Ref& operator+=(T v) const { set(get() + v); return *this; }
  const Ref& operator-=(T v) const { set(get() - v); return *this; }
  const Ref& operator*=(T v) const { set(get() * v); return *this; }
  const Ref& operator/=(T v) const { set(get() / v); return *this; }
};
template <typename T, size_t... D> struct View;
template <typename T, size_t N> struct View<T, N> {
  T* p; Shadow* s; const char* name; size_t base;
  Ref<T> operator[](long long i) const {
    if (i < 0 || (size_t)i >= N) fail(std::string("index ") + std::to_string(i) + " out of bounds of __shared__ " + name);
    size_t k = (size_t)i < N ? (size_t)i : 0;
    return Ref<T>{p + k, s + k, name, base + k};
  }
};
template <size_t... D> constexpr size_t product() { return (D * ... * 1); }
template <typename T, size_t N, size_t M, size_t... R> struct View<T, N, M, R...> {
  T* p; Shadow* s; const char* name; size_t base;
  View<T, M, R...> operator[](long long i) const {
    if (i < 0 || (size_t)i >= N) fail(std::string("index ") + std::to_string(i) + " out of bounds of __shared__ " + name);
    size_t k = ((size_t)i < N ? (size_t)i : 0) * product<M, R...>();
    return View<T, M, R...>{p + k, s + k, name, base + k};
  }
};
template <typename T, size_t... D> struct Shared {
  T data[product<D...>()]; Shadow shadow[product<D...>()]; const char* name;
  explicit Shared(const char* n) : name(n) {}
  auto operator[](long long i) { return View<T, D...>{data, shadow, name, 0}[i]; }
};
}  // namespace tcc_emu
#define __syncthreads() tcc_emu::syncthreads(__LINE__)
#define __syncwarp(...) tcc_emu::syncwarp(__LINE__, tcc_emu_mask(__VA_ARGS__ + 0))
inline unsigned tcc_emu_mask(unsigned m) { return m ? m : 0xffffffffu; }
template <typename T> T tcc_emu_shfl(int line, unsigned m, T v, long long a, int w, int k) {
  return tcc_emu::shuffle<T>(line, m, v, a, w, k);
}
#define __shfl_sync(m, v, a, ...) tcc_emu_shfl(__LINE__, m, v, a, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 32, 0)
#define __shfl_up_sync(m, v, a, ...) tcc_emu_shfl(__LINE__, m, v, a, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 32, 1)
#define __shfl_down_sync(m, v, a, ...) tcc_emu_shfl(__LINE__, m, v, a, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 32, 2)
#define __shfl_xor_sync(m, v, a, ...) tcc_emu_shfl(__LINE__, m, v, a, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 32, 3)
"""

_DECLARATION = re.compile(
    r"__shared__\s+(?P<type>[A-Za-z_][\w\s]*?)\s+(?P<name>[A-Za-z_]\w*)\s*"
    r"(?P<dims>(?:\[[^\]\n]+\]\s*)+);"
)


def uses_barriers(kernel_text: str) -> bool:
    """Whether a kernel's CUDA C needs the fiber launcher (module doc)."""
    return any(word in kernel_text for word in BARRIER_WORDS)


def race_source(source: str) -> str:
    """`source` with each `__shared__ T name[A][B];` an instrumented `tcc_emu::Shared`
    (the race check, module doc): `static thread_local tcc_emu::Shared<T, (A), (B)>
    name("name");`. A declaration of another form is left as it is (not checked)."""

    def shared(m: re.Match[str]) -> str:
        dims = ", ".join(f"(size_t)({d})" for d in re.findall(r"\[([^\]]+)\]", m["dims"]))
        name = m["name"]
        return f'static thread_local tcc_emu::Shared<{m["type"]}, {dims}> {name}("{name}");'

    return _DECLARATION.sub(shared, source)


__all__ = ["BARRIER_WORDS", "FIBER_HEADER", "race_source", "uses_barriers"]
