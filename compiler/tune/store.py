"""The tuned-options cache: the winner of each tuning run, in one JSON file.

    store = OptionsStore.resolve(True)          # <compile cache dir>/tuned-options.json
    store = OptionsStore.resolve(tmp_path)      # <dir>/tuned-options.json (or a *.json path)
    key, components = tune_key(text, name, shapes, dtypes, "llvm")
    store.put(key, components, options, time_ms=.., default_ms=.., candidates=..)
    store.get(key, Options)                     # the Options, or None
    store.entries()                             # every entry, for `tcc tune --show`

The file sits next to the compile cache's entries (`compiler.cpu.cache`), so
`tcc cache clear` leaves it (it removes only compiled code). Its form:

    {"schema": 1, "entries": {"<key>": {"components": {...}, "options": {...},
                                        "time_ms": .., "default_ms": .., ...}}}

The key is the SHA-256 of the JSON of its components: the def's canonical text (the
printer's), its name, the input shapes and dtypes, the target, the host CPU's name and
features (llvmlite) and tcc's version. Writes read the file, add the entry and replace
it atomically (a temporary file in the same directory, fsync, `os.replace`), under an
advisory lock (`fcntl.flock` on `<file>.lock`) so that two tuning processes do not
lose each other's entries. A file that is not valid JSON of this form is ignored with
one `TuneCacheWarning` (per file and process) and rebuilt by the next write; an entry
whose options no longer fit `Options` (a field renamed) is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from compiler.diagnostics import OptionsError
from compiler.tune.space import options_from_json, options_to_json

SCHEMA = 1
FILENAME = "tuned-options.json"
_WARNED: set[Path] = set()
_LOCK = threading.Lock()


class TuneCacheWarning(UserWarning):
    """The tuned-options file is damaged (ignored and rebuilt) or cannot be written."""


def canonical_text(text: str, name: str | None) -> str:
    """The printer's text of def `name` of `text`: formatting and comments do not count."""
    from compiler.frontend.parser import parse
    from compiler.frontend.printer import print_def

    return print_def(parse(text).get(name))


def tune_key(
    text: str,
    name: str | None,
    shapes: Sequence[Sequence[int]],
    dtypes: Sequence[str],
    target: str,
) -> tuple[str, dict[str, Any]]:
    """The entry key of a def tuned for these inputs here, and its components."""
    import llvmlite.binding as llvm

    from compiler import __version__

    components = {
        "def": canonical_text(text, name),
        "shapes": [list(map(int, s)) for s in shapes],
        "dtypes": list(dtypes),
        "target": target,
        "cpu": llvm.get_host_cpu_name(),
        "cpu_features": llvm.get_host_cpu_features().flatten(),
        "tcc": __version__,
    }
    digest = hashlib.sha256(json.dumps(components, sort_keys=True).encode()).hexdigest()
    return digest, components


class OptionsStore:
    """The tuned-options file (None: no file, nothing is kept)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)

    def __repr__(self) -> str:
        return f"OptionsStore({str(self.path) if self.path else None!r})"

    @staticmethod
    def resolve(cache: object) -> OptionsStore:
        """`cache=` of autotune/define: True the default compile cache directory, False
        or None no file, a directory (or a compile cache) its file, a *.json path itself."""
        if isinstance(cache, OptionsStore):
            return cache
        if cache is False or cache is None:
            return OptionsStore(None)
        if cache is True:
            from compiler.cpu.cache import default_cache_dir

            try:
                return OptionsStore(default_cache_dir() / FILENAME)
            except RuntimeError:  # no home directory
                return OptionsStore(None)
        directory = getattr(cache, "directory", cache)  # a CompileCache
        if directory is None:
            return OptionsStore.resolve(True)
        if isinstance(directory, (str, os.PathLike)):
            path = Path(directory).expanduser()
            return OptionsStore(path if path.suffix == ".json" else path / FILENAME)
        raise OptionsError(
            f"cache= must be True, False, a directory or a .json path, got {type(cache).__name__}"
        )

    # -------------------------------------------------------------- reading

    def _load(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            self._warn(f"cannot read it ({type(err).__name__}: {err})")
            return {}
        entries = data.get("entries") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or data.get("schema") != SCHEMA
            or not isinstance(entries, dict)
        ):
            self._warn(f"not a schema-{SCHEMA} tuned-options file")
            return {}
        return {k: v for k, v in entries.items() if isinstance(v, dict)}

    def _warn(self, why: str) -> None:
        assert self.path is not None
        with _LOCK:
            if self.path in _WARNED:
                return
            _WARNED.add(self.path)
        warnings.warn(
            f"tcc: ignoring the tuned-options cache {self.path}: {why}; it is rebuilt "
            "by the next tuning run",
            TuneCacheWarning,
            stacklevel=3,
        )

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every entry by key (as stored)."""
        return self._load()

    def get(self, key: str, options_type: type) -> Any | None:
        """The tuned options for `key`, or None (absent, stale or damaged)."""
        entry = self._load().get(key)
        if entry is None:
            return None
        try:
            return options_from_json(options_type, entry["options"])
        except (KeyError, TypeError, ValueError, OptionsError):  # stale: no longer fits
            return None

    # -------------------------------------------------------------- writing

    def put(self, key: str, components: Mapping[str, Any], options: Any, **facts: Any) -> None:
        """Add (or replace) one entry, atomically; an unwritable file gives a warning."""
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked():
                entries = self._load()
                entries[key] = {
                    "components": dict(components),
                    "options": options_to_json(options),
                    "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    **facts,
                }
                text = json.dumps({"schema": SCHEMA, "entries": entries}, indent=1)
                _replace(self.path, text)
        except OSError as err:
            warnings.warn(
                f"tcc: cannot write the tuned-options cache {self.path}: {err}",
                TuneCacheWarning,
                stacklevel=2,
            )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        try:
            import fcntl
        except ImportError:  # not POSIX: atomic replace only
            yield
            return
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _replace(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["FILENAME", "OptionsStore", "TuneCacheWarning", "canonical_text", "tune_key"]
