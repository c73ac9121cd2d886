"""The run directory of a training run: one run writes it at a time (:class:`RunDirLock`),
and a path that cannot hold a run is named before any work (:func:`check_run_dir_path`)."""

from __future__ import annotations

import errno
import logging
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

try:  # advisory locks: POSIX only (elsewhere runs are not serialised, as in nmtkit.io)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


class RunDirBusy(ValueError):
    """Another training process holds the run directory (:class:`RunDirLock`)."""


@dataclass
class _HeldRunLock:
    """This process's lock on one run directory, shared by its :class:`RunDirLock` holders."""

    path: Path  # RUN/.lock
    file: Any  # the open lock file (None where flock is unavailable)
    created: list[Path]  # directories made to hold the lock, outermost first
    holders: int = 1


class RunDirLock:
    """An exclusive advisory lock (``flock``) on ``RUN/.lock`` for the whole of a training run.

    Two ``nmtkit train`` processes writing one run directory would interleave their
    checkpoints and metrics (``last.pt`` of one, ``best.pt`` of the other); the second is
    refused at once instead (:class:`RunDirBusy`, naming the directory and the holder's
    process id), before it reads any data or touches the first run's files. The lock is
    taken before the data so that the refusal comes first; if it had to create the run
    directory and the set-up then fails, that directory goes again (a data error leaves no
    run directory behind).

    - Under torchrun only rank 0 locks: it alone writes the run directory, and one lock per
      run (not per node) is what keeps two jobs apart on a shared file system.
    - The lock belongs to the process: several :class:`Trainer` of one process on one
      directory share it (a library caller runs them in turn, e.g. a run then its resume),
      and it ends with its last holder: :meth:`release`, or when a holder is garbage
      collected (a trainer set up but never run), or at exit. A process killed hard loses
      its lock with it (the kernel drops it); the stale file is reused.
    - The file is removed when released, so it is never mistaken for part of a run (and is
      not one of :meth:`Trainer._run_files`). A process that locked a file its last holder
      had just unlinked notices (another inode at the path) and tries again.
    - Where ``flock`` is unavailable (not POSIX, or a file system without locks), runs are
      not serialised (a warning on such a file system)."""

    NAME = ".lock"
    _held: ClassVar[dict[Path, _HeldRunLock]] = {}  # by the run directory's real path

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        created = [d for d in (run_dir, *run_dir.parents) if not d.exists()][::-1]
        run_dir.mkdir(parents=True, exist_ok=True)
        key = Path(os.path.realpath(run_dir))
        held = self._held.get(key)
        if held is not None:
            held.holders += 1
        else:
            held = self._held[key] = _HeldRunLock(run_dir / self.NAME, None, created)
            try:
                held.file = self._lock(run_dir, held.path)
            except BaseException:
                del self._held[key]
                self._remove(held, created_too=True)
                raise
        self._key = key
        # A holder dropped without release() (never run) lets go of its share with it.
        self._finalizer = weakref.finalize(self, RunDirLock._drop, key, False)

    @staticmethod
    def _lock(run_dir: Path, path: Path) -> Any:
        """The open lock file, locked by this process and still the one at ``path``."""
        if fcntl is None:
            return None
        while True:
            f = open(path, "a+b")  # noqa: SIM115 (held open until release)
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                pid = f.read(32).decode("ascii", "replace").strip()
                f.close()
                holder = f"process {pid}, " if pid else ""
                raise RunDirBusy(f"{run_dir}: another training run holds this run directory "
                                 f"({holder}lock file {path}); wait for it to end, or choose "
                                 "another --run-dir") from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    f.close()
                    raise
                log.warning("%s: the file system refuses locks (%s): a second training run "
                            "started on this run directory would not be refused", run_dir, e)
                return f
            try:
                same = os.path.samestat(os.fstat(f.fileno()), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                f.seek(0)
                f.truncate()
                f.write(f"{os.getpid()}\n".encode())
                f.flush()
                return f
            f.close()  # its last holder unlinked it meanwhile: lock the new one

    def release(self, failed_set_up: bool = False) -> None:
        """This holder is done (again: nothing). The last holder removes the lock file, and
        with ``failed_set_up`` the directories that were made to hold it, where empty."""
        if self._finalizer.detach() is not None:
            RunDirLock._drop(self._key, failed_set_up)

    @classmethod
    def _drop(cls, key: Path, created_too: bool) -> None:
        held = cls._held.get(key)
        if held is None:
            return
        held.holders -= 1
        if held.holders == 0:
            del cls._held[key]
            cls._remove(held, created_too)

    @staticmethod
    def _remove(held: _HeldRunLock, created_too: bool) -> None:
        """Unlink the lock file (ours while locked), unlock, and remove the empty directories
        made for it when ``created_too``."""
        if held.file is not None:
            held.path.unlink(missing_ok=True)
            held.file.close()
        if created_too:
            for d in reversed(held.created):
                try:
                    d.rmdir()
                except OSError:  # not empty (or not ours to remove): kept
                    break


def check_run_dir_path(run_dir: Path) -> None:
    """A run directory path that cannot hold a run is named before anything is read or
    written: a file, a dangling symbolic link or a symbolic link loop (where ``mkdir`` would
    only say "File exists", after the data work)."""
    if run_dir.is_symlink() and not run_dir.exists():
        try:
            os.stat(run_dir)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ValueError(f"{run_dir}: run directory is a symbolic link loop") from None
        raise ValueError(f"{run_dir}: run directory is a dangling symbolic link (to "
                         f"{os.readlink(run_dir)}, which does not exist)")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"{run_dir}: run directory is a file")
