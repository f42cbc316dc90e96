"""The CPU runtime: calling JIT-compiled loop-IR functions on NumPy arrays.

    cf = compile_function(f)                  # f: C[i] = A[i] + 1 over i < N
    cf({"A": a, "C": c}, {"N": len(a)}, threads=2)
    cf.call([a.ctypes.data, c.ctypes.data], [len(a)], 2)   # unchecked: a runtime's fast path

One native call runs the whole Function: its entry (`cpu.llvm`) takes the buffers,
the size parameters, a thread count and the address of a *launcher*, and runs every
statement itself; each of its parallel loops (`cpu.cpu_parallel` decides which) is
outlined and, when it has enough work, handed to the launcher (`cpu.llvm_parallel`).
Two launchers exist (`pool(name)`):

- `"gomp"`: libgomp's native thread pool (`GOMP_parallel`), loaded once with
  `llvmlite.binding.load_library_permanently("libgomp.so.1")` under
  `OMP_WAIT_POLICY=passive` (unless the user set a policy); where another library
  loaded its libgomp first (torch), a separate copy of the system's (`_private_gomp`);
  the default where it loads;
- `"python"`: a ctypes callback that runs the outlined body on a shared Python
  `ThreadPoolExecutor` (`run_chunks`): the fallback where libgomp does not load.

`default_pool()` names the one kernels use. `threads=None` means `DEFAULT_THREADS`
(`os.cpu_count()`, read once at import). Calling `cf(...)` checks the arrays and sizes
against the Function's buffers (`compiler.loops.check_arguments`: dtype, shape,
C-contiguity, writeable outputs; a `ShapeError` otherwise); ctypes releases the GIL
for the call. Compiled code keeps no state, so several Python threads may call one
CompiledFunction at once.

Memory: the runtime keeps the last `MEMORY_CACHE_SIZE` compiled functions used (an LRU
table: `compile_function` keys it by the Function's repr, `compiler.runtime.native` by the
compile cache's key, `keep`); a CompiledFunction owns its MCJIT engine, which is freed
with it once neither that table nor any kernel holds it (`live_functions()` counts the
ones alive). The compile cache's in-memory half holds only weak references to code.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from compiler.cpu import cpu_parallel
from compiler.cpu.llvm import _LLVM_LOCK, JitCode, _new_target_machine, jit, target_machine
from compiler.cpu.llvm_parallel import gomp_launcher_module
from compiler.diagnostics import OptionsError
from compiler.loops import Function, check_arguments

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DEFAULT_THREADS = os.cpu_count() or 1
MEMORY_CACHE_SIZE = 64  # compiled Functions kept alive by compile_function's table

_CACHE: OrderedDict[str, object] = OrderedDict()  # CompiledFunctions, ProgramCodes
_CACHE_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[CompiledFunction] = weakref.WeakSet()
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()
_WORKER = threading.local()  # .active is True in the pool's threads


def compile_function(f: Function) -> CompiledFunction:
    """JIT-compile `f` after the CPU pass (`cpu.cpu_parallel`), or reuse the code
    of an equal Function compiled recently."""
    key = repr(f)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if isinstance(cached, CompiledFunction):
            _CACHE.move_to_end(key)
            return cached
    g = cpu_parallel.run(f)
    compiled = CompiledFunction(g, jit(g))
    with _CACHE_LOCK:
        first = _CACHE.get(key)  # another thread's, if it was first
        compiled = first if isinstance(first, CompiledFunction) else compiled
    keep(key, compiled)
    return compiled


def keep(key: str, compiled: object) -> None:
    """Hold `compiled` (code, or a `runtime.native.ProgramCode`) in the table of recent
    code (at most MEMORY_CACHE_SIZE entries; the least recently used is dropped first)."""
    tune_malloc()
    with _CACHE_LOCK:
        _CACHE[key] = compiled
        _CACHE.move_to_end(key)
        while len(_CACHE) > MEMORY_CACHE_SIZE:
            _CACHE.popitem(last=False)


# glibc's mallopt parameters (malloc.h) and the values tcc sets (`tune_malloc`)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 64 << 20  # bytes: blocks below this come from the heap, not fresh mappings
TRIM_THRESHOLD = 128 << 20  # bytes: free memory the heap keeps at its top
_MALLOC_TUNED: list[bool] = []


def tune_malloc() -> None:
    """Once per process, when the first native code is kept: on glibc, unless the
    environment sets `TCC_MALLOPT=0`, malloc's mmap threshold becomes MMAP_THRESHOLD
    and its trim threshold TRIM_THRESHOLD. A kernel's temporaries (packed panels, row
    panels, transposed copies) are calloc'd and freed on every call (`cpu.llvm_emit`);
    with glibc's defaults a block of megabytes was mapped afresh each call and every one
    of its pages faulted in: the MLP tanh forward (256x1024->1024, a 4 MiB transposed
    panel) took 350-760 page faults a call and ran 4.7-6.4 ms; with both thresholds
    raised 3.5-4.8 ms and about 50 faults (2 threads, perf stat; either threshold alone did
    not help). The cost: a process keeps up to TRIM_THRESHOLD of freed heap memory
    instead of handing it back at once. Elsewhere (musl, macOS) nothing changes."""
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED.append(True)
    if os.environ.get("TCC_MALLOPT", "1") == "0":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def live_functions() -> int:
    """How many CompiledFunctions (each with its JIT engine) are alive in this process."""
    return len(_LIVE)


class CompiledFunction:
    """Machine code for a loop-IR Function, callable on NumPy arrays."""

    def __init__(self, f: Function, code: JitCode) -> None:
        self.function = f
        self.code = code  # holds the MCJIT engine: the address is valid while it lives
        nbuf = len(f.buffers)
        sizes = [ctypes.c_int64] * (len(f.size_params) + 1)
        argtypes = [ctypes.c_void_p] * nbuf + sizes
        self._cfunc = ctypes.CFUNCTYPE(None, *argtypes, ctypes.c_void_p)(code.address)
        self._objects = None  # the entry taking the arrays themselves (cpu.llvm)
        address = code.engine.get_function_address(f"{code.symbol}.objects")
        if address and DATA_OFFSET:
            objects = [ctypes.py_object] * nbuf + sizes + [ctypes.c_void_p, ctypes.c_int64]
            self._objects = ctypes.CFUNCTYPE(None, *objects)(address)
        _LIVE.add(self)

    def __call__(
        self,
        arrays: Mapping[str, np.ndarray],
        sizes: Mapping[str, int],
        *,
        threads: int | None = None,
        pool: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Run on `arrays` (outputs written in place); returns the arrays by name."""
        env = check_arguments(self.function, arrays, sizes)
        pointers = [arrays[b.name].ctypes.data for b in self.function.buffers]
        self.call(
            pointers, [env[n] for n in self.function.size_params], thread_count(threads), pool
        )
        return dict(arrays)

    def call(
        self, pointers: Sequence[int], sizes: Sequence[int], threads: int, pool: str | None = None
    ) -> None:
        """One native call, unchecked: buffer addresses and sizes in declaration order."""
        self._cfunc(*pointers, *sizes, threads, launcher(pool).address)

    def bind(self, pool: str | None = None) -> Callable[..., None]:
        """`fn(*arrays, *sizes, threads)`, unchecked: the fastest call, the launcher
        fixed; the arrays (C-contiguous ndarrays of the buffers' dtypes and shapes) in
        declaration order."""
        # the default pool is looked up at call time: a forked child switches it
        where = [launcher(pool).address] if pool is not None else _default_address()
        objects, cfunc, nbuf = self._objects, self._cfunc, len(self.function.buffers)
        if objects is not None:
            offset = DATA_OFFSET
            return lambda *args: objects(*args, where[0], offset)

        def call(*args: Any) -> None:
            cfunc(*[a.ctypes.data for a in args[:nbuf]], *args[nbuf:], where[0])

        return call

    def ir(self) -> str:
        """The optimised LLVM IR this function was compiled from."""
        return self.code.ir_text


