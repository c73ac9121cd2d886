"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

try:  # advisory locks: POSIX only; elsewhere builds simply are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


def _is_special(path: Path) -> bool:
    """An existing path that is not a regular file: a device (``/dev/null``, ``/dev/full``, a
    terminal), a FIFO, a socket, or ``/dev/stdout`` (a link to whatever fd 1 is)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _new_file_mode(existing: Path) -> int:
    """Permissions for the written file: an existing file's own, or what ``open()`` gives a
    new one (0o666 less the umask), never ``mkstemp``'s private 0o600."""
    try:
        return stat.S_IMODE(os.stat(existing).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # the only way to read the umask is to set it; put it back at once
        try:
            return 0o666 & ~umask
        finally:
            os.umask(umask)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is untouched. The rename
    applies to regular files and new paths only:

    - a symbolic link is followed, so its target is replaced and the link stays a link;
    - a device, FIFO or socket (``-o /dev/stdout``, ``/dev/null``, a named pipe) is written
      straight through, never replaced (as root a rename would turn ``/dev/null`` into a
      regular file); a write error there (``/dev/full``) is raised as it is. Such a target
      is not fsynced (a pipe or terminal has nothing to sync) and not atomic;
    - the file written gets the permissions described in ``_new_file_mode``;
    - missing parent directories are created; a parent that is a file raises ``OSError``.
    """
    if _is_special(Path(path)):  # checked before resolving: /dev/stdout -> pipe:[...]
        with open(path, mode, encoding=encoding) as f:
            yield f
        return
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    perms = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), perms)  # before fsync, so the mode is durable with the data
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by the rules of ``atomic_open``."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` by the rules of ``atomic_open``."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def atomic_save(path: str | Path, writer: Callable[[IO], None]) -> None:
    """Call ``writer(fileobj)`` on a temporary file, then rename it into place (or write
    straight through to a device or FIFO, as ``atomic_open`` does)."""
    with atomic_open(path, "wb") as f:
        writer(f)


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if needed) while in the block:
    processes building the same thing take turns, and each finds the other's result."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
