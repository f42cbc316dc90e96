"""The steady-state host path of CUDA device calls (`runtime.cuda_host`): no allocation
per call (pooled error record, pooled temporaries, outputs the kernels overwrite left
unfilled), errors reported at the next point the host can read them without waiting,
CUDA graphs captured once and replayed; the driver's launch arguments reused. Runs on
target "cuda-emulated"; the driver calls are checked against a mocked `cuda.bindings`."""

from __future__ import annotations

import ctypes
import shutil
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from compiler.cuda import cuda_driver
from compiler.cuda.cuda_emulation import EMULATED_DEVICE, EmulatedDevice
from compiler.cuda.cuda_options import CudaOptions
from compiler.diagnostics import OptionsError, ShapeError
from compiler.kernel import define
from compiler.runtime.cuda_device import synchronize
from tests.codegen.device_cases import EMBEDDING, MATMUL, HostArray

EMULATED = "cuda-emulated"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
# an output read before it is written in full: it must start as zeros
ACCUMULATE = "def acc(float(N) A) -> (O) { O(i) += A(i) }"


def _host(a: np.ndarray) -> HostArray:
    return HostArray(np.ascontiguousarray(a))


# ------------------------------------------------------------ error records


@needs_gxx
def test_a_call_allocates_nothing_once_its_record_is_pooled() -> None:
    k = define(EMBEDDING, target=EMULATED)
    E = _host(np.arange(8, dtype=np.float32).reshape(4, 2))
    idx = _host(np.array([3, 0, 1], np.int32))
    out = _host(np.zeros((3, 2), np.float32))
    k(E, idx, out=(out,))  # the first call allocates the record
    live = EMULATED_DEVICE.allocated()
    for _ in range(3):
        k(E, idx, out=(out,))
    assert EMULATED_DEVICE.allocated() == live
    np.testing.assert_array_equal(out.array, E.array[[3, 0, 1]])


@needs_gxx
def test_a_failure_is_reported_by_its_call_and_the_record_is_reset() -> None:
    k = define(EMBEDDING, target=EMULATED)
    E = _host(np.ones((4, 2), np.float32))
    with pytest.raises(ShapeError, match="index 9 out of range") as got:
        k(E, _host(np.array([0, 9, 1], np.int32)))
    assert "earlier call" not in got.value.message  # emulation: the call has finished
    (out,) = k(E, _host(np.array([0, 3, 1], np.int32)))  # no stale failure
    np.testing.assert_array_equal(out.get(), np.ones((3, 2), np.float32))


class _Asynchronous:
    """The emulated device as a GPU looks to the host: a call's events are not done
    until the stream is synchronised."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.synchronised = 0
        self.events: list[list[bool]] = []

        def new_event(dev: Any) -> list[bool]:
            self.events.append([False])
            return self.events[-1]

        def record_event(dev: Any, event: list[bool], stream: int) -> None:
            event[0] = False  # the work before it is enqueued, not done

        def synchronize(dev: Any, stream: int = 0) -> None:
            self.synchronised += 1
            self.finish()

        monkeypatch.setattr(EmulatedDevice, "new_event", new_event)
        monkeypatch.setattr(EmulatedDevice, "record_event", record_event)
        monkeypatch.setattr(EmulatedDevice, "event_done", lambda dev, event: event[0])
        monkeypatch.setattr(EmulatedDevice, "synchronize", synchronize)

    def finish(self) -> None:
        """The GPU has finished everything enqueued (without the host waiting)."""
        for event in self.events:
            event[0] = True


@needs_gxx
def test_an_asynchronous_failure_surfaces_at_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _Asynchronous(monkeypatch)
    k = define(EMBEDDING, target=EMULATED)
    E = _host(np.ones((4, 2), np.float32))
    good, bad = _host(np.array([0, 1], np.int32)), _host(np.array([7, 1], np.int32))
    k(E, bad)  # enqueued; the host does not wait for it
    assert gpu.synchronised == 0
    k(E, good)  # the failing call has not finished: nothing known yet
    gpu.finish()
    with pytest.raises(ShapeError, match="index 7 out of range.*earlier call"):
        k(E, good)
    k(E, good)  # reported once
    gpu.finish()
    assert gpu.synchronised == 0


@needs_gxx
def test_synchronize_waits_and_raises_a_pending_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _Asynchronous(monkeypatch)
    k = define(EMBEDDING, target=EMULATED)
    E = _host(np.ones((4, 2), np.float32))
    k(E, _host(np.array([1, 5], np.int32)))
    with pytest.raises(ShapeError, match="index 5 out of range"):
        synchronize(k)
    assert gpu.synchronised == 1
    synchronize(k)  # nothing pending


# ------------------------------------------------------------ outputs and temporaries


class _Dirty:
    """Fresh emulated device memory filled with NaN bytes; counts zero fills."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.zeroed: list[int] = []
        real_alloc, real_zero = EmulatedDevice.alloc, EmulatedDevice.zero

        def alloc(dev: Any, nbytes: int) -> int:
            ptr = real_alloc(dev, nbytes)
            ctypes.memset(ptr, 0xFF, max(1, nbytes))
            return ptr

        def zero(dev: Any, ptr: int, nbytes: int, stream: int = 0) -> None:
            self.zeroed.append(nbytes)
            real_zero(dev, ptr, nbytes, stream)

        monkeypatch.setattr(EmulatedDevice, "alloc", alloc)
        monkeypatch.setattr(EmulatedDevice, "zero", zero)