def _data_offset() -> int:
    """Where an ndarray object holds its data pointer (NumPy's PyArrayObject `data`, the
    first field after the object header), checked on a few arrays; 0 if not found."""
    samples = [np.zeros(3), np.ones((2, 5), np.float32), np.arange(7)[2:], np.empty(0)]
    for offset in (16, 24, 32):
        found = [ctypes.c_void_p.from_address(id(a) + offset).value or 0 for a in samples]
        if found == [a.ctypes.data for a in samples]:
            return offset
    return 0


DATA_OFFSET = _data_offset()


def thread_count(threads: int | None) -> int:
    """`threads`, or DEFAULT_THREADS for None; an OptionsError for anything else."""
    if threads is None:
        return DEFAULT_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise OptionsError(f"threads must be a positive int, got {threads!r}")
    return threads


# ------------------------------------------------------------------ launchers


@dataclass(frozen=True)
class Launcher:
    """A native `launch(thunk, data, n)` function: its name and address, and what keeps
    the address valid (an execution engine, a ctypes callback)."""

    name: str
    address: int
    keep: object


POOLS = ("gomp", "python")
_LAUNCHERS: dict[str, Launcher | None] = {}
_LAUNCHERS_LOCK = threading.Lock()


def launcher(name: str | None = None) -> Launcher:
    """The launcher called `name` (None: `default_pool()`); an OptionsError if it does
    not exist or cannot load here."""
    if name is None:
        name = default_pool()
    found = _launcher(name)
    if found is None:
        raise OptionsError(
            f"thread pool '{name}' is not available in this process",
            hint=f"pools: {', '.join(POOLS)}; 'python' always works",
        )
    return found


