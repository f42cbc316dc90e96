"""The compile cache: native code by key, in memory and on disk.

    cache = CompileCache()                         # default dir: $XDG_CACHE_HOME/tcc or ~/.cache/tcc
    cache = CompileCache(tmp_path)                 # a directory of one's own (tests)
    cache = CompileCache(None)                     # in memory only
    key = cache_key({"source": text, ..., **environment_key()})
    value = cache.get(key)                         # this process's object, or None
    entry = cache.read(key)                        # a StoredEntry from disk, or None
    cache.write(key, entry); cache.put(key, value)

The key is the SHA-256 of the JSON of its components (strings by name), so every
component that changes the generated code (source, entry, dtypes, target, options,
compiler version and source digest, llvmlite/LLVM/islpy versions, host CPU name
and features: `environment_key`) gives a different entry. What is stored on disk
is what a warm load needs to skip isl, lowering and LLVM: the native object code
(`target_machine.emit_object`, loaded with `ExecutionEngine.add_object_file`: 2-6 ms
where re-JITting the optimised IR took 50-170 ms; one object file per part of
`cpu.llvm_split`, one after the other, their sizes in the metadata's
`"objects"`), the optimised IR text (zlib) for
`CompiledFunction.ir()`, and JSON metadata (the loop-IR Function, by
`codegen.loop_json`). A def whose code is compiled at its first call
(`runtime.native`: code the sizes decide) stores that first code in its entry, with
the branches it holds (`"branches"`); code for another set of branches goes to an
entry of its own, of code alone. Nothing is ever unpickled.

One entry is one file `<key>.tcc`:

    b"TCC-CACHE 3\\n"                                   magic and SCHEMA_VERSION
    {"key": ..., "hmac": ..., "sizes": [m, o, i]}\\n    header (JSON, one line)
    metadata JSON (m bytes) | object code (o bytes) | zlib IR (i bytes)

Security. An entry is native code that a later `define()` runs, so the disk half
trusts only what this user wrote (the rules of pip's and ccache's caches and of
Python's `__pycache__`):
- the directory is created with mode 0700; a directory (or an entry) that is not
  owned by the current user or that group or others may write is refused: one
  `CacheWarning`, then the cache works in memory only (a refused entry is rebuilt);
- entries are opened with `O_NOFOLLOW | O_NONBLOCK` and must be regular files of
  at most `MAX_ENTRY_BYTES`: a symlink (to `/dev/zero`, say), a FIFO or a device is
  a miss, never a hang or an unbounded read;
- each entry carries an HMAC-SHA256, under a per-user secret (`.secret`, 32 random
  bytes, mode 0600 in the directory), of its key, sizes and body: an entry copied
  under another key, or written by anyone who cannot read the secret, is a miss.

Writes go to a temporary file (mode 0600) in the same directory, are fsync'ed and
moved in place with `os.replace`, so readers (and other processes writing the same
key) see either nothing or a whole entry. Temporaries left behind by a killed
writer are counted by `info()` and removed once older than `STALE_TMP_SECONDS`
(at this process's first write) or by `clear()`. A file that is truncated, corrupt,
of another schema or key, or unreadable is a miss (a debug log) and is rebuilt; a
directory that cannot be written gives one `CacheWarning`, then the cache keeps
working in memory only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from compiler.codegen.cache_files import (
    CacheFormatError,
    Untrusted,
    check_trusted,
    load_secret,
    make_private_directory,
    read_own_file,
    write_atomically,
)
from compiler.codegen.loop_json import function_from_json, function_to_json
from compiler.cpu import llvm as backend
from compiler.cpu.llvm_emit import symbol
from compiler.cpu.runtime import CompiledFunction
from compiler.diagnostics import InternalError, OptionsError
from compiler.loops import ir as L

SCHEMA_VERSION = 3  # 3: object code in parts
MAGIC = b"TCC-CACHE %d\n" % SCHEMA_VERSION
SUFFIX = ".tcc"
SECRET_NAME = ".secret"
MAX_ENTRY_BYTES = 256 * 2**20  # an entry holds one kernel's object code: far less
STALE_TMP_SECONDS = 3600.0
log = logging.getLogger("compiler.cache")


class CacheWarning(UserWarning):
    """The on-disk compile cache cannot be used (the in-memory cache still works)."""


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/tcc`, else `~/.cache/tcc` (read when called)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "tcc"


def environment_key() -> dict[str, str]:
    """The key components that belong to this installation and machine."""
    return dict(_environment())


@cache
def _environment() -> dict[str, str]:
    return {
        "compiler": _compiler_digest(),
        "islpy": _version("islpy"),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "triple": llvm.get_process_triple(),
        "cpu": llvm.get_host_cpu_name(),
        "cpu_features": llvm.get_host_cpu_features().flatten(),
    }


def _version(dist: str) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


def _compiler_digest() -> str:
    """SHA-256 of the compiler's sources' names, sizes and modification times (what
    Python's own .pyc check reads): an edit, not only a release, is a new key."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        digest.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def cache_key(components: Mapping[str, str]) -> str:
    """The entry name of `components` (hex SHA-256 of their canonical JSON)."""
    text = json.dumps(dict(components), sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class StoredEntry:
    """What is kept on disk: JSON metadata, native object code, optimised IR text."""

    metadata: Mapping[str, Any]
    object_code: bytes
    ir_text: str


@dataclass(frozen=True)
class CacheInfo:
    directory: Path | None
    entries: int
    size_bytes: int
    temporaries: int = 0  # `.tmp` files of writers that have not finished (or were killed)


class CompileCache:
    """Compiled code by key: this process's objects in memory, entries on disk.

    `directory=None` keeps everything in memory. The memory half holds whatever the
    caller puts there (e.g. a compiled program); `lock(key)` lets concurrent callers
    compile a key once. The disk half follows the security rules of the module doc.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self._memory: dict[str, object] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._disk_ok = self.directory is not None
        self._secret: bytes | None = None
        self._swept = False
        self._warned = False

    def __repr__(self) -> str:
        return f"CompileCache({str(self.directory) if self.directory else None!r})"

    # ------------------------------------------------------------ memory

    def get(self, key: str) -> object | None:
        with self._lock:
            return self._memory.get(key)

    def put(self, key: str, value: object) -> None:
        with self._lock:
            self._memory[key] = value

    def lock(self, key: str) -> threading.Lock:
        """A lock for compiling `key` (one per key, never freed while the cache lives)."""
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    # -------------------------------------------------------------- disk

    @property
    def on_disk(self) -> bool:
        """Whether entries are read from and written to the directory."""
        return self._disk_ok

    def path(self, key: str) -> Path:
        if self.directory is None:
            raise InternalError("an in-memory CompileCache has no paths")
        return self.directory / f"{key}{SUFFIX}"

    def read(self, key: str) -> StoredEntry | None:
        """The entry for `key` from disk; None if absent, refused, unreadable or invalid."""
        if not self._disk_ok or not self._usable(create=False):
            return None
        path = self.path(key)
        try:
            data = read_own_file(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except Untrusted as err:
            self._warn(f"refusing entry {path}: {err}; compiling it again")
            return None
        except OSError as err:
            log.debug("compile cache: cannot read %s: %s", path, err)
            return None
        try:
            return decode_entry(data, key, self._secret or b"")
        except CacheFormatError as err:
            log.debug("compile cache: invalid entry %s (%s); rebuilding", path, err)
            return None

    def write(self, key: str, entry: StoredEntry) -> None:
        """Store `entry` atomically; an unwritable or untrusted directory disables the
        disk (one warning)."""
        if not self._disk_ok or not self._usable(create=True):
            return
        assert self.directory is not None and self._secret is not None
        try:
            if not self._swept:
                self._swept = True
                self._remove_stale_temporaries()
            write_atomically(self.path(key), encode_entry(entry, key, self._secret))
        except OSError as err:
            self._disable(f"cannot write to {self.directory} ({err})")

    def info(self) -> CacheInfo:
        """The directory, the number of entries in it and their total size, and the
        number of temporaries."""
        files = self._files()
        temporaries = self._temporaries()
        return CacheInfo(self.directory, len(files), sum(_size(f) for f in files), len(temporaries))

    def clear(self) -> int:
        """Remove every entry and temporary (and this process's memory half); returns
        how many files."""
        with self._lock:
            self._memory.clear()
        removed = 0
        for f in self._files() + self._temporaries():
            try:
                f.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def _files(self) -> list[Path]:
        if self.directory is None or not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(f"*{SUFFIX}"))

    def _temporaries(self) -> list[Path]:
        if self.directory is None or not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(".*.tmp"))

    def _remove_stale_temporaries(self) -> None:
        now = time.time()
        for f in self._temporaries():
            try:
                if now - f.lstat().st_mtime > STALE_TMP_SECONDS:
                    f.unlink()
            except OSError:
                pass

    # ---------------------------------------------------------- trust

    def _usable(self, create: bool) -> bool:
        """Whether the directory is this user's and private, with the secret loaded
        (created with `create`); False (and the disk off, one warning) if refused."""
        if self._secret is not None:
            return True
        assert self.directory is not None
        with self._lock:
            if self._secret is not None:
                return True
            try:
                if create:
                    make_private_directory(self.directory)
                elif not self.directory.exists():
                    return False
                check_trusted(os.stat(self.directory), "directory", directory=True)
                self._secret = load_secret(self.directory / SECRET_NAME, create)
            except FileNotFoundError:
                if create:
                    self._disable(f"cannot create {self.directory}")
                return False
            except Untrusted as err:
                self._disable(f"refusing {self.directory}: {err}")
                return False
            except OSError as err:
                self._disable(f"cannot use {self.directory} ({err})")
                return False
        return self._secret is not None

    def _disable(self, why: str) -> None:
        self._disk_ok = False
        self._warn(f"{why}; caching in memory only")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"tcc compile cache: {message}", CacheWarning, stacklevel=4)
        else:
            log.debug("compile cache: %s", message)


_SHARED: dict[Path | None, CompileCache] = {}
_SHARED_LOCK = threading.Lock()


def shared_cache(directory: str | os.PathLike[str] | None) -> CompileCache:
    """This process's CompileCache for `directory` (one per directory, so its memory
    half is shared by every kernel that uses the directory)."""
    path = None if directory is None else Path(directory).expanduser().absolute()
    with _SHARED_LOCK:
        found = _SHARED.get(path)
        if found is None:
            found = _SHARED[path] = CompileCache(path)
        return found


def resolve_cache(value: object) -> CompileCache | None:
    """`define(cache=...)`: True the default directory (computed now), False no cache,
    None memory only, a path that directory, or a CompileCache itself."""
    if isinstance(value, CompileCache):
        return value
    if value is True:
        try:
            return shared_cache(default_cache_dir())
        except RuntimeError:  # no home directory: memory only
            return shared_cache(None)
    if value is False:
        return None
    if value is None or isinstance(value, (str, os.PathLike)):
        return shared_cache(value)
    raise OptionsError(
        f"cache= must be True, False, None, a directory or a CompileCache, "
        f"got {type(value).__name__}",
        hint="cache=False compiles without caching; cache=None caches in memory only",
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ------------------------------------------------------------------ entry format


def _mac(secret: bytes, key: str, sizes: list[int], body: bytes) -> str:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    mac.update(json.dumps([key, sizes]).encode() + b"\n")
    mac.update(body)
    return mac.hexdigest()


def encode_entry(entry: StoredEntry, key: str, secret: bytes) -> bytes:
    """`entry` as the bytes of the file `<key>.tcc`, authenticated under `secret`."""
    meta = json.dumps(entry.metadata, sort_keys=True, allow_nan=True).encode()
    ir_z = zlib.compress(entry.ir_text.encode(), 1)
    body = meta + entry.object_code + ir_z
    sizes = [len(meta), len(entry.object_code), len(ir_z)]
    header = {"key": key, "hmac": _mac(secret, key, sizes, body), "sizes": sizes}
    return MAGIC + json.dumps(header).encode() + b"\n" + body


def decode_entry(data: bytes, key: str, secret: bytes) -> StoredEntry:
    """The entry in `data`; CacheFormatError unless it is whole, valid, for `key` and
    authenticated under `secret`."""
    if not data.startswith(MAGIC):
        raise CacheFormatError("not an entry of this schema version")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC) : end]) if end > 0 else None
        sizes = header["sizes"]
        m, o, i = (int(n) for n in sizes)
        body = data[end + 1 :]
        if header["key"] != key or len(body) != m + o + i or min(m, o, i) < 0:
            raise CacheFormatError("wrong key or length")
        if not hmac.compare_digest(str(header["hmac"]), _mac(secret, key, [m, o, i], body)):
            raise CacheFormatError("authentication failed (another key, secret or a change)")
        meta = json.loads(body[:m])
        ir_text = zlib.decompress(body[m + o :]).decode()
    except (TypeError, KeyError, ValueError, zlib.error, UnicodeDecodeError) as err:
        if isinstance(err, CacheFormatError):
            raise
        raise CacheFormatError(f"malformed: {err}") from None
    if not isinstance(meta, dict):
        raise CacheFormatError("metadata is not an object")
    return StoredEntry(meta, body[m : m + o], ir_text)


# ------------------------------------------------------------- object code


def compile_to_object(
    f: L.Function, *, meanwhile: Callable[[], None] | None = None
) -> tuple[CompiledFunction, StoredEntry]:
    """JIT-compile `f` through object files; returns the code and what to store
    (metadata `{"objects": [sizes]}`; callers add to it, e.g. the Function's JSON,
    made by `meanwhile`, which runs while LLVM compiles on its threads)."""
    compiling = backend.start_objects(f)
    if meanwhile is not None:
        try:
            meanwhile()
        except BaseException:
            compiling.cancel()
            raise
    objects = compiling.result()
    entry = StoredEntry({"objects": objects.sizes}, objects.code, objects.ir_text)
    return load_object(f, objects.code, objects.ir_text, objects.sizes), entry


def load_object(
    f: L.Function, data: bytes, ir_text: str, sizes: Sequence[int] | None = None
) -> CompiledFunction:
    """`f`'s code from the object files `data`, of the byte `sizes` (None: one file), in
    an MCJIT engine of its own; a CacheFormatError for bytes that are not that."""
    sizes = [len(data)] if sizes is None else sizes
    ok = all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes)
    if not ok or sum(sizes) != len(data):
        raise CacheFormatError(f"object sizes {list(sizes)!r} do not divide {len(data)} bytes")
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    parts = [data[a : a + n] for a, n in zip(starts, sizes, strict=True)]
    try:
        code = backend.load_objects(f, parts, ir_text)
    except InternalError:
        raise CacheFormatError(f"object code has no symbol {symbol(f)}") from None
    return CompiledFunction(f, code)


__all__ = [
    "SCHEMA_VERSION",
    "CacheFormatError",
    "CacheInfo",
    "CacheWarning",
    "CompileCache",
    "MAX_ENTRY_BYTES",
    "StoredEntry",
    "cache_key",
    "compile_to_object",
    "decode_entry",
    "default_cache_dir",
    "encode_entry",
    "environment_key",
    "function_from_json",
    "function_to_json",
    "load_object",
    "resolve_cache",
    "shared_cache",
]

_write_atomically = write_atomically  # the name older tests and tools use
