"""One family of user errors (issue 72, item 6): ``nmtkit`` answers a
:class:`~nmtkit.errors.UserError` (a config, flag, checkpoint, data file or run directory at
fault) with one ``nmtkit: error:`` line and exit status 2; any other exception is a bug and
keeps its traceback (exit status 1)."""

from __future__ import annotations

import runpy
import subprocess
import sys

import pytest

from nmtkit.cli import main as cli_main
from nmtkit.errors import UserError

from .helpers import ROOT


def boom(message: str, kind: type[Exception]):
    def run(args):
        raise kind(message)
    return run


def test_the_named_errors_are_user_errors_and_still_value_errors():
    from nmtkit.checkpoint import CheckpointError
    from nmtkit.cli.text import InputError
    from nmtkit.config import ConfigError
    from nmtkit.data.fetch import CorpusError
    from nmtkit.data.mmap_ids import DamagedStore
    from nmtkit.decode.text_translator import TargetTextError
    from nmtkit.export import ExportError
    from nmtkit.train.run_dir import RunDirBusy
    from nmtkit.train.step import TrainingError

    for kind in (CheckpointError, InputError, ConfigError, CorpusError, DamagedStore,
                 TargetTextError, ExportError, RunDirBusy, TrainingError):
        assert issubclass(kind, UserError) and issubclass(kind, ValueError), kind
    # Those that were RuntimeErrors stay RuntimeErrors for callers that catch them so.
    assert issubclass(CheckpointError, RuntimeError) and issubclass(TrainingError, RuntimeError)


def test_a_user_error_exits_2_with_one_line(monkeypatch, capsys):
    import nmtkit.cli.plot as plot

    monkeypatch.setattr(plot, "run", boom("runs/x: no metrics.csv", UserError))
    assert cli_main(["plot", "curves"]) == 2
    assert capsys.readouterr().err == "nmtkit: error: runs/x: no metrics.csv\n"


def test_a_plain_value_error_is_a_bug_and_propagates(monkeypatch):
    import nmtkit.cli.plot as plot

    monkeypatch.setattr(plot, "run", boom("an internal invariant broke", ValueError))
    with pytest.raises(ValueError, match="an internal invariant broke"):
        cli_main(["plot", "curves"])
    monkeypatch.setattr(plot, "run", boom("tensor sizes differ", RuntimeError))
    with pytest.raises(RuntimeError, match="tensor sizes differ"):
        cli_main(["plot", "curves"])


@pytest.mark.slow
@pytest.mark.parametrize("kind, status", [("UserError", 2), ("ValueError", 1)])
def test_the_command_line_exit_status_and_traceback(kind, status):
    code = ("import sys\n"
            "import nmtkit.cli.plot as plot\n"
            "from nmtkit.errors import UserError\n"
            "def run(args):\n"
            f"    raise {kind}('the message')\n"
            "plot.run = run\n"
            "sys.argv = ['nmtkit', 'plot', 'curves']\n"
            "from nmtkit.cli import console\n"
            "console()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == status, proc.stderr
    if status == 2:
        assert proc.stderr == "nmtkit: error: the message\n"
    else:
        assert "Traceback" in proc.stderr and "ValueError: the message" in proc.stderr


def test_a_bad_config_is_a_user_error_before_any_work(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("train:\n  no_such_key: 1\n")
    assert cli_main(["train", str(recipe), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmtkit: error: ") and err.count("\n") == 1 and "no_such_key" in err
    assert not (tmp_path / "run").exists()


def test_a_flag_refused_by_the_library_is_a_user_error(tmp_path, capsys):
    """``refuse_overwriting_inputs`` (nmtkit.io, below every command) raises a UserError."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,train_loss\n1,2.0\n")
    assert cli_main(["plot", "curves", "--run", str(run), "-o", str(run / "metrics.csv")]) == 2
    err = capsys.readouterr().err
    assert "is also an input" in err and err.count("\n") == 1


@pytest.mark.parametrize("module", ["nmtkit", "nmtkit.cli"])
def test_python_m_runs_the_console_script(module, monkeypatch, capsys):
    """``python -m nmtkit`` and ``python -m nmtkit.cli`` are the console script (run here in
    this process, so that the fast tier runs the two ``__main__`` modules too)."""
    monkeypatch.setattr(sys, "argv", [module, "--version"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("nmtkit ")
