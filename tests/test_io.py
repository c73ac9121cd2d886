"""io.py: atomic writes that never replace what is not a regular file (issue "Reliability II",
item 2), and atomic directories. The suite runs as root in CI, where a rename over /dev/null
succeeds: these tests are what keeps the machine's device files devices."""

import os
import stat
import threading

import pytest

from nmtkit import io as nio
from nmtkit.io import atomic_dir, atomic_open, atomic_write_text, staged_files


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_new_file_gets_umask_permissions(tmp_path, umask_022):
    atomic_write_text(tmp_path / "out.txt", "x\n")
    assert stat.S_IMODE(os.stat(tmp_path / "out.txt").st_mode) == 0o644


def test_replacing_keeps_the_files_mode(tmp_path, umask_022):
    p = tmp_path / "out.txt"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic_write_text(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(os.stat(p).st_mode) == 0o640


def test_symlink_target_is_replaced_and_the_link_kept(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    # daemon: if the FIFO were replaced by a regular file, the reader could block forever
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_null_stays_a_device():
    atomic_write_text("/dev/null", "discarded\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_raises_and_stays_a_device():
    with pytest.raises(OSError):
        atomic_write_text("/dev/full", "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_failure_inside_the_block_leaves_the_original(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("original")
    with pytest.raises(RuntimeError), atomic_open(p, "w", encoding="utf-8") as f:
        f.write("half")
        assert list(tmp_path.glob(".*.tmp"))  # the temporary file exists until the failure
        raise RuntimeError("boom")
    assert p.read_text() == "original"
    assert not list(tmp_path.glob(".*.tmp"))


def test_unwritable_places_raise_oserror(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises((NotADirectoryError, FileExistsError)):
        atomic_write_text(tmp_path / "file" / "out.txt", "y")
    assert (tmp_path / "file").read_text() == "x"
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path / "dir", "y")
    assert (tmp_path / "dir").is_dir()


@pytest.mark.slow
def test_dev_stdout_into_a_pipe_is_written_through():
    import subprocess
    import sys

    code = "from nmtkit.io import atomic_write_text; atomic_write_text('/dev/stdout', 'piped\\n')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "piped\n"
    assert not os.path.isfile("/dev/stdout") or os.path.islink("/dev/stdout")


# --- atomic_dir ---------------------------------------------------------------------------


def siblings(path):
    """Everything beside ``path`` in its folder other than ``path`` itself."""
    return sorted(p.name for p in path.parent.iterdir() if p != path)


def test_atomic_dir_builds_aside_and_renames_into_place(tmp_path, umask_022):
    out = tmp_path / "store"
    with atomic_dir(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".store.") and tmp.name.endswith(".tmp")
        (tmp / "a.txt").write_text("a")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.txt").write_text("b")
        assert not out.exists()  # nothing at the destination until the block ends
    assert (out / "a.txt").read_text() == "a" and (out / "sub" / "b.txt").read_text() == "b"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755  # mkdir's mode, not mkdtemp's 0o700
    assert siblings(out) == []  # no temporary left
    with atomic_dir(tmp_path / "new" / "deeper") as tmp:  # missing parents are created
        (tmp / "x").write_text("x")
    assert (tmp_path / "new" / "deeper" / "x").read_text() == "x"


def test_atomic_dir_fsyncs_every_file_before_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else fd)
        real_fsync(fd)

    monkeypatch.setattr(nio.os, "fsync", spy)
    with atomic_dir(tmp_path / "d") as tmp:
        (tmp / "f").write_text("x")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "g").write_text("y")
    if os.path.exists("/proc/self/fd"):
        assert any(s.endswith("/f") for s in synced) and any(s.endswith("/sub/g") for s in synced)
        assert any(s.endswith("/sub") for s in synced) and str(tmp_path) in synced  # the rename
    else:
        assert len(synced) >= 5


def test_atomic_dir_failure_leaves_the_old_directory(tmp_path):
    out = tmp_path / "store"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_dir(out, replace=True) as tmp:
        (tmp / "new.txt").write_text("half")
        assert siblings(out) == [tmp.name]
        raise RuntimeError("boom")
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    assert (out / "old.txt").read_text() == "old"
    assert siblings(out) == []  # the temporary directory went with the failure


def test_atomic_dir_failure_creates_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "store") as tmp:
        (tmp / "x").write_text("x")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_without_replace_refuses_what_is_there(tmp_path):
    out = tmp_path / "store"
    out.mkdir()
    (out / "keep.txt").write_text("keep")
    entered = []
    with pytest.raises(FileExistsError) as e, atomic_dir(out):
        entered.append(True)
    assert e.value.filename == str(out) and entered == []  # refused before any work
    (tmp_path / "file").write_text("a file")
    with pytest.raises(FileExistsError), atomic_dir(tmp_path / "file"):
        pass
    assert (tmp_path / "file").read_text() == "a file"
    assert (out / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "store"]


def test_atomic_dir_without_replace_refuses_one_that_appeared_meanwhile(tmp_path):
    out = tmp_path / "store"
    with pytest.raises(FileExistsError) as e:
        with atomic_dir(out) as tmp:
            (tmp / "mine.txt").write_text("mine")
            out.mkdir()  # another writer finished first
            (out / "theirs.txt").write_text("theirs")
    assert e.value.filename == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]  # theirs is not clobbered
    assert siblings(out) == []


