"""The steady-state host path of a CUDA device call: state a program keeps per stream so
that a call allocates nothing and never waits for the GPU.

    records = ErrorRecords(device, stream)     # once per (program, stream)
    records.enqueue(checks, shapes)            # after a call's launches: copy, reset, event
    error = records.poll()                     # the first failed finished call, or None

    temps = TempPool()                         # temporaries per (stream, sizes), kept
    graphs = GraphCache()                      # CudaOptions(graph=True): one graph a key
    host = HostState()                         # all of it for one program (CudaProgram.host)

Error records. A def with run-time bounds checks (an indirect read) writes a failure
into a 16-byte record on the device (`tcc_report`: the first failure wins). The record
is allocated and zeroed once per program and stream. After a call's kernels the host
enqueues, on the call's stream, a copy of the record into a pinned host *slot*, a reset
of the record to zero, and an event; no synchronisation. `poll()` reads the slots of
calls whose events have completed, oldest first, without waiting. It runs at the end
of every call and at the start of the next call of the program on that stream; so a
failure surfaces as the same `ShapeError` as on the other targets

- at the end of the failing call if the GPU has finished it by then (always in
  emulation, where every launch runs to completion);
- else at a later call of the same def on the same stream, once the GPU has finished
  the failing one, with "in an earlier call" in the message; or
- at `runtime.cuda_device.synchronize(kernel)`, which waits for the stream.

A call whose bounds check fails leaves its outputs undefined. Slots are reused once
read, so the pool grows only to the number of calls in flight.

Temporaries (`GpuKernel.temps`, zero-filled for every call) are allocated once per
stream and signature (`TempPool`) and zeroed on the stream; a pool of more than 8
signatures synchronises the stream and frees them all.

Graphs (`CudaOptions(graph=True)`): the call's launches are captured once into a CUDA
graph per (stream, sizes, buffer pointers) and replayed with one `cuGraphLaunch`; a
call with other pointers (a new output) captures a new graph (16 kept per program).
The emulated device "captures" by recording the launches and replays them in order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from compiler.diagnostics import ShapeError
from compiler.loops.overwrite import Overwrites
from compiler.runtime.native import check_failure

RECORD_BYTES = 16  # int64 (check number + 1, value)


class ErrorRecords:
    """One program's error record on one stream, and the pinned slots its copies land
    in (see the module doc)."""

    def __init__(self, device: Any, stream: int) -> None:
        self.device, self.stream = device, stream
        self.ptr = device.alloc(RECORD_BYTES)
        device.zero(self.ptr, RECORD_BYTES, stream)
        self._free: list[_Slot] = []
        self._pending: deque[tuple[_Slot, Sequence[Any], Mapping[str, tuple[int, ...]], int]]
        self._pending = deque()
        self._calls = 0
        self._lock = threading.Lock()

    def enqueue(self, checks: Sequence[Any], shapes: Mapping[str, tuple[int, ...]]) -> int:
        """After a call's launches: enqueue the record's copy, its reset and an event.
        Returns the call's number (for `poll(current=...)`)."""
        device, stream = self.device, self.stream
        with self._lock:
            slot = self._free.pop() if self._free else _Slot(device)
            slot.host[:] = 0
            device.copy_to_host_async(slot.host_ptr, self.ptr, RECORD_BYTES, stream)
            device.zero(self.ptr, RECORD_BYTES, stream)
            device.record_event(slot.event, stream)
            self._calls += 1
            self._pending.append((slot, checks, shapes, self._calls))
            return self._calls

    def poll(self, *, wait: bool = False, current: int | None = None) -> ShapeError | None:
        """The failure of the oldest finished call that failed, or None; every finished
        call's slot is released. `wait`: synchronise the stream first (all finish).
        A failure of a call other than `current` says it came from an earlier call."""
        if wait:
            self.device.synchronize(self.stream)
        with self._lock:
            while self._pending:
                slot, checks, shapes, call = self._pending[0]
                if not wait and not self.device.event_done(slot.event):
                    return None
                self._pending.popleft()
                record = slot.host.copy()
                self._free.append(slot)
                if record[0]:
                    return _failure(check_failure(checks, record, shapes), call != current)
        return None

    def in_flight(self) -> int:
        """Calls whose record has not been read yet."""
        with self._lock:
            return len(self._pending)