def default_pool() -> str:
    """ "gomp" where libgomp loads (and this is not a forked child), else "python"."""
    if _FORKED:
        return "python"
    return "gomp" if _launcher("gomp") is not None else "python"


_FORKED = False
_DEFAULT_ADDRESS: list[int] = []  # [address of the default pool's launcher], set once


def _default_address() -> list[int]:
    with _LAUNCHERS_LOCK:
        found = bool(_DEFAULT_ADDRESS)
    if not found:
        address = launcher(None).address
        with _LAUNCHERS_LOCK:
            if not _DEFAULT_ADDRESS:
                _DEFAULT_ADDRESS.append(address)
    return _DEFAULT_ADDRESS


def _after_fork_in_child() -> None:
    """libgomp's pool does not survive fork (its threads are gone, and a parallel region
    would wait for them forever), nor does a ThreadPoolExecutor: a forked child runs
    parallel loops on a fresh Python pool."""
    global _FORKED
    _FORKED = True
    _POOL.clear()
    _PY_LAUNCHES[0] = 0
    if _DEFAULT_ADDRESS:
        found = _LAUNCHERS.get("python") or _python_launcher()
        _LAUNCHERS["python"] = found
        _DEFAULT_ADDRESS[0] = found.address


def _launcher(name: str) -> Launcher | None:
    if name not in POOLS:
        raise OptionsError(f"unknown thread pool '{name}'; pools: {', '.join(POOLS)}")
    with _LAUNCHERS_LOCK:
        if name not in _LAUNCHERS:
            _LAUNCHERS[name] = _load_gomp() if name == "gomp" else _python_launcher()
        return _LAUNCHERS[name]


def _load_gomp() -> Launcher | None:
    """libgomp's pool, or None where libgomp.so.1 does not load."""
    with _LLVM_LOCK:
        tm = target_machine()
        chosen = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
        try:
            with _passive_wait_policy():
                if chosen or not _private_gomp():
                    # a handle that is never closed: at exit llvmlite dlcloses what it
                    # loaded, and a worker spinning in libgomp (OMP_WAIT_POLICY=active)
                    # crashed with SIGSEGV once the library was unmapped under it
                    _GOMP_HANDLE.append(ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL))
                    llvm.load_library_permanently("libgomp.so.1")
        except (OSError, RuntimeError):
            return None
        if not llvm.address_of_symbol("GOMP_parallel"):
            return None
        module = gomp_launcher_module(tm.triple, str(tm.target_data))
        ref = llvm.parse_assembly(str(module))
        ref.verify()
        engine = llvm.create_mcjit_compiler(ref, _new_target_machine())
        engine.finalize_object()
        address = engine.get_function_address("tcc.gomp_launch")
    return Launcher("gomp", address, (engine, ref)) if address else None


_GOMP_HANDLE: list[ctypes.CDLL] = []  # libgomp stays mapped until the process ends
_GOMP_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")
_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
             "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/lib")  # fmt: skip


