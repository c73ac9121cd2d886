"""io.py: atomic writes that never replace what is not a regular file (issue "Reliability II",
item 2). The suite runs as root in CI, where a rename over /dev/null succeeds: these tests
are what keeps the machine's device files devices."""

import os
import stat
import threading

import pytest

from nmtkit.io import atomic_open, atomic_write_text


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


def test_dev_stdout_into_a_pipe_is_written_through():
    import subprocess
    import sys

    code = "from nmtkit.io import atomic_write_text; atomic_write_text('/dev/stdout', 'piped\\n')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "piped\n"
    assert not os.path.isfile("/dev/stdout") or os.path.islink("/dev/stdout")