def _failure(error: ShapeError, earlier: bool) -> ShapeError:
    if not earlier:
        return error
    diag = error.diagnostics[0]
    return ShapeError(
        f"{diag.message} (in an earlier call on this stream: CUDA kernels run "
        "asynchronously, so its bounds error surfaces at a later call)",
        diag.span,
        hint=diag.hint,
    )


class _Slot:
    """A pinned host int64[2] and the event that says the copy into it has landed."""

    def __init__(self, device: Any) -> None:
        self.host_ptr, self.host = device.pinned_int64(2)
        self.event = device.new_event()


class TempPool:
    """A program's temporaries, kept per (stream, sizes): device memory allocated at a
    signature's first call; the caller zero-fills it on the stream at every call."""

    LIMIT = 8

    def __init__(self) -> None:
        self._pools: dict[tuple[int, Hashable], dict[Hashable, int]] = {}
        self._lock = threading.Lock()

    def pointer(
        self, device: Any, stream: int, signature: Hashable, name: Hashable, nbytes: int
    ) -> int:
        """The temporary `name` of `nbytes` bytes for calls of `signature` on `stream`."""
        with self._lock:
            pool = self._pools.get((stream, signature))
            if pool is None:
                if len(self._pools) >= self.LIMIT:
                    self._release(device)
                pool = self._pools[(stream, signature)] = {}
            ptr = pool.get(name)
            if ptr is None:
                ptr = pool[name] = device.alloc(nbytes)
            return ptr

    def _release(self, device: Any) -> None:
        for (stream, _), pool in self._pools.items():
            device.synchronize(stream)  # kernels in flight may still use them
            for ptr in pool.values():
                device.free(ptr)
        self._pools.clear()


class GraphCache:
    """Captured graphs of a program's launches, by (stream, sizes, pointers)."""

    LIMIT = 16

    def __init__(self) -> None:
        self._graphs: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.captures = 0  # how many graphs were captured (tests)

    def launch(
        self,
        device: Any,
        module: Any,
        key: Hashable,
        stream: int,
        run: Callable[[Any, Any, int], None],
    ) -> None:
        """Replay the graph of `key` on `stream`, capturing it first by calling
        `run(device, module, capture_stream)` (which launches the kernels)."""
        with self._lock:
            graph = self._graphs.get(key)
            if graph is None:
                if len(self._graphs) >= self.LIMIT:
                    device.synchronize(stream)
                    for old in self._graphs.values():
                        device.destroy_graph(old)
                    self._graphs.clear()
                graph = self._graphs[key] = device.capture(run, module)
                self.captures += 1
        device.launch_graph(graph, stream)


class HostState:
    """A CUDA program's pooled host-path state: error records by (device, stream),
    temporaries, captured graphs, and the overwrite analysis (`runtime.cuda_host`)."""

    def __init__(self) -> None:
        self.temps = TempPool()
        self.graphs = GraphCache()
        self._records: dict[tuple[int, int], ErrorRecords] = {}
        self._overwrites: Overwrites | None = None
        self._overwritten: dict[tuple[tuple[str, int], ...], frozenset[str]] = {}
        self._lock = threading.Lock()

    def records(self, device: Any, stream: int) -> ErrorRecords:
        """The error record of calls on `stream` (allocated at the first)."""
        key = (id(device), stream)
        found = self._records.get(key)
        if found is None:
            with self._lock:
                found = self._records.get(key)
                if found is None:
                    found = self._records[key] = ErrorRecords(device, stream)
        return found

    def all_records(self) -> list[ErrorRecords]:
        with self._lock:
            return list(self._records.values())

    def overwritten(self, function: Any, env: Mapping[str, int]) -> frozenset[str]:
        """`Overwrites(function).outputs(env)`, the analysis made once, its answer
        remembered per sizes."""
        if self._overwrites is None:
            self._overwrites = Overwrites(function)
        key = tuple(sorted(env.items()))
        found = self._overwritten.get(key)
        if found is None:
            found = self._overwrites.outputs(env)
            if len(self._overwritten) > 64:
                self._overwritten.clear()
            self._overwritten[key] = found
        return found


__all__ = ["RECORD_BYTES", "ErrorRecords", "GraphCache", "HostState", "TempPool"]