def _private_gomp() -> bool:
    """Where another library loaded libgomp before us (torch bundles one with the same
    soname) and no OMP_WAIT_POLICY / GOMP_SPINCOUNT was set, that runtime's idle threads
    spin (it read its environment when it loaded), and tcc's parallel loops would run on
    them: load a copy of our own instead (the system's libgomp.so.1, a different file:
    a separate runtime with its own passive pool) and point the launcher's three
    symbols at it (`llvm.add_symbol`). False (share the loaded one) when libgomp is not
    loaded yet or no other copy of the file exists; not called when the user chose a
    policy (then every runtime in the process follows it)."""
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return False  # not loaded: ours will be the one, passive
    with open("/proc/self/maps") as maps:
        loaded = {os.stat(p).st_ino for p in {ln.split()[-1] for ln in maps if "libgomp" in ln}}
    for d in _LIB_DIRS:
        path = os.path.join(d, "libgomp.so.1")
        if os.path.exists(path) and os.stat(path).st_ino not in loaded:
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)  # a separate copy: its own pool
            _GOMP_HANDLE.append(lib)
            for name in _GOMP_SYMBOLS:
                llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
            return True
    return False


@contextmanager
def _passive_wait_policy() -> Iterator[None]:
    """While libgomp initialises (it reads its environment once, when loaded), ask for
    `OMP_WAIT_POLICY=passive` unless the user chose a policy or spin count: idle threads
    then sleep instead of spinning. Measured on the shared 2-core machine (softmax
    256x1024, 2 threads): 68 ms with spinning threads, 6.7 ms passive. Where libgomp is
    loaded already (torch bundles one with the same soname), tcc loads a copy of its own
    under this policy (`_private_gomp`). The environment is restored after."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


_THUNK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_LAUNCH = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


_PY_LAUNCHES = [0]


def python_launches() -> int:
    """How many parallel regions the Python pool has run (a test's probe)."""
    return _PY_LAUNCHES[0]


def _python_launch(thunk: int, data: int, n: int) -> None:
    _PY_LAUNCHES[0] += 1  # under the GIL: ctypes callbacks hold it
    body = _THUNK(thunk)
    run_chunks(lambda tid, _: body(data, tid, n), [(t, t + 1) for t in range(n)])


def _python_launcher() -> Launcher:
    callback = _LAUNCH(_python_launch)
    address = ctypes.cast(callback, ctypes.c_void_p).value
    assert address is not None
    return Launcher("python", address, callback)


def run_chunks(call: Callable[[int, int], None], chunks: Sequence[tuple[int, int]]) -> None:
    """Run `call` on every chunk: the first here, the others on the pool; re-raise errors.

    A call from a pool worker (a kernel called inside another's chunk) runs its chunks
    here, one after the other: waiting on the pool from the pool could deadlock."""
    if len(chunks) == 1 or getattr(_WORKER, "active", False):
        for lo, hi in chunks:
            call(lo, hi)
        return
    pool = _pool(len(chunks) - 1)
    futures: list[Future[None]] = [pool.submit(call, lo, hi) for lo, hi in chunks[1:]]
    error: BaseException | None = None
    try:
        call(*chunks[0])
    except BaseException as exc:  # noqa: BLE001 - still wait for the workers, then re-raise
        error = exc
    for future in futures:
        exc = future.exception()
        if exc is not None and error is None:
            error = exc
    if error is not None:
        raise error


def _pool(workers: int) -> ThreadPoolExecutor:
    """A shared pool with at least `workers` threads (grown by replacing it).

    A replaced pool is not shut down: another caller may still be submitting to it.
    Its idle threads exit once it is garbage (ThreadPoolExecutor's weakref)."""
    with _POOL_LOCK:
        if not _POOL or _POOL[0]._max_workers < workers:
            size = max(workers, DEFAULT_THREADS)
            _POOL[:] = [
                ThreadPoolExecutor(
                    max_workers=size, thread_name_prefix="tcc", initializer=_mark_worker
                )
            ]
        return _POOL[0]


def _mark_worker() -> None:
    _WORKER.active = True


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = [
    "DEFAULT_THREADS",
    "MEMORY_CACHE_SIZE",
    "POOLS",
    "CompiledFunction",
    "Launcher",
    "compile_function",
    "default_pool",
    "keep",
    "launcher",
    "live_functions",
    "python_launches",
    "run_chunks",
    "thread_count",
]
