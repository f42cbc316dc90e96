"""Executors: worker processes that crash or hang, and the Ray backend on a local instance."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler
from compiler.options import Options
from compiler.tune import LocalExecutor
from compiler.tune.job import TuneJob
from tests.tune import tasks
from tests.tune.kit import MM, mm_inputs


def _job(tmp_path: Path) -> TuneJob:
    a, b = mm_inputs()
    return TuneJob(uuid.uuid4().hex, MM, "mm", "llvm", (a, b), ((a @ b,),), str(tmp_path))


CANDIDATES = [Options(), Options(threads=1), Options(threads=2, innermost=None)]


def _check(executor: Any, job: TuneJob) -> list[Any]:
    executor.start(job)
    try:
        return executor.check(CANDIDATES)
    finally:
        executor.close()


def test_local_workers_check_and_time(tmp_path: Path) -> None:
    executor = LocalExecutor(workers=2, timeout_s=120)
    executor.start(_job(tmp_path))
    try:
        outcomes = executor.check(CANDIDATES)
        timed = executor.measure(Options(threads=1))
        pair = executor.compare(Options(), Options(threads=2, innermost=None))
    finally:
        executor.close()
    assert [o.ok for o in outcomes] == [True, True, True]
    assert [o.options for o in outcomes] == CANDIDATES
    assert timed.ok and len(timed.times_ms) == 5 and min(timed.times_ms) > 0
    assert pair.ok and len(pair.times_ms) == len(pair.other_ms) == 15
    assert min(pair.times_ms + pair.other_ms) > 0


def test_a_crashing_candidate_is_recorded(tmp_path: Path) -> None:
    executor = LocalExecutor(workers=2, timeout_s=120, check_fn=tasks.crash_on_one_thread)
    outcomes = _check(executor, _job(tmp_path))
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].reason == "crashed: its worker process died"


def test_a_hanging_candidate_times_out(tmp_path: Path) -> None:
    executor = LocalExecutor(workers=2, timeout_s=8, check_fn=tasks.hang_on_one_thread)
    outcomes = _check(executor, _job(tmp_path))
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].reason == "timed out after 8 s"


def test_ray_backend_on_a_local_instance(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tcc[ray]')")
    import os

    from compiler.tune import RayExecutor

    root = str(Path(__file__).resolve().parents[2])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={
            "env_vars": {"PYTHONPATH": root, "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "")}
        },
    )
    try:
        node = {f"node:{ray.util.get_node_ip_address()}": 0.01}  # time on this node
        executor = RayExecutor(None, timeout_s=120, measure_resources=node)
        assert executor.workers == 2
        a, b = mm_inputs()
        result = compiler.autotune(
            MM, "mm", a, b, candidates=4, budget=None, cache=tmp_path, executor=executor,
            progress=False, seed=3,
        )  # fmt: skip
        assert result.tried == 4 and all(t.ok for t in result.trials)
        k = compiler.define(MM, "mm", options="tuned", cache=tmp_path)
        assert k.options_for(a, b) == result.options
        np.testing.assert_allclose(k(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)
        crashing = RayExecutor(None, timeout_s=120, check_fn=tasks.crash_on_one_thread)
        outcomes = _check(crashing, _job(tmp_path))
        assert [o.ok for o in outcomes] == [True, False, True]
        assert outcomes[1].reason.startswith("crashed")
    finally:
        ray.shutdown()
