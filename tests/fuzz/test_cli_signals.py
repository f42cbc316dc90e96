"""`python -m tools.fuzz` stopped by SIGTERM stops its worker processes too (a killed
campaign must not leave workers running on a shared machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# the CLI, with its one task replaced by the worker's stand-in for a hanging program
DRIVER = """
import tools.fuzz as f
run = f.Pool.map
f.Pool.map = lambda self, tasks, timeout, done: run(self, [("sleep", 600, tasks[0][2], None)],
                                                    900, done)
f.main(["--seeds", "0:1", "--jobs", "1", "--targets", "interp"])
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_stops_a_busy_worker() -> None:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while time.monotonic() < deadline and len(workers) < 2:  # resource tracker + worker
            workers = _children(proc.pid)
            time.sleep(0.2)
        assert workers, "no worker started"
        time.sleep(2.0)  # the worker is in its 600 s task
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers)
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in _children(proc.pid) | workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
