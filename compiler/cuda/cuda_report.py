"""What a CUDA kernel does at given sizes, without a GPU: threads, FLOPs, bytes, occupancy,
the hot loop's instruction mix, and a roofline estimate of its time (`tools.gpu_report`).

    work = kernel_work(kernel, program, env)       # band threads, FLOPs, bytes (loop IR)
    res = parse_ptxas(ptxas_verbose_text)          # name -> registers, spills, shared
    mix = parse_sass(cuobjdump_sass_text)          # name -> the hot loop's instruction mix
    occupancy(res[name], block, H200)              # resident warps / the SM's maximum
    roofline(work, H200, float64=False)            # (seconds, "memory" | "compute")

The counts come from the mapped loop IR (`cuda_map.GpuKernel.body`): a loop's trip count
and a condition are evaluated at the sizes with the variables of the loops outside at
their lower bound (exact for rectangular nests, an estimate for triangular ones and for
conditions on loop variables; a bound that reads a buffer counts one trip, a condition
that reads one takes the larger branch). FLOPs: the float `+ - * /`, min/max, selects and calls of
every assignment and store (outside subscripts) times its trips; a sum's product is one
FMA, two FLOPs. Bytes: every buffer the kernel reads or writes, once (the compulsory
traffic: a lower bound, exact only when every reuse hits in cache). Threads: the trips
of the grid and block loops (not the launched threads: a band of 4 in a block of 256 is
4).

The roofline: `max(flops / (fp32 rate * f_c), bytes / (HBM bandwidth * f_m))`, where
`f_c = min(1, threads / (SMs * 512))` and `f_m = min(1, threads / (SMs * 1024))` scale
the peaks down for a kernel with too few threads to use every FP32 lane with four
independent FMAs in flight, or to keep enough loads in flight to cover DRAM latency
(a model, not a measurement: no launch overhead, no cache misses beyond the compulsory
bytes, no instruction overhead). It is an estimate for the named GPU, not a timing.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from compiler import loops as L
from compiler.cuda.cuda_nodes import SharedArray
from compiler.loops import eval_expr

GPU_LOOPS = (L.LoopKind.GPU_BLOCK, L.LoopKind.GPU_THREAD)


@dataclass(frozen=True)
class GpuPeak:
    """A GPU's peak figures (per second) and per-SM limits."""

    name: str
    fp32_flops: float  # FP32 (non-tensor) FLOP/s, an FMA counting two
    fp64_flops: float
    hbm_bytes: float  # HBM bandwidth, bytes/s
    sms: int
    source: str
    regs_per_sm: int = 65536  # Hopper: 64K 32-bit registers, 2048 threads, 32 blocks an SM
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    shared_per_sm: int = 228 * 1024


# NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: FP32 67 TFLOPS, FP64 34 TFLOPS,
# 3.35 TB/s HBM3) and the Hopper architecture whitepaper (132 SMs in the SXM5 part, 64K
# registers, 2048 threads, 32 blocks and 228 KB shared memory an SM); NVIDIA H200
# datasheet (H200 SXM: the same FP32 and FP64 rates, 4.8 TB/s HBM3e, the same 132 SMs).
H100 = GpuPeak("H100 SXM", 67e12, 34e12, 3.35e12, 132, "NVIDIA H100 datasheet, Hopper whitepaper")
H200 = GpuPeak("H200 SXM", 67e12, 34e12, 4.8e12, 132, "NVIDIA H200 datasheet, Hopper whitepaper")
PEAKS = {"H100": H100, "H200": H200}
COMPUTE_THREADS_PER_SM = 512  # 128 FP32 lanes x 4 FMAs in flight
MEMORY_THREADS_PER_SM = 1024  # half the SM's threads, a load or two in flight each


@dataclass(frozen=True)
class Work:
    threads: int  # iterations of the grid and block loops
    flops: int
    bytes: int  # the buffers read or written, each once


@dataclass(frozen=True)
class Resources:
    registers: int
    spill_stores: int  # bytes
    spill_loads: int
    shared: int  # bytes of static shared memory
    stack: int


@dataclass(frozen=True)
class Mix:
    """The hot loop's SASS instructions (the innermost loop with the most FFMAs)."""

    instructions: int
    ffma: int  # FFMA (or DFMA for float64)
    global_loads: int  # LDG

    @property
    def ffma_share(self) -> float:
        return self.ffma / self.instructions if self.instructions else 0.0

    @property
    def loads_per_ffma(self) -> float | None:
        return self.global_loads / self.ffma if self.ffma else None