def test_atomic_dir_fills_an_empty_directory_without_replace(tmp_path):
    out = tmp_path / "store"
    out.mkdir()
    with atomic_dir(out) as tmp:
        (tmp / "x").write_text("x")
    assert [p.name for p in out.iterdir()] == ["x"]


def test_atomic_dir_replace_keeps_the_old_contents_until_the_new_are_in_place(tmp_path, monkeypatch):
    out = tmp_path / "store"
    out.mkdir()
    (out / "old.txt").write_text("old")
    os.chmod(out, 0o750)
    with atomic_dir(out, replace=True) as tmp:
        (tmp / "new.txt").write_text("new")
        assert (out / "old.txt").read_text() == "old"  # still there while the new one is built
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o750  # the replaced directory's mode
    assert siblings(out) == []  # neither the temporary nor the set-aside old one is left

    real_replace = os.replace
    calls = []

    def fail_third(src, dst):  # moving the old aside works, moving the new in does not
        calls.append((src, dst))
        if len(calls) == 3:
            raise OSError(5, "simulated I/O error")
        real_replace(src, dst)

    monkeypatch.setattr(nio.os, "replace", fail_third)
    with pytest.raises(OSError, match="simulated"), atomic_dir(out, replace=True) as tmp:
        (tmp / "newer.txt").write_text("newer")
    monkeypatch.undo()
    # new over old (refused: not empty), old aside, new in (failed), old back
    assert len(calls) == 4 and calls[3][1] == out
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]  # ...and the old one put back
    assert siblings(out) == []


def test_atomic_dir_replace_takes_the_place_of_a_file(tmp_path):
    (tmp_path / "out").write_text("a file")
    with atomic_dir(tmp_path / "out", replace=True) as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "out" / "x").read_text() == "x" and siblings(tmp_path / "out") == []


# --- staged_files ---------------------------------------------------------------------------


def test_staged_files_replace_their_namesakes_and_nothing_else(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a.txt").write_text("old a")
    (shared / "other.txt").write_text("someone else's")
    with staged_files(shared, "group") as tmp:
        assert tmp.parent == shared and tmp.name.startswith(".group.")
        (tmp / "a.txt").write_text("new a")
        (tmp / "b.txt").write_text("new b")
        (tmp / "scratch").mkdir()
        (tmp / "scratch" / "big").write_text("scratch")
        assert (shared / "a.txt").read_text() == "old a"
    assert {p.name: p.read_text() for p in shared.iterdir()} == {
        "a.txt": "new a", "b.txt": "new b", "other.txt": "someone else's"}


def test_staged_files_failure_moves_nothing(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError), staged_files(shared, "group") as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("boom")
    assert [p.name for p in shared.iterdir()] == ["a.txt"]
    assert (shared / "a.txt").read_text() == "old a"


def test_the_output_check_compares_what_the_writer_writes(tmp_path, monkeypatch):
    """``nosuch/../x`` (no ``nosuch/``) is written as ``x``: the check sees it as ``x`` too;
    so does a link, a hard link, and (for a directory replaced whole) a file inside it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").write_text("input\n")
    assert nio.written_path("nosuch/../x") == tmp_path / "x"
    for out in ("nosuch/../x", "./x", "a/b/../../x"):
        with pytest.raises(ValueError, match=rf"{out} is also an input \(x; .* resolves to "):
            nio.refuse_overwriting_inputs([out], ["x"], "-o")
    os.link(tmp_path / "x", tmp_path / "hard")
    with pytest.raises(ValueError, match=r"the same file under another name"):
        nio.refuse_overwriting_inputs(["hard"], ["x"], "-o")
    with pytest.raises(ValueError, match=r"nosuch/\.\. holds an input \(x\)"):
        nio.refuse_overwriting_inputs(["nosuch/.."], ["x"], "--out", whole_directory=True)
    # Not a concern: another file, stdin, an option not given, a device written through.
    nio.refuse_overwriting_inputs(["y", None, "/dev/null"], ["x", "-", None], "-o")
    nio.refuse_overwriting_inputs(["nosuch/x"], ["x"], "-o")
    assert not (tmp_path / "nosuch").exists()
    # What the check resolves is where the writers write, and they make no stray directory.
    atomic_write_text("nosuch/../x", "output\n")
    with atomic_dir("gone/../made") as d:
        (d / "f").write_text("1")
    assert (tmp_path / "x").read_text() == "output\n" and (tmp_path / "made" / "f").exists()
    assert not (tmp_path / "nosuch").exists() and not (tmp_path / "gone").exists()


def test_a_full_disk_names_the_file_asked_for_not_a_temporary_one(tmp_path, monkeypatch):
    """No inode left: creating the temporary file fails, with its random name; the error
    names the file asked for (``RUN/last.pt: No space left on device``)."""
    import errno
    import tempfile

    def no_inode(prefix="", suffix="", dir=None, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(dir, prefix + "x" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", no_inode)
    with pytest.raises(OSError) as e:
        atomic_write_text(tmp_path / "last.pt", "x")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []
