"""compiler.autotune: checked candidates, determinism, the budget, gradients, the cache."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler
from compiler.options import Options
from compiler.tune import InlineExecutor, TuneError
from compiler.tune import job as J
from compiler.tune.autotune import parse_budget
from tests.tune.kit import MM, fake_measure, fake_ms, mm_inputs


def _tune(tmp_path: Path, *inputs: Any, **kw: Any) -> Any:
    kw.setdefault("executor", InlineExecutor(measure_fn=fake_measure))
    kw.setdefault("budget", None)
    return compiler.autotune(MM, "mm", *inputs, cache=tmp_path, progress=False, **kw)


def _passes(job: J.TuneJob, options: Any) -> J.Outcome:
    return J.Outcome(options, True)


def _fake_time(job: J.TuneJob, options: Any) -> J.Outcome:
    return J.Outcome(options, True, times_ms=(fake_ms(options),))


def test_the_search_is_deterministic_under_a_seed(tmp_path: Path) -> None:
    def run(seed: int, cache: Path) -> Any:
        executor = InlineExecutor(_passes, _fake_time)
        return _tune(cache, *mm_inputs(), candidates=20, seed=seed, executor=executor)

    a, b, c = run(5, tmp_path / "a"), run(5, tmp_path / "b"), run(6, tmp_path / "c")
    assert [t.options for t in a.trials] == [t.options for t in b.trials]
    assert [t.options for t in a.trials] != [t.options for t in c.trials]
    assert a.tried == 20 and a.trials[0].options == Options()
    assert a.options == min((t.options for t in a.trials), key=fake_ms)
    # a second run seeds its first generation with the cached winner
    again = run(5, tmp_path / "a")
    assert again.trials[1].options == a.options


def test_a_wrong_candidate_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates with threads=1 compute wrong results and would be the fastest."""
    real = J._define

    class Wrong:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

        def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
            (c,) = self.kernel(*arrays)
            c = c.copy()
            c.flat[c.size // 2] += 0.5
            return (c,)

    def planted(job: J.TuneJob, options: Any) -> Any:
        kernel = real(job, options)
        return Wrong(kernel) if options.threads == 1 else kernel

    def measure(job: J.TuneJob, options: Any) -> J.Outcome:
        ms = 1e-3 if options.threads == 1 else fake_ms(options)
        return J.Outcome(options, True, times_ms=(ms,))

    monkeypatch.setattr(J, "_define", planted)
    result = _tune(
        tmp_path, *mm_inputs(), candidates=16, executor=InlineExecutor(measure_fn=measure)
    )
    wrong = [t for t in result.trials if t.options.threads == 1]
    assert wrong, "the search should have tried threads=1"
    for t in wrong:
        assert not t.ok and t.time_ms is None
        assert t.reason.startswith("outputs differ from the default's: output 0 differs by")
    assert result.options.threads != 1
    assert set(result.failed) == set(wrong)


def test_the_reference_evaluator_checks_small_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = J.check

    def spy(job: J.TuneJob, options: Any) -> J.Outcome:
        seen.append(len(job.expected))
        return real(job, options)

    result = _tune(tmp_path, *mm_inputs(), candidates=2, executor=InlineExecutor(spy, fake_measure))
    assert seen == [2, 2] and result.tried == 2  # the default's outputs and interp's
    big = mm_inputs(300, 200, 300)
    seen.clear()
    _tune(tmp_path, *big, candidates=1, executor=InlineExecutor(spy, fake_measure))
    assert seen == [1]


def test_tuned_winner_is_used_by_define(tmp_path: Path) -> None:
    a, b = mm_inputs(6, 3, 9)
    result = _tune(tmp_path, a, b, candidates=6, seed=2)
    assert result.cache_path == str(tmp_path / "tuned-options.json")
    k = compiler.define(MM, "mm", options="tuned", cache=tmp_path)
    assert k.options_for(a, b) == result.options
    np.testing.assert_allclose(k(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)


def test_gradient_tuning(tmp_path: Path) -> None:
    a, b = mm_inputs(5, 4, 3)
    result = _tune(tmp_path, a, b, candidates=5, grad=True, seed=1)
    assert result.name == "mm_grad" and result.tried == 5
    k = compiler.define(MM, "mm", options="tuned", cache=tmp_path)
    g = np.ones((5, 3), np.float32)
    assert k.grad.options_for(a, b, g) == result.options
    da, db = k.vjp(a, b, grad_outputs=(g,))
    np.testing.assert_allclose(da, g @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, a.T @ g, rtol=1e-5, atol=1e-5)


def test_real_timing_inline(tmp_path: Path) -> None:
    result = compiler.autotune(
        MM, "mm", *mm_inputs(), candidates=3, budget=None, cache=False,
        executor=InlineExecutor(), progress=False,
    )  # fmt: skip
    assert result.cache_path is None
    assert all(t.ok and t.time_ms is not None and t.time_ms > 0 for t in result.trials)
    assert result.time_ms > 0 and result.default_ms > 0 and result.speedup >= 1.0
    assert "candidates" in result.summary()


def test_budget_in_seconds_stops_the_search(tmp_path: Path) -> None:
    result = _tune(tmp_path, *mm_inputs(), budget=0.01, seed=0)
    assert 1 <= result.tried <= 8  # at least the default; stops within the first generation


@pytest.mark.parametrize(
    ("text", "seconds"), [(60, 60.0), ("90s", 90.0), ("2m", 120.0), (" 1.5h", 5400.0)]
)
def test_parse_budget(text: object, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "-5s", 0, "3 days"])
def test_bad_budgets(bad: object) -> None:
    with pytest.raises(compiler.OptionsError, match="budget"):
        parse_budget(bad)


def test_user_errors(tmp_path: Path) -> None:
    a, b = mm_inputs()
    with pytest.raises(compiler.OptionsError, match="no tunable Options"):
        compiler.autotune(MM, "mm", a, b, target="interp", cache=False)
    with pytest.raises(compiler.ShapeError):
        compiler.autotune(MM, "mm", a, cache=False)
    with pytest.raises(compiler.OptionsError, match="needs a budget"):
        compiler.autotune(MM, "mm", a, b, budget=None, cache=False)
    with pytest.raises(compiler.OptionsError, match="candidates"):
        compiler.autotune(MM, "mm", a, b, candidates=0, cache=False)


def test_a_failing_default_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(job: J.TuneJob, options: Any) -> Any:
        raise RuntimeError("no luck")

    monkeypatch.setattr(J, "_define", broken)
    with pytest.raises(TuneError, match="default options fail on these inputs: compile failed"):
        _tune(tmp_path, *mm_inputs(), candidates=3)


def test_progress_bar_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    executor = InlineExecutor(_passes, _fake_time)
    _tune(tmp_path / "quiet", *mm_inputs(), candidates=3, executor=executor)
    assert capsys.readouterr().err == ""  # stderr is not a terminal here
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    compiler.autotune(
        MM, "mm", *mm_inputs(), candidates=3, budget=None, cache=tmp_path / "tty",
        executor=InlineExecutor(_passes, _fake_time), progress=True,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert "tune mm" in err and "3/3" in err and "best " in err and "failed 0" in err
    compiler.autotune(
        MM, "mm", *mm_inputs(), candidates=3, budget=None, cache=False,
        executor=InlineExecutor(_passes, _fake_time), progress=False,
    )  # fmt: skip
    assert capsys.readouterr().err == ""
