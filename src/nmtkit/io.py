"""Atomic writes of files and directories: a reader sees the old one or the new one, never
half of one; and the advisory lock that makes processes building the same thing take turns."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile

try:  # advisory locks: POSIX only; elsewhere builds simply are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .errors import UserError


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


def written_path(path: str | Path) -> Path:
    """The file that :func:`atomic_open` writes for ``path``, which is what an output must
    be compared by with the inputs (:func:`refuse_overwriting_inputs`): a device, FIFO or
    socket is written through, so ``path`` itself; anything else its real path
    (``os.path.realpath``): links followed (a link's target is replaced), and a ``..`` after a
    directory that does not exist folded away with it (``nosuch/../x`` is ``./x``: the writer
    resolves first, then makes the missing parents, so it never fails there as ``open``
    would). An ``OSError`` (``file/../x``: not a directory; a link loop) is raised as it is."""
    if _is_special(Path(path)):  # checked before resolving: /dev/stdout -> pipe:[...]
        return Path(path)
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
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
    target = written_path(path)
    if _is_special(target):  # written_path keeps it as given: /dev/stdout, not pipe:[...]
        try:
            with open(path, mode, encoding=encoding) as f:
                yield f
        except OSError as e:
            _name_the_file(e, path)
            raise
        return
    path = target
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    perms = _new_file_mode(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # (no inode left) the file asked for, not the temporary name
        e.filename = str(path)
        raise
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), perms)  # before fsync, so the mode is durable with the data
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            _name_the_file(e, path)
        raise


def _name_the_file(e: OSError, path: str | Path) -> None:
    """A write error without a file name (ENOSPC, EIO from ``write``) gets ``path``, the file
    the caller asked for, so that the one-line error says where (``/dev/full: No space left
    on device``)."""
    if e.filename is None:
        e.filename = str(path)


@contextlib.contextmanager
def errors_naming(path: str | Path) -> Iterator[None]:
    """An ``OSError`` raised in the block without a file name (a full disk in a library's own
    ``write``, e.g. CTranslate2's ``model.bin``) is raised with ``path`` as its file name."""
    try:
        yield
    except OSError as e:
        _name_the_file(e, path)
        raise


def _os_error_behind(e: BaseException) -> OSError | None:
    """The ``OSError`` a library turned into another exception, if any: ``torch.save`` meets a
    full disk as an ``OSError`` from ``write``, then its zip writer's clean-up raises
    ``RuntimeError: [enforce fail at inline_container.cc] unexpected pos ...`` with the
    ``OSError`` as its context."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def refuse_overwriting_inputs(outputs: Iterable[str | Path | None],
                              inputs: Iterable[str | Path | None], flag: str,
                              whole_directory: bool = False) -> None:
    """Raise ``ValueError`` if an output is one of the inputs: the finished output would be
    renamed over the input it was read from (``translate -i X -o X``, ``average --out X X
    Y``). Every command that writes calls this before any work, with every path it reads.

    Each output is compared as the writer will write it (:func:`written_path`), not as typed:
    ``-o nosuch/../X`` and ``-o LINK_TO_X`` are ``X``. An input is the same file when its
    real path is that one, or when both exist and are one file (device and inode: a hard
    link). With ``whole_directory`` the output is a directory that is replaced whole
    (``export --out DIR --force``): an input anywhere inside it is refused too. ``flag``
    names the option to change. ``None`` entries (an option not given) and ``-`` are
    skipped: stdin is compared by what it is, whether or not the command reads it (when it
    is a regular file, ``-o in.de < in.de``, ``-o /dev/stdin``; see ``_refuse_stdin``); a
    device or pipe (``-o /dev/stdout``) is written through, never replaced, so it is no
    concern."""
    ins = [i for i in inputs if i is not None and str(i) != "-"]
    for out in outputs:
        if out is None:
            continue
        try:
            target = written_path(out)
        except OSError:  # (file/x: not a directory) the writer fails there too, and says so
            continue
        if _is_special(target):
            continue
        _refuse_stdin(target, out, flag, whole_directory)
        for i in ins:
            real = Path(os.path.realpath(i))
            if whole_directory and target in real.parents:
                raise UserError(f"{out} holds an input ({i}): replacing the directory would "
                                 f"delete what is read; choose another {flag}")
            if real == target:
                how = "" if str(out) == str(i) else f"; {out} resolves to {target}"
            elif target.is_file() and real.is_file() and os.path.samefile(target, real):
                how = "; the same file under another name, a hard link"
            else:
                continue
            raise UserError(f"{out} is also an input ({i}{how}): writing it would replace "
                             f"what is read; choose another {flag}")


def _stdin_file() -> tuple[os.stat_result, str] | None:
    """(its status, its name) when stdin is a regular file (``< in.de``), which is then an
    input like any other: no output may be that file; ``None`` for a terminal, a pipe,
    ``/dev/null`` or a closed stdin. The name is the one ``/proc/self/fd/0`` gives, where
    there is one."""
    try:
        st = os.fstat(0)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        name = os.readlink("/proc/self/fd/0")
    except OSError:
        name = "<stdin>"
    return st, name


def _refuse_stdin(target: Path, out: str | Path, flag: str, whole_directory: bool) -> None:
    """The part of :func:`refuse_overwriting_inputs` that compares an output with stdin: the
    same file (device and inode: ``-o in.de < in.de``, ``-o /dev/stdin``, ``-o
    /proc/self/fd/0``, a hard link), or with ``whole_directory`` a directory holding it."""
    found = _stdin_file()
    if found is None:
        return
    st, name = found
    try:
        at = os.stat(target)
    except OSError:
        at = None
    if at is not None and (at.st_dev, at.st_ino) == (st.st_dev, st.st_ino):
        raise UserError(f"{out} is also an input (stdin reads it: {name}): writing it would "
                         f"replace what is read; choose another {flag}")
    if whole_directory and name.startswith("/") and target in Path(name).parents:
        raise UserError(f"{out} holds an input (stdin reads {name}): replacing the directory "
                         f"would delete what is read; choose another {flag}")


def check_file_prefix(prefix: str | Path, flag: str) -> None:
    """A prefix of file names (``PREFIX.de``, ``PREFIX.en``) must name files, not a directory:
    ``-o out/`` would write the hidden files ``out/.de`` and ``out/.en``; nor a device, pipe or
    socket, nor a link: ``-o /dev/full`` (or ``-o /dev/stdout``, a link, whatever fd 1 is)
    would write regular files ``/dev/full.de`` and ``/dev/full.en`` into ``/dev`` (as root),
    where the writer meant the device."""
    text = str(prefix)
    if not text or text.endswith(("/", os.sep)) or Path(text).is_dir():
        raise UserError(f"{flag} {text!r}: a prefix of file names (PREFIX.<lang> is written), "
                         "not a directory: e.g. out/synthetic")
    if Path(text).is_symlink() or _is_special(Path(text)):
        raise UserError(f"{flag} {text!r}: a prefix of file names (PREFIX.<lang> is written "
                         "beside it), not a device, pipe, socket or link: e.g. out/synthetic")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by the rules of ``atomic_open``."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` by the rules of ``atomic_open``."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


class OutputError(OSError):
    """A finished result that could not be written where asked; the message says where it
    was kept instead (:func:`write_or_keep`)."""


def write_or_keep(path: str | Path, text: str, what: str) -> None:
    """:func:`atomic_write_text` of a finished result (``what``: "translations",
    "hypotheses" ...); if that fails (a full disk, a mistyped or unwritable path), ``text`` is
    kept in a temporary file and :class:`OutputError` names both: hours of translation are
    never lost to the last step."""
    try:
        atomic_write_text(path, text)
    except OSError as e:
        fd, kept = tempfile.mkstemp(prefix="nmtkit-", suffix=".txt")
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        raise OutputError(f"{path}: cannot write the {what} ({e.strerror or e}); they were "
                          f"kept in {kept}") from None


def write_all_or_keep(files: Sequence[tuple[str | Path, str, str]]) -> None:
    """Write files that belong together, ``(path, text, what)`` each (a back-translated pair:
    line i of one answers line i of the other): all are replaced, or none.

    Each text goes to a temporary file beside its target (its real path,
    :func:`written_path`) and is flushed to disk; then each existing target gets a backup
    (a hard link, else a copy) and the temporary files are renamed over the targets one by
    one, each rename atomic as in :func:`atomic_open`. If a write, a backup or a rename
    fails, the renames done are undone from the backups, every temporary file and backup is
    removed, and :class:`OutputError` names the file that failed and why, and where each
    text was kept instead (a temporary file of the system's, as :func:`write_or_keep` does
    for one file)."""
    staged: list[tuple[Path, str]] = []  # (target, its temporary file)
    backups: list[str | None] = []
    current = 0  # the file being written, backed up or renamed
    try:
        for k, (path, text, _) in enumerate(files):
            current = k
            target = written_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(target))
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            staged.append((target, tmp))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fchmod(f.fileno(), _new_file_mode(target))
                os.fsync(f.fileno())
        for k, (target, _) in enumerate(staged):
            current = k
            backups.append(_backup(target))
        done = 0
        try:
            for k, (target, tmp) in enumerate(staged):
                current = k
                os.replace(tmp, target)
                done += 1
        except BaseException:
            for (target, _), backup in zip(staged[:done], backups[:done], strict=True):
                if backup is None:
                    target.unlink(missing_ok=True)
                else:
                    os.replace(backup, target)
            raise
        for parent in dict.fromkeys(target.parent for target, _ in staged):
            _fsync_dir(parent)
    except OSError as e:
        kept = []
        for _, text, what in files:
            fd, at = tempfile.mkstemp(prefix="nmtkit-", suffix=".txt")
            with open(fd, "w", encoding="utf-8") as f:
                f.write(text)
            kept.append(f"the {what} were kept in {at}")
        path, _, what = files[current]
        raise OutputError(f"{path}: cannot write the {what} ({e.strerror or e}); none of the "
                          f"{len(files)} files was replaced: {', '.join(kept)}") from None
    finally:
        for _, tmp in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        for backup in backups:
            if backup is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(backup)


def _backup(target: Path) -> str | None:
    """A second name beside ``target`` for what it holds now (``None``: nothing there), to
    put back if a later step fails: a hard link, or a copy where links are not supported."""
    if not target.exists():
        return None
    fd, backup = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
    os.close(fd)
    os.unlink(backup)
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup)
    return backup


def atomic_save(path: str | Path, writer: Callable[[IO[Any]], None]) -> None:
    """Call ``writer(fileobj)`` on a temporary file, then rename it into place (or write
    straight through to a device or FIFO, as ``atomic_open`` does). A write error that the
    writer wrapped in another exception (``torch.save``'s ``RuntimeError`` on a full disk) is
    raised as the ``OSError`` it was, naming ``path``."""
    with atomic_open(path, "wb") as f:
        try:
            writer(f)
        except Exception as e:
            cause = _os_error_behind(e)
            if cause is None or cause is e:
                raise
            raise cause from None


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


# ---------------------------------------------------------------------------
# Directories


def _new_dir_mode(existing: Path) -> int:
    """Permissions for a directory written by :func:`atomic_dir`: an existing directory's own,
    or what ``mkdir`` gives a new one (0o777 less the umask), never ``mkdtemp``'s 0o700."""
    try:
        st = os.stat(existing)
        if stat.S_ISDIR(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except FileNotFoundError:
        pass
    umask = os.umask(0)
    try:
        return 0o777 & ~umask
    finally:
        os.umask(umask)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """Flush every regular file under ``root`` and every directory (``root`` last) to disk.
    Symbolic links are neither followed nor synced."""
    for here, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(here, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(Path(here))


def _occupied(path: Path) -> bool:
    """Something is at ``path`` that a rename of a directory would not silently replace: a
    file, a link, or a directory with entries (an empty directory is renamed over)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        return True
    return path.is_dir() and any(path.iterdir())


def _exists_error(path: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "already exists and is not an empty directory", str(path))


def _rename_dir_into_place(tmp: Path, path: Path, replace: bool) -> None:
    """Rename the finished ``tmp`` to ``path``. Onto nothing or an empty directory this is one
    rename; the kernel refuses a non-empty one, which is then swapped out when ``replace``."""
    try:
        os.replace(tmp, path)
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
        if not replace:
            raise _exists_error(path) from None
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
    os.replace(path, old / path.name)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old / path.name, path)  # put the previous contents back
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, replace: bool = False) -> Iterator[Path]:
    """Build a directory in a temporary sibling; on success put it at ``path`` in one rename.

    Yields an empty directory ``.<name>.<random>.tmp`` beside ``path``; write into it. On
    normal exit of the block every file and directory in it is fsynced, it gets the mode an
    existing ``path`` has (else the umask's), and it is renamed to ``path``, whose parent is
    then fsynced. On an exception in the block (or in the rename) the temporary directory is
    removed and ``path`` is left as it was.

    - Nothing at ``path``, or an empty directory: the rename puts the new one there.
    - Anything else (a non-empty directory, a file): with ``replace=False`` a
      :class:`FileExistsError` naming ``path`` is raised, on entry (before any work) and again
      if it appeared meanwhile (the rename itself refuses, so a racing writer's directory is
      never clobbered). With ``replace=True`` the old one is moved aside to a sibling
      ``.<name>.<random>.old/`` while the new one is renamed in, put back if that rename fails,
      and deleted once the new one is in place. Between the two renames ``path`` is briefly
      absent; a process killed there leaves the old contents in that ``.old`` sibling.

    Temporary siblings left by a process killed in the block are not removed here (another
    process may be writing one): callers that serialise their builders with :func:`file_lock`
    remove ``.<name>.*.tmp`` under the lock.
    """
    path = Path(os.path.realpath(Path(path).parent)) / Path(path).name  # as written_path
    path.parent.mkdir(parents=True, exist_ok=True)
    if not replace and _occupied(path):
        raise _exists_error(path)
    mode = _new_dir_mode(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        os.chmod(tmp, mode)
        _rename_dir_into_place(tmp, path, replace)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_files(directory: str | Path, tag: str) -> Iterator[Path]:
    """Write new versions of some files of a shared ``directory`` (one that also holds other
    files, or locks, and so cannot be replaced whole by :func:`atomic_dir`).

    Yields an empty directory ``directory/.<tag>.<random>.tmp``. On normal exit of the block
    every regular file at its top level is fsynced and renamed over its namesake in
    ``directory`` (subdirectories are scratch space and are not moved), then ``directory``
    is fsynced; the staging directory is removed in every case, and on an exception nothing
    is moved. Each file is replaced atomically, the set is not: a caller that needs the set
    to look complete writes a marker (a manifest) after the block and removes it at the end
    of the block, before the files are moved.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{tag}.", suffix=".tmp", dir=directory))
    try:
        yield tmp
        files = sorted(p for p in tmp.iterdir() if p.is_file() and not p.is_symlink())
        for f in files:
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        for f in files:
            os.replace(f, directory / f.name)
        _fsync_dir(directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
