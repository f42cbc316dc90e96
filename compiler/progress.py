"""A progress line on stderr, only when stderr is a terminal.

    with Progress("gradcheck matmul") as p:     # nothing at all unless stderr is a TTY
        p.update("input A", done=3, total=40)   # the line shows `... input A 3/40`

A background thread redraws one line (`\\r`, a spinner frame, the label, the latest
update) every `interval` seconds, starting after `delay` seconds so quick commands
print nothing; leaving the block erases the line. Output on a file or a pipe (CI,
tests, `| less`) never sees it. `Progress(..., enabled=True)` forces it (for tests). `CloseOnWrite(sys.stdout, p)`
stops it when the command prints (`tcc compile` runs under one, so deriving a large
gradient shows a spinner until its text is printed).
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import TextIO

FRAMES = "|/-\\"


class Progress:
    """A spinner with a label and an optional done/total counter (see the module doc)."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        delay: float = 1.0,
        interval: float = 0.1,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.label = label
        self.detail = ""
        self.delay = delay
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._width = 0

    def update(self, detail: str = "", done: int | None = None, total: int | None = None) -> None:
        counter = f" {done}/{total}" if done is not None and total else ""
        self.detail = f"{detail}{counter}"

    def __enter__(self) -> Progress:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="tcc-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop redrawing and erase the line (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        frame = 0
        while not self._stop.is_set():
            text = f"{FRAMES[frame % len(FRAMES)]} {self.label}"
            if self.detail:
                text += f": {self.detail}"
            with self._lock:
                if self._stop.is_set():
                    return
                pad = " " * max(0, self._width - len(text))
                self.stream.write("\r" + text + pad)
                self.stream.flush()
                self._width = len(text)
            frame += 1
            self._stop.wait(self.interval)


class CloseOnWrite:
    """A text stream that closes `progress` (erasing its line) before its first write,
    so that a command's own output never lands on the spinner's line."""

    def __init__(self, stream: TextIO, progress: Progress) -> None:
        self._stream = stream
        self._progress = progress

    def write(self, text: str) -> int:
        self._progress.close()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


__all__ = ["CloseOnWrite", "Progress"]
