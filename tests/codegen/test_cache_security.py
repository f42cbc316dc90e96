"""The compile cache against a hostile or careless file system (issue 14).

A planted, copied, forged, oversized or non-regular entry, or a directory that another
user owns or may write, must never be loaded: each is a miss (with one `CacheWarning`
where something is refused), the kernel is compiled again and its results equal NumPy's.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.codegen import cache_files
from compiler.cpu import cache as C

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
ADD = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) + B(k, n)\n}\n"


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(
        np.float32
    )


def _check(k: compiler.kernel.Kernel, src: str = MATMUL) -> None:
    a, b = _arrays()
    want = a @ b if src == MATMUL else (a[:, :, None] + b[None, :, :]).sum(axis=1)
    np.testing.assert_allclose(k(a, b)[0], want, rtol=1e-4, atol=1e-4)


def _define(directory: Path, src: str = MATMUL) -> compiler.kernel.Kernel:
    """A kernel of a fresh cache on `directory`, run once (its first call compiles and
    writes the entry: `runtime.native`)."""
    k = compiler.define(src, target="llvm", cache=C.CompileCache(directory))
    _check(k, src)
    return k


def _entry(directory: Path) -> Path:
    (path,) = sorted(directory.glob("*.tcc"))
    return path


def _key(src: str) -> str:
    import compiler.runtime.native as native
    from compiler.options import Options

    return C.cache_key(native.program_key(compiler.define(src, target="interp").ranged, Options()))


def _no_warning_define(directory: Path, src: str = MATMUL) -> compiler.kernel.Kernel:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return _define(directory, src)


def _warned_define(directory: Path, match: str, src: str = MATMUL) -> compiler.kernel.Kernel:
    with pytest.warns(C.CacheWarning, match=match) as record:
        k = _define(directory, src)
    assert len(record) == 1
    return k


# ------------------------------------------------------------- what is created


def test_directory_secret_and_entries_are_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask must not widen anything
    try:
        _define(tmp_path / "a" / "tcc")
    finally:
        os.umask(old)
    directory = tmp_path / "a" / "tcc"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / ".secret").stat().st_mode) == 0o600
    assert len((directory / ".secret").read_bytes()) == cache_files.SECRET_BYTES
    assert stat.S_IMODE(_entry(directory).stat().st_mode) == 0o600


# ------------------------------------------------------------- entries bound to keys


def test_an_entry_copied_under_another_key_is_not_loaded(tmp_path: Path) -> None:
    _define(tmp_path, MATMUL)
    original = _entry(tmp_path)
    planted = tmp_path / f"{_key(ADD)}.tcc"
    # Header rewritten to name the other key: the HMAC covers the key, so still a miss.
    data = original.read_bytes().replace(original.stem.encode(), _key(ADD).encode(), 1)
    assert data != original.read_bytes()
    planted.write_bytes(data)
    planted.chmod(0o600)
    k = _no_warning_define(tmp_path, ADD)
    _check(k, ADD)
    secret = (tmp_path / ".secret").read_bytes()
    assert C.decode_entry(planted.read_bytes(), _key(ADD), secret).object_code  # rebuilt


def test_an_entry_forged_without_the_secret_is_not_loaded(tmp_path: Path) -> None:
    _define(tmp_path)
    path = _entry(tmp_path)
    secret = (tmp_path / ".secret").read_bytes()
    other = _define(tmp_path / "other", ADD)  # real code of another kernel
    stolen = C.decode_entry(_entry(tmp_path / "other").read_bytes(), _key(ADD),
                            (tmp_path / "other" / ".secret").read_bytes())  # fmt: skip
    assert other is not None
    path.write_bytes(C.encode_entry(stolen, path.stem, b"\0" * 32))  # a guessed secret
    with pytest.raises(C.CacheFormatError, match="authentication"):
        C.decode_entry(path.read_bytes(), path.stem, secret)
    _check(_no_warning_define(tmp_path))


def test_a_truncated_secret_refuses_the_directory(tmp_path: Path) -> None:
    _define(tmp_path)
    (tmp_path / ".secret").write_bytes(b"short")
    _check(_warned_define(tmp_path, "secret has 5 bytes"))


def test_a_readable_secret_refuses_the_directory(tmp_path: Path) -> None:
    _define(tmp_path)
    os.chmod(tmp_path / ".secret", 0o644)
    _check(_warned_define(tmp_path, "readable by others"))


# ------------------------------------------------------------- non-regular entries


def _define_with_deadline(directory: Path, seconds: float = 120.0) -> compiler.kernel.Kernel:
    result: list[object] = []

    def run() -> None:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            result.append(_define(directory))
            result.append([str(w.message) for w in record])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "define() hung on the cache entry"
    k, messages = result
    assert len(messages) == 1 and "refusing entry" in messages[0], messages  # type: ignore[arg-type]
    return k  # type: ignore[return-value]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_entry_does_not_hang(tmp_path: Path) -> None:
    _define(tmp_path, ADD)  # the directory and its secret exist: entries are read
    path = tmp_path / f"{_key(MATMUL)}.tcc"
    os.mkfifo(path, 0o600)
    _check(_define_with_deadline(tmp_path))
    assert path.is_file()  # replaced by a real entry


def test_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    _define(tmp_path, ADD)  # the directory and its secret exist: entries are read
    path = tmp_path / f"{_key(MATMUL)}.tcc"
    path.symlink_to("/dev/zero")
    _check(_define_with_deadline(tmp_path))
    assert path.is_file() and not path.is_symlink()


def test_a_symlink_to_a_valid_entry_is_refused(tmp_path: Path) -> None:
    _define(tmp_path)
    real = _entry(tmp_path)
    moved = tmp_path / "elsewhere"
    real.rename(moved)
    real.symlink_to(moved)
    _check(_define_with_deadline(tmp_path))


def test_an_oversized_entry_is_not_read(tmp_path: Path) -> None:
    _define(tmp_path, ADD)  # the directory and its secret exist: entries are read
    path = tmp_path / f"{_key(MATMUL)}.tcc"
    with open(path, "wb") as f:
        f.truncate(C.MAX_ENTRY_BYTES + 1)  # sparse: no disk used
    path.chmod(0o600)
    _check(_define_with_deadline(tmp_path))


# ------------------------------------------------------------- owners and modes


def test_a_world_writable_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "tcc"
    _define(directory)
    directory.chmod(0o777)
    k = _warned_define(directory, "writable by group or others")
    _check(k)
    entries = len(list(directory.glob("*.tcc")))
    with pytest.warns(C.CacheWarning):  # a new cache (a new process) warns again
        _define(directory, ADD)
    assert len(list(directory.glob("*.tcc"))) == entries  # nothing written there


def test_a_directory_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _define(tmp_path)
    monkeypatch.setattr(cache_files, "current_uid", lambda: os.getuid() + 1)
    _check(_warned_define(tmp_path, "owned by uid"))


def test_one_warning_per_cache(tmp_path: Path) -> None:
    directory = tmp_path / "tcc"
    _define(directory)
    directory.chmod(0o777)
    cache = C.CompileCache(directory)
    with pytest.warns(C.CacheWarning) as record:
        compiler.define(MATMUL, target="llvm", cache=cache)
        compiler.define(ADD, target="llvm", cache=cache)
    assert len(record) == 1 and not cache.on_disk


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="chown needs root")
def test_an_entry_of_another_user_is_refused(tmp_path: Path) -> None:
    _define(tmp_path)
    os.chown(_entry(tmp_path), 65534, 65534)
    _check(_warned_define(tmp_path, "owned by uid 65534"))
    assert _entry(tmp_path).stat().st_uid == os.getuid()  # rebuilt as this user's


def test_a_group_writable_entry_is_refused(tmp_path: Path) -> None:
    _define(tmp_path)
    _entry(tmp_path).chmod(0o664)
    _check(_warned_define(tmp_path, "writable by group"))


# ------------------------------------------------------------- temporaries


def test_temporaries_are_counted_and_stale_ones_removed(tmp_path: Path) -> None:
    _define(tmp_path)
    stale, fresh = tmp_path / ".aaaa.x1.tmp", tmp_path / ".bbbb.x2.tmp"
    for f in (stale, fresh):
        f.write_bytes(b"partial")
    old = time.time() - C.STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    info = C.CompileCache(tmp_path).info()
    assert (info.entries, info.temporaries) == (1, 2)
    _define(tmp_path, ADD)  # a new process's first write sweeps the stale ones
    assert not stale.exists() and fresh.exists()
    assert C.CompileCache(tmp_path).info().temporaries == 1
    assert C.CompileCache(tmp_path).clear() == 3 and not fresh.exists()


def test_cli_cache_info_counts_temporaries(tmp_path: Path) -> None:
    import subprocess
    import sys

    directory = tmp_path / "tcc"
    _define(directory)
    (directory / ".abcd.x.tmp").write_bytes(b"partial")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "compiler", "cache", "info"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "entries: 1" in out.stdout and "temporaries: 1" in out.stdout