def kernel_work(body: L.Stmt, buffers: dict[str, L.Buffer], env: dict[str, int]) -> Work:
    """The threads, FLOPs and compulsory bytes of a mapped kernel `body` (module doc);
    `buffers` by name (the program's and the kernel's temporaries). A CUDA-only body
    that counts itself (`cuda_shared.SharedGemm.work`) gives its own figures."""
    own = getattr(body, "work", None)
    if own is not None:
        threads, flops, touched_names = own(dict(env))
        return Work(threads, flops, _bytes(touched_names, buffers, env))
    touched: set[str] = set()
    flops = _flops(body, dict(env), 1, touched)
    touched -= {n.buffer.name for n in L.walk(body) if isinstance(n, SharedArray)}  # on chip
    return Work(_threads(body, dict(env)), flops, _bytes(touched, buffers, env))


def _bytes(touched: set[str], buffers: dict[str, L.Buffer], env: dict[str, int]) -> int:
    """The bytes of the buffers named in `touched`, each once."""
    size = 0
    for name in sorted(touched):
        b = buffers[name]
        count = 1
        for d in b.shape:
            count *= max(0, int(eval_expr(d, dict(env))))
        size += count * b.dtype.np.itemsize
    return size


def _trips(loop: L.For, env: dict[str, int]) -> int:
    try:
        lo, hi = int(eval_expr(loop.lo, env)), int(eval_expr(loop.hi, env))
    except Exception:  # noqa: BLE001 - a bound reading a buffer (or a GPU-only node): one
        return 1
    return max(0, -(-(hi - lo) // loop.step))


def _lower(loop: L.For, env: dict[str, int]) -> dict[str, int]:
    try:
        return {**env, loop.var: int(eval_expr(loop.lo, env))}
    except Exception:  # noqa: BLE001 - see _trips
        return env


def _bind(let: L.Let, env: dict[str, int]) -> dict[str, int]:
    """`env` with the Let's variable: its value, or 0 where it cannot be evaluated (a
    thread index's decomposition: the first thread's)."""
    try:
        return {**env, let.var: int(eval_expr(let.value, env))}
    except Exception:  # noqa: BLE001 - CUDA-only nodes (PosDiv) or a load
        return {**env, let.var: 0}


def _threads(stmt: L.Stmt, env: dict[str, int]) -> int:
    """The trips of the grid and block loops at `stmt`'s root, through Lets and the
    serial band loops outside them."""
    if isinstance(stmt, L.Let):
        return _threads(stmt.body, _bind(stmt, env))
    if isinstance(stmt, L.For) and stmt.kind is L.LoopKind.GPU_THREAD:
        return _trips(stmt, env)
    if isinstance(stmt, L.For) and stmt.kind is L.LoopKind.GPU_BLOCK:
        return _trips(stmt, env) * _threads(stmt.body, _lower(stmt, env))
    if isinstance(stmt, L.For):
        return _threads(stmt.body, _lower(stmt, env))
    return 1


def _flops(stmt: L.Stmt, env: dict[str, int], times: int, touched: set[str]) -> int:
    """The FLOPs of `stmt` run `times` times; the buffers it touches added to `touched`."""
    if isinstance(stmt, L.For):
        return _flops(stmt.body, _lower(stmt, env), times * _trips(stmt, env), touched)
    if isinstance(stmt, L.Block):
        return sum(_flops(s, env, times, touched) for s in stmt.stmts)
    if isinstance(stmt, L.If):
        other = 0 if stmt.otherwise is None else _flops(stmt.otherwise, env, times, touched)
        then = _flops(stmt.then, env, times, touched)
        try:
            return then if eval_expr(stmt.cond, env) else other
        except Exception:  # noqa: BLE001 - a condition reading a buffer: the larger branch
            return max(then, other)
    if isinstance(stmt, L.Let):
        return _flops(stmt.body, _bind(stmt, env), times, touched) + times * _ops(
            stmt.value, touched
        )
    if isinstance(stmt, L.Local):
        return _flops(stmt.body, env, times, touched) + times * _ops(stmt.init, touched)
    if isinstance(stmt, (L.Alloc,)):
        touched.add(stmt.buffer.name)
        return _flops(stmt.body, env, times, touched)
    if isinstance(stmt, SharedArray):
        return _flops(stmt.body, env, times, touched)
    for node in L.walk(stmt):
        if isinstance(node, (L.Store, L.Load)) or hasattr(node, "buffer"):
            touched.add(node.buffer.name)  # type: ignore[attr-defined]
    value = getattr(stmt, "value", None)
    return times * (_ops(value, touched) if isinstance(value, L.Expr) else 0)


def _ops(e: L.Expr, touched: set[str]) -> int:
    """The float operations of `e` outside subscripts (the loads' buffers to `touched`)."""
    if isinstance(e, L.Load):
        touched.add(e.buffer.name)
        return 0
    own = 0
    if e.dtype.is_float and isinstance(e, (L.Bin, L.Unary, L.Call, L.Min, L.Max, L.Select)):
        own = 1
    return own + sum(_ops(c, touched) for c in _children(e))


def _children(e: L.Expr) -> list[L.Expr]:
    """The expressions directly under `e` (fields, and the members of tuple fields)."""
    found: list[L.Expr] = []
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        items = value if isinstance(value, tuple) else (value,)
        found.extend(x for x in items if isinstance(x, L.Expr))
    return found


def occupancy(res: Resources, block: int, peak: GpuPeak) -> float:
    """Resident warps an SM over its maximum, from registers (allocated 256 a warp at a
    time), shared memory, threads and blocks an SM."""
    warps = -(-block // 32)
    regs_per_warp = -(-max(res.registers, 1) * 32 // 256) * 256
    by_regs = peak.regs_per_sm // (regs_per_warp * warps)
    by_threads = peak.threads_per_sm // (warps * 32)
    by_shared = peak.shared_per_sm // res.shared if res.shared else peak.blocks_per_sm
    blocks = min(by_regs, by_threads, by_shared, peak.blocks_per_sm)
    return blocks * warps / (peak.threads_per_sm // 32)


def roofline(work: Work, peak: GpuPeak, *, float64: bool = False) -> tuple[float, str]:
    """The estimated seconds of a kernel with `work` on `peak`, and what bounds it
    ("compute", "memory", with "(too few threads)" where the thread count scaled the
    peak down; module doc)."""
    rate = peak.fp64_flops if float64 else peak.fp32_flops
    f_c = min(1.0, work.threads / (peak.sms * COMPUTE_THREADS_PER_SM))
    f_m = min(1.0, work.threads / (peak.sms * MEMORY_THREADS_PER_SM))
    compute = work.flops / (rate * f_c) if work.flops and f_c else 0.0
    memory = work.bytes / (peak.hbm_bytes * f_m) if work.bytes and f_m else 0.0
    bound, frac = ("compute", f_c) if compute >= memory else ("memory", f_m)
    if frac < 1.0:
        bound += " (too few threads)"
    return max(compute, memory), bound


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(text: str) -> dict[str, Resources]:
    """Each entry function's resources from `ptxas -v`'s output."""
    found: dict[str, Resources] = {}
    name, frame = None, (0, 0, 0)
    for line in text.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            name, frame = m.group(1), (0, 0, 0)
        elif (m := _PTXAS_FRAME.search(line)) and name:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _PTXAS_USED.search(line)) and name:
            shared = int(m.group(2) or 0)
            found[name] = Resources(int(m.group(1)), frame[1], frame[2], shared, frame[0])
    return found


_SASS_FUNCTION = re.compile(r"^\s*Function : (\w+)")
_SASS_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def parse_sass(text: str) -> dict[str, Mix]:
    """Each function's hot loop (the innermost backward branch's body with the most
    FFMAs, then the most instructions) from `cuobjdump -sass`'s output."""
    found: dict[str, Mix] = {}
    name: str | None = None
    code: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        if m := _SASS_FUNCTION.match(line):
            if name is not None:
                found[name] = _hot_loop(code)
            name, code = m.group(1), []
        elif (m := _SASS_LINE.match(line)) and name is not None:
            code.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if name is not None:
        found[name] = _hot_loop(code)
    return found


def _hot_loop(code: list[tuple[int, str, str]]) -> Mix:
    loops = []  # (start address, branch address)
    for addr, op, args in code:
        target = re.search(r"0x([0-9a-f]+)", args)
        if op == "BRA" and target and int(target.group(1), 16) <= addr:
            loops.append((int(target.group(1), 16), addr))
    inner = [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]
    best: Mix | None = None
    for lo, hi in inner:
        body = [(op, args) for addr, op, args in code if lo <= addr <= hi and op != "NOP"]
        fma = sum(1 for op, _ in body if op.startswith(("FFMA", "DFMA")))
        ldg = sum(1 for op, _ in body if op.startswith("LDG"))
        mix = Mix(len(body), fma, ldg)
        if best is None or (mix.ffma, mix.instructions) > (best.ffma, best.instructions):
            best = mix
    if best is None:  # no loop: the whole function
        body = [op for _, op, _ in code if op != "NOP"]
        fma = sum(1 for op in body if op.startswith(("FFMA", "DFMA")))
        best = Mix(len(body), fma, sum(1 for op in body if op.startswith("LDG")))
    return best


__all__ = [
    "H100",
    "H200",
    "PEAKS",
    "GpuPeak",
    "Mix",
    "Resources",
    "Work",
    "kernel_work",
    "occupancy",
    "parse_ptxas",
    "parse_sass",
    "roofline",
]