@needs_gxx
def test_outputs_the_kernels_overwrite_are_not_zero_filled(monkeypatch: pytest.MonkeyPatch) -> None:
    dirty = _Dirty(monkeypatch)
    k = define(MATMUL, target=EMULATED)
    rng = np.random.default_rng(5)
    A, B = (
        rng.standard_normal((7, 5)).astype(np.float32),
        rng.standard_normal((5, 3)).astype(np.float32),
    )
    (C,) = k(_host(A), _host(B))
    np.testing.assert_allclose(C.get(), A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)
    assert C.nbytes not in dirty.zeroed


@needs_gxx
def test_an_output_read_before_written_is_zero_filled(monkeypatch: pytest.MonkeyPatch) -> None:
    dirty = _Dirty(monkeypatch)
    k = define(ACCUMULATE, target=EMULATED)
    A = np.arange(1, 8, dtype=np.float32)
    (out,) = k(_host(A))
    np.testing.assert_array_equal(out.get(), A)
    assert out.nbytes in dirty.zeroed


# ------------------------------------------------------------ graphs


@needs_gxx
def test_a_graph_is_captured_once_per_pointers_and_replayed() -> None:
    k = define(MATMUL, target=EMULATED, options=CudaOptions(graph=True))
    rng = np.random.default_rng(7)
    A, B = (
        _host(rng.standard_normal((3, 4)).astype(np.float32)),
        _host(np.eye(4, 2, dtype=np.float32)),
    )
    C = _host(np.zeros((3, 2), np.float32))
    k(A, B, out=(C,))
    A.array[:] = rng.standard_normal((3, 4))  # new data, same memory: the replay reads it
    k(A, B, out=(C,))
    np.testing.assert_allclose(C.array, A.array @ B.array, rtol=1e-6)
    graphs = k._native.host.graphs
    assert graphs.captures == 1
    D = _host(np.zeros((3, 2), np.float32))
    k(A, B, out=(D,))  # another output pointer: another graph
    assert graphs.captures == 2
    np.testing.assert_allclose(D.array, C.array)


def test_graph_option_is_validated() -> None:
    with pytest.raises(OptionsError, match="graph must be True or False"):
        CudaOptions(graph=1)  # type: ignore[arg-type]


# ------------------------------------------------------------ the driver, mocked


class _Driver:
    """The few `cuda.bindings.driver` calls the host path makes, recorded."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_NOT_READY = 600

    CUevent_flags = SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.launches: list[int] = []
        self.ready = True

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> tuple[int, Any]:
            self.calls.append((name, args))
            return 0, f"{name}-handle"

        return call

    def cuEventQuery(self, event: Any) -> tuple[int]:  # noqa: N802
        return (600 if not self.ready else 0,)

    def cuStreamCreate(self, flags: int) -> tuple[int, int]:  # noqa: N802
        self.calls.append(("cuStreamCreate", (flags,)))
        return 0, 77

    def cuLaunchKernel(self, fn: Any, *args: Any) -> tuple[int]:  # noqa: N802
        self.calls.append(("cuLaunchKernel", args))
        self.launches.append(args[-2])  # the address of the `void**` argument array
        return (0,)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> _Driver:
    fake = _Driver()
    monkeypatch.setattr(cuda_driver, "_bindings", lambda: (fake, None))
    return fake


@pytest.mark.parametrize("index32", [False, True])
def test_launch_arguments_are_built_once_and_refilled(driver: _Driver, index32: bool) -> None:
    module = cuda_driver.Module("module")
    module.launch("k0", (2, 1, 1), 256, [0x1000, 0x2000], [41], index32=index32)
    module.launch("k0", (2, 1, 1), 256, [0x3000, 0x4000], [2**20 + 1], index32=index32)
    first, second = driver.launches
    assert first == second  # the same argument buffer, refilled
    holder = module.arguments["k0", 2, 1, index32]
    assert [h.value for h in holder.pointers] == [0x3000, 0x4000]
    size_type = ctypes.c_int if index32 else ctypes.c_longlong
    assert all(type(h) is size_type for h in holder.sizes) and holder.sizes[0].value == 2**20 + 1
    assert sum(1 for name, _ in driver.calls if name == "cuModuleGetFunction") == 1


def test_capture_is_a_stream_capture_on_a_stream_of_tccs(driver: _Driver) -> None:
    device = cuda_driver.Device("dev", "ctx", "sm_90")
    seen: list[int] = []
    graph = device.capture(lambda dev, module, stream: seen.append(stream), "module")
    device.launch_graph(graph, 5)
    names = [name for name, _ in driver.calls]
    assert names == [
        "cuStreamCreate", "cuStreamBeginCapture", "cuStreamEndCapture",
        "cuGraphInstantiate", "cuGraphDestroy", "cuGraphLaunch",
    ]  # fmt: skip
    assert seen == [77] and driver.calls[-1][1] == ("cuGraphInstantiate-handle", 5)
    assert driver.calls[0][1] == (1,)  # a non-blocking stream: no implicit sync with 0
    device.capture(lambda dev, module, stream: None, "module")
    assert [n for n, _ in driver.calls].count("cuStreamCreate") == 1  # made once


def test_event_done_does_not_wait(driver: _Driver) -> None:
    device = cuda_driver.Device("dev", "ctx", "sm_90")
    event = device.new_event()
    driver.ready = False
    assert not device.event_done(event)
    driver.ready = True
    assert device.event_done(event)
    assert not any(
        name.startswith(("cuStreamSynchronize", "cuCtxSynchronize")) for name, _ in driver.calls
    )
