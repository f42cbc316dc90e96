"""compiler.progress: a spinner line on a terminal only, erased when done."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time

import numpy as np
import pytest

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


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLOW = os.path.join(ROOT, "examples", "conv2d.tc")  # its gradient's LLVM code takes seconds


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal")
def test_tcc_compile_grad_shows_a_spinner_on_a_terminal_only() -> None:
    # a gradient whose derivation takes longer than the spinner's delay
    argv = [sys.executable, "-m", "compiler", "compile", SLOW, "--grad", "--emit", "llvm"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: tcc on the pseudo-terminal
        try:
            os.chdir(ROOT)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    text = out.decode()
    assert "| tcc compile" in text
    assert "define" in text and "conv2d_grad" in text
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "tcc compile" not in piped.stderr and "\r" not in piped.stderr


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_define_shows_progress_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import compiler
    import compiler.progress

    made: list[Progress] = []

    def instant(label: str, **kwargs: object) -> Progress:  # without the one-second delay
        made.append(Progress(label, delay=0, interval=0.001, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(compiler.progress, "Progress", instant)
    src = "def scale2(float(N) A) -> (B) { B(i) = 2.0 * A(i) }"
    monkeypatch.setattr(sys, "stderr", _TTY())
    compiler.define(src, "scale2", target="interp")
    assert made[-1].label == "tcc: compiling 'scale2'" and made[-1].enabled
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    kernel = compiler.define(src, "scale2", target="interp")
    assert not made[-1].enabled and pipe.getvalue() == ""
    (b,) = kernel(np.arange(3, dtype=np.float32))
    assert b.tolist() == [0.0, 2.0, 4.0]
