"""A tuning worker process: reads tasks on stdin, writes outcomes on its own pipe.

    parent -> worker: frame(sys.path), frame(TuneJob), then frame((fn, options, kwargs)) ...
    worker -> parent: frame("ready"), then frame(Outcome) per task

A frame is an 8-byte little-endian length and a pickle (parent and worker are the
same program on the same machine: the parent started it). The worker is started as
`python -c BOOTSTRAP`, not through multiprocessing, so it never imports the user's
`__main__` (a script without an `if __name__ == "__main__":` guard would otherwise run
again in every worker). Its stdout is moved to stderr at start, so whatever compiled
code prints cannot corrupt the frames; the parent discards its stderr. It exits at
the end of stdin. It imports the job's `preload` modules first (torch, when the caller
had imported it), so that it times candidates with the caller's runtimes loaded.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import struct
import sys
from typing import Any, BinaryIO

BOOTSTRAP = (
    "import pickle,struct,sys;"
    "n=struct.unpack('<Q',sys.stdin.buffer.read(8))[0];"
    "sys.path[:0]=pickle.loads(sys.stdin.buffer.read(n));"
    "from compiler.tune.worker import serve;serve()"
)
_HEADER = struct.Struct("<Q")


def write_frame(stream: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: BinaryIO) -> Any:
    """The next value; EOFError at the end of the stream (or a cut-off frame)."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def serve() -> None:
    """The worker's loop (see the module doc)."""
    from compiler.tune.executors import guarded

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    job = read_frame(inp)
    for module in job.preload:  # the caller's runtimes (torch's libgomp), before ours
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    import compiler.kernel  # noqa: F401  (the import cost before "ready", not in a task's time)

    write_frame(out, "ready")
    while True:
        try:
            fn, options, kw = read_frame(inp)
        except EOFError:
            return
        write_frame(out, guarded(fn, job, options, **kw))


__all__ = ["BOOTSTRAP", "read_frame", "serve", "write_frame"]
