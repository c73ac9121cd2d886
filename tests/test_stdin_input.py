"""Issue 74 item 3: stdin is an input. When stdin is a regular file (``< in.de``), no output
may be that file, whatever name the output is given (``in.de``, ``/dev/stdin``,
``/proc/self/fd/0``, a hard link), for every command that writes: each one's check of its
outputs (:func:`nmtkit.io.refuse_overwriting_inputs`) compares them with stdin too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from nmtkit.errors import UserError
from nmtkit.io import refuse_overwriting_inputs

from .helpers import ROOT


@contextmanager
def stdin_from(path: Path | str):
    """File descriptor 0 reads ``path`` inside the block (as ``< path`` would make it)."""
    saved = os.dup(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.dup2(fd, 0)
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(fd)


def test_an_output_that_is_the_file_stdin_reads_is_refused_under_any_name(tmp_path, monkeypatch):
    text = tmp_path / "in.de"
    text.write_text("1 2 3\n")
    link = tmp_path / "hard.de"
    link.hardlink_to(text)
    monkeypatch.chdir(tmp_path)
    real = os.path.realpath(text)
    with stdin_from(text):
        for out in (text, "in.de", "/dev/stdin", "/proc/self/fd/0", link, "sub/../in.de"):
            with pytest.raises(UserError, match=rf"^{re.escape(str(out))} is also an input "
                               rf"\(stdin reads it: {re.escape(real)}\): .*choose another -o$"):
                refuse_overwriting_inputs([out], ["-"], "-o")
        with pytest.raises(UserError, match=rf"holds an input \(stdin reads {re.escape(real)}\)"):
            refuse_overwriting_inputs([tmp_path], [], "--out", whole_directory=True)
        refuse_overwriting_inputs([tmp_path / "out.de"], ["-"], "-o")  # another file: fine
    assert text.read_text() == "1 2 3\n"


def test_stdin_that_is_not_a_regular_file_is_no_concern(tmp_path):
    out = tmp_path / "out.de"
    out.write_text("x\n")
    for source in ("/dev/null",):
        with stdin_from(source):
            refuse_overwriting_inputs([out, "/dev/stdout"], ["-"], "-o")
    read, write = os.pipe()
    os.close(write)
    saved = os.dup(0)
    try:
        os.dup2(read, 0)
        refuse_overwriting_inputs([out], ["-"], "-o")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)


def nmtkit_with_stdin(args: list[str], stdin: Path) -> subprocess.CompletedProcess[str]:
    with open(stdin, "rb") as f:
        return subprocess.run([sys.executable, "-m", "nmtkit.cli", *args], stdin=f,
                              capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_no_command_writes_over_the_file_stdin_reads(copy_run, tmp_path):
    model = str(copy_run / "last.pt")
    text = tmp_path / "in.de"
    text.write_text("1 2 3\n4 5\n")
    mono = tmp_path / "mono.de"  # backtranslate -o mono writes mono.de and mono.en
    mono.write_text("3 4 5\n")
    cases = [
        (["translate", "--model", model, "-o", str(text)], text),
        (["translate", "--model", model, "-o", "/dev/stdin"], text),
        (["translate", "--model", model, "-o", "/proc/self/fd/0"], text),
        (["translate", "--model", model, "-i", "-", "-o", str(text)], text),
        (["backtranslate", "--model", model, "-i", "-", "-o", str(tmp_path / "mono")], mono),
        (["evaluate", "--model", model, "--src", str(text), "--ref", str(text),
          "-o", "/dev/stdin"], text),
    ]
    for args, stdin in cases:
        before = stdin.read_bytes()
        proc = nmtkit_with_stdin(args, stdin)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        err = proc.stderr.strip()
        assert "\n" not in err and "is also an input (stdin reads it: " in err, (args, err)
        assert stdin.read_bytes() == before, args
    assert not (tmp_path / "mono.en").exists()
    # Reading stdin and writing another file is fine.
    out = tmp_path / "out.en"
    proc = nmtkit_with_stdin(["translate", "--model", model, "-o", str(out)], text)
    assert proc.returncode == 0 and len(out.read_text().splitlines()) == 2, proc.stderr[-2000:]
