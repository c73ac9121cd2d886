"""Progress bars (issue 64, item 4): translate, evaluate, tune, distill, backtranslate and
average draw a tqdm bar on stderr with the right total and a rate, only where stderr is a
terminal, and ``--quiet`` silences it (cli/progress.py; the layers below take a callback)."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from nmtkit.cli import main
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translator import Translator
from nmtkit.decode.tune import grid, searches

from .helpers import ROOT

LINES = ["1 2 3", "4 5 6 7", "8 9", "2 2 2 2 2", "3"]  # one sentence each


def on_a_terminal(args: list[str]) -> tuple[int, str]:
    """``python -m nmtkit.cli ARGS`` with stderr on a pseudo-terminal: (exit status, what the
    terminal showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit.cli", *args], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    shown = b""
    while True:  # read while it runs (a full pty would block it)
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), shown.decode("utf-8", "replace")


def final_count(shown: str, desc: str) -> str:
    """The last ``done/total`` the bar named ``desc`` drew."""
    counts = re.findall(desc + r":.*?(\d+/\d+)", shown)
    assert counts, shown
    return counts[-1]


@pytest.fixture
def lines_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in LINES))
    return path


@pytest.mark.slow
def test_translate_on_a_terminal_shows_a_bar_a_pipe_and_quiet_do_not(copy_run, lines_file,
                                                                       tmp_path):
    args = ["translate", "--model", str(copy_run / "last.pt"), "-i", str(lines_file), "-o",
            str(tmp_path / "out.txt"), "--batch-size", "2"]
    rc, shown = on_a_terminal(args)
    assert rc == 0, shown
    assert final_count(shown, "translate") == f"{len(LINES)}/{len(LINES)}"
    assert "sent/s" in shown
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(LINES)
    rc, shown = on_a_terminal([*args, "--quiet"])
    assert rc == 0 and "translate:" not in shown and "sent/s" not in shown, shown
    piped = subprocess.run([sys.executable, "-m", "nmtkit.cli", *args], cwd=ROOT,
                           capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert "sent/s" not in piped.stderr and "\r" not in piped.stderr


@pytest.fixture
def terminal(monkeypatch, capsys):
    """In-process, ``terminal()`` at the start of a test: the captured stderr says it is a
    terminal (patched then: pytest puts another stream there between fixture and test)."""
    def as_terminal():
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        return capsys

    return as_terminal


def test_evaluate_counts_the_sentences(copy_run, lines_file, tmp_path, terminal):
    cap = terminal()
    ref = tmp_path / "ref.txt"
    ref.write_text(lines_file.read_text())
    args = ["evaluate", "--model", str(copy_run / "last.pt"), "--src", str(lines_file), "--ref",
            str(ref), "--beam", "1", "--batch-size", "2"]
    assert main(args) == 0
    out, err = cap.readouterr()
    assert final_count(err, "evaluate") == "5/5" and "sent/s" in err
    assert json.loads(out)["n"] == len(LINES)
    assert main([*args, "-q"]) == 0
    assert "evaluate:" not in cap.readouterr().err


def test_tune_counts_every_search(copy_run, lines_file, tmp_path, terminal):
    cap = terminal()
    ref = tmp_path / "ref.txt"
    ref.write_text(lines_file.read_text())
    assert main(["tune", "--model", str(copy_run / "last.pt"), "--src", str(lines_file),
                 "--ref", str(ref), "--beam", "1", "2", "--length-penalty", "0.6", "1.0"]) == 0
    # greedy once, beam 2 with each penalty: three searches of five sentences
    assert final_count(cap.readouterr().err, "tune") == "15/15"


def test_searches_of_a_grid_with_reranking():
    # greedy; beam 2 plain and with MBR 3 (a search each); reranking 5 searched once for
    # both its settings (alone, and MBR 3 among its best)
    settings = grid([1, 2], [1.0], [0, 3], [0, 5])
    assert [(b, r) for b, _, _, r in settings] == [(1, 0), (2, 0), (2, 0), (2, 5), (2, 5)]
    assert searches(settings) == 4


def test_distill_and_backtranslate_count_the_sentences(copy_run, lines_file, tmp_path,
                                                       terminal):
    cap = terminal()
    assert main(["distill", "--model", str(copy_run / "last.pt"), "--split", "valid",
                 "-o", str(tmp_path / "dist"), "--beam", "1"]) == 0
    out, err = cap.readouterr()
    pairs = json.loads(out)["pairs"]
    assert final_count(err, "distill") == f"{pairs}/{pairs}"
    mono = tmp_path / "mono.txt"
    mono.write_text(lines_file.read_text() + "\n")
    assert main(["backtranslate", "--model", str(copy_run / "last.pt"), "-i", str(mono),
                 "-o", str(tmp_path / "bt"), "--beam", "1"]) == 0
    out, err = cap.readouterr()
    assert json.loads(out)["dropped_empty"] == 1  # dropped before translating: not counted
    assert final_count(err, "backtranslate") == "5/5"


def test_average_counts_the_checkpoints(copy_run, tmp_path, terminal):
    cap = terminal()
    steps = sorted(str(p) for p in copy_run.glob("step_*.pt"))
    assert main(["average", "--out", str(tmp_path / "avg.pt"), *steps]) == 0
    err = cap.readouterr().err
    assert final_count(err, "average") == f"{len(steps)}/{len(steps)}" and "ckpt/s" in err
    assert main(["average", "--quiet", "--out", str(tmp_path / "avg2.pt"), *steps]) == 0
    assert "average:" not in cap.readouterr().err


def test_the_callback_hears_of_every_sentence_once(copy_bundle):
    heard: list[tuple[int, int]] = []
    tr = Translator.from_bundle(copy_bundle, beam=1, batch_size=2)
    tr.translate(LINES, TranslateOptions(progress=lambda done, total: heard.append((done, total))))
    assert heard == [(2, 5), (2, 5), (1, 5)]  # each batch of two, as it is done
    heard.clear()
    tr.translate(["", *LINES], TranslateOptions(
        progress=lambda done, total: heard.append((done, total))))
    assert sum(d for d, _ in heard) == heard[0][1] and len({t for _, t in heard}) == 1
