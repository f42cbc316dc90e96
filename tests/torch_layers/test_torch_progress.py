"""A torch layer's compiles show a progress line on a terminal only (compiler.progress)."""

from __future__ import annotations

import io
import sys
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.progress  # noqa: E402
import compiler.torch as tct  # noqa: E402

SRC = "def twice_sq(double(N) A) -> (O) { O(i) = 2.0 * A(i) * A(i) }"


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Recorded(compiler.progress.Progress):
    """The real spinner without its one-second delay; each one made is recorded, and on
    a terminal it waits for its line to be drawn before closing."""

    made: list[tuple[str, bool]] = []

    def __init__(self, label: str, **kwargs: Any) -> None:
        super().__init__(label, delay=0, interval=0.001, **kwargs)
        _Recorded.made.append((label, self.enabled))

    def __exit__(self, *exc: Any) -> None:
        deadline = time.monotonic() + 5
        while self.enabled and self.label not in self.stream.getvalue():
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        super().__exit__(*exc)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    monkeypatch.setattr(compiler.progress, "Progress", _Recorded)
    monkeypatch.setattr(_Recorded, "made", [])
    return _Recorded.made


def _train_twice(layer: tct.TCLayer) -> None:
    for _ in range(2):
        a = torch.arange(4, dtype=torch.float64, requires_grad=True)
        layer(a)[0].sum().backward()
        torch.testing.assert_close(a.grad, 4 * a.detach())


def test_layer_compiles_show_progress_on_a_terminal(
    recorded: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tty = _TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    _train_twice(tct.define(SRC))
    labels = [label for label, enabled in recorded if enabled]
    # the define, the first forward call, the first backward; the second call: nothing
    assert labels == [
        "tcc: defining a layer",  # no name given: the only def
        "tcc: compiling layer 'twice_sq'",
        "tcc: compiling the gradient of 'twice_sq'",
    ]
    text = tty.getvalue()
    for label in labels:
        assert f"| {label}" in text
    assert text.endswith("\r") and text.rsplit("\r", 2)[-2].strip() == ""  # erased


def test_layer_compiles_print_nothing_on_a_pipe(
    recorded: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    _train_twice(tct.define(SRC, "twice_sq"))
    assert [label for label, _ in recorded][0] == "tcc: defining layer 'twice_sq'"
    assert not any(enabled for _, enabled in recorded)
    assert pipe.getvalue() == ""
