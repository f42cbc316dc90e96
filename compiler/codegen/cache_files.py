"""Files of the compile cache that only this user can have written.

    make_private_directory(path)                 # mode 0700, parents as usual
    check_trusted(os.stat(path), "directory", directory=True)   # or raises Untrusted
    data = read_own_file(path, limit)            # O_NOFOLLOW, regular, ours, <= limit
    secret = load_secret(path, create=True)      # 32 random bytes, mode 0600
    write_atomically(path, data)                 # temporary (0600) + fsync + os.replace

`Untrusted` is raised for a file or directory another user owns, that group or others
may write, or that is not a regular file (directory): a symlink, a FIFO, a device.
Opening with O_NONBLOCK means a FIFO is refused at once rather than waited on, and a
read never goes past `limit` bytes (`/dev/zero` behind a symlink is refused anyway).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

SECRET_BYTES = 32


class CacheFormatError(ValueError):
    """A cache entry that does not decode: treated as a miss and rebuilt."""


class Untrusted(Exception):
    """A cache file or directory that another user owns or may write, or that is not
    a regular file (directory)."""


def current_uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def check_trusted(st: os.stat_result, what: str, *, directory: bool = False) -> None:
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        raise Untrusted(f"the {what} is not a {'directory' if directory else 'regular file'}")
    uid = current_uid()
    if uid is not None and st.st_uid != uid:
        raise Untrusted(f"the {what} is owned by uid {st.st_uid}, not by this user ({uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Untrusted(f"the {what} is writable by group or others (mode {st.st_mode & 0o777:o})")


def make_private_directory(directory: Path) -> None:
    """Create `directory` (parents as usual) with mode 0700; an existing one is kept
    as it is (and checked by the caller)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask; never widened


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def read_own_file(path: Path, limit: int, what: str = "entry") -> bytes:
    """The bytes of `path`, a regular file of this user that others cannot write, of at
    most `limit` bytes; `Untrusted` otherwise (a symlink, FIFO or device included)."""
    try:
        fd = os.open(path, _OPEN_FLAGS | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if os.path.islink(path):  # O_NOFOLLOW's ELOOP
            raise Untrusted(f"the {what} is a symbolic link") from None
        raise err
    try:
        st = os.fstat(fd)
        check_trusted(st, what)
        if st.st_size > limit:
            raise Untrusted(f"the {what} has {st.st_size} bytes, more than {limit}")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise Untrusted(f"the {what} grew beyond {limit} bytes while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_secret(path: Path, create: bool) -> bytes | None:
    """The per-user HMAC secret (created atomically with `create`); None if absent."""
    try:
        secret = read_own_file(path, SECRET_BYTES, "secret")
    except FileNotFoundError:
        if not create:
            return None
        publish_secret(path)
        secret = read_own_file(path, SECRET_BYTES, "secret")
    mode = os.stat(path, follow_symlinks=False).st_mode
    if mode & 0o077:
        raise Untrusted(f"the secret {path.name} is readable by others (mode {mode & 0o777:o})")
    if len(secret) != SECRET_BYTES:
        raise Untrusted(f"the secret {path.name} has {len(secret)} bytes, not {SECRET_BYTES}")
    return secret


def publish_secret(path: Path) -> None:
    """Write a fresh secret to a temporary (0600) and link it in place: concurrent
    creators agree on the first one linked, and nobody reads a partial file."""
    fd, tmp = tempfile.mkstemp(prefix=".secret.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(SECRET_BYTES))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # no hard links here: create it exclusively instead
            _create_exclusively(path, os.urandom(SECRET_BYTES))
    finally:
        os.unlink(tmp)


def _create_exclusively(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


__all__ = [
    "SECRET_BYTES",
    "CacheFormatError",
    "Untrusted",
    "check_trusted",
    "current_uid",
    "load_secret",
    "make_private_directory",
    "read_own_file",
    "write_atomically",
]
