"""compiler.progress: a spinner line on a terminal only, erased when done."""

from __future__ import annotations

import io
import time

from compiler.progress import Progress


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()  # isatty() is False, as for a pipe or a file
    with Progress("work", stream=stream, delay=0, interval=0.001) as p:
        p.update("step", 1, 2)
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_draws_and_erases_on_a_terminal() -> None:
    stream = io.StringIO()
    with Progress("gradcheck f", stream=stream, enabled=True, delay=0, interval=0.001) as p:
        p.update("finite differences", 3, 40)
        deadline = time.monotonic() + 5
        while "3/40" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.005)
    text = stream.getvalue()
    assert "gradcheck f: finite differences 3/40" in text
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and last[-2].strip() == ""  # the line is blanked at the end


def test_quick_work_prints_nothing_before_the_delay() -> None:
    stream = io.StringIO()
    with Progress("quick", stream=stream, enabled=True, delay=10):
        pass
    assert stream.getvalue() == ""
