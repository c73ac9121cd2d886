"""``nmtkit train --overwrite``: the earlier run is set aside, not deleted, until the new run
has saved its first checkpoint; a new run that fails before that (an exception, Ctrl-C)
puts it back, so that at every moment one of the two runs has a checkpoint in the directory.
A folder set aside by a run killed hard is left for the user and named in a warning."""

import logging
from pathlib import Path

import pytest

import nmtkit.train.run_dir as run_dir
from nmtkit.cli import main as cli_main
from nmtkit.config import load
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start
from nmtkit.train.step import TrainingError

from .helpers import ROOT, run_until_ctrl_c, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"


def make_cfg(steps=20, extra=()):
    return load(COPY, tiny_copy_overrides(steps) + list(extra))


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file under ``run`` (hidden folders included), by relative path."""
    return {str(f.relative_to(run)): f.read_bytes() for f in sorted(run.rglob("*")) if f.is_file()}


def set_aside(run: Path) -> list[Path]:
    return sorted(run.glob(".overwritten.*"))


def earlier_run(run: Path, steps=30, extra=()) -> dict[str, bytes]:
    """A finished run in ``run``; its files."""
    Trainer(make_cfg(steps, extra), run).run()
    files = snapshot(run)
    assert {"last.pt", "best.pt", "metrics.csv", f"step_{steps:08d}.pt"} <= set(files)
    return files


def fail_first_save(monkeypatch):
    """best.pt's write fails at the new run's first checkpoint (after last.pt's succeeded)."""
    real = run_dir.save_checkpoint

    def save(path, payload):
        if Path(path).name == "best.pt":
            raise OSError(28, "No space left on device")
        real(path, payload)

    monkeypatch.setattr(run_dir, "save_checkpoint", save)


@pytest.mark.parametrize("how", ["diverges", "update_raises", "first_save_fails"])
def test_a_failed_overwrite_puts_the_earlier_run_back(tmp_path, monkeypatch, caplog, how):
    run = tmp_path / "run"
    before = earlier_run(run)
    caplog.set_level(logging.INFO, logger="nmtkit.train")
    if how == "diverges":  # the probe's case, through the command line
        args = ["train", str(COPY), "--run-dir", str(run), "--overwrite", "--set", "train.lr=1e30"]
        for s in tiny_copy_overrides(10):
            args += ["--set", s]
        assert cli_main(args) == 2
    else:
        if how == "update_raises":
            def broken(self, group):
                raise RuntimeError("a model problem at the first batch")

            monkeypatch.setattr(Trainer, "_update", broken)
            expected = (RuntimeError, "first batch")
        else:
            fail_first_save(monkeypatch)
            expected = (OSError, "No space left")
        trainer = Trainer(make_cfg(10, ["train.seed=7"]), run, Start.scratch(overwrite=True))
        assert "last.pt" not in snapshot(run)  # the new run starts in a clean directory
        with pytest.raises(expected[0], match=expected[1]):
            trainer.run()
    assert snapshot(run) == before  # byte for byte, nothing of the new run, no hidden folder
    assert not set_aside(run)
    assert any("earlier run was put back" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)


def test_the_earlier_run_is_deleted_at_the_new_runs_first_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / "run"
    before = earlier_run(run)
    real, seen = run_dir.save_checkpoint, []

    def save(path, payload):
        # At every moment one of the two runs has its last.pt in the directory.
        aside = set_aside(run)
        assert (run / "last.pt").exists() or any((a / "last.pt").exists() for a in aside)
        seen.append((Path(path).name, len(aside)))
        real(path, payload)

    monkeypatch.setattr(run_dir, "save_checkpoint", save)
    result = Trainer(make_cfg(10, ["train.seed=7"]), run, Start.scratch(overwrite=True)).run()
    assert result["step"] == 10
    assert seen[0] == ("last.pt", 1)  # the earlier run still set aside at the first write
    after = snapshot(run)
    assert not set_aside(run)
    assert sorted(after) == ["best.pt", "last.pt", "losses.csv", "metrics.csv", "samples.txt",
                             "step_00000010.pt"]  # step_20/30.pt of the earlier run are gone
    assert all(after[name] != before[name] for name in ("last.pt", "best.pt", "metrics.csv"))


def test_ctrl_c_before_the_first_checkpoint_puts_the_earlier_run_back(tmp_path, monkeypatch,
                                                                      caplog):
    run = tmp_path / "run"
    before = earlier_run(run)
    caplog.set_level(logging.INFO, logger="nmtkit.train")
    # valid_every=10: the first checkpoint would come at update 10.
    run_until_ctrl_c(monkeypatch, Trainer(make_cfg(20, ["train.seed=7"]), run,
                                          Start.scratch(overwrite=True)), 5)
    assert snapshot(run) == before
    assert not set_aside(run)
    assert any("earlier run was put back" in r.getMessage() for r in caplog.records)
    # After the first checkpoint, Ctrl-C saves the new run for --resume, as without --overwrite.
    run_until_ctrl_c(monkeypatch, Trainer(make_cfg(20, ["train.seed=7"]), run,
                                          Start.scratch(overwrite=True)), 15)
    assert not set_aside(run)
    assert Trainer(make_cfg(20, ["train.seed=7"]), run, Start.resume()).progress.step == 14


def test_a_failure_puts_back_the_earlier_tensorboard_events(tmp_path, monkeypatch):
    run = tmp_path / "run"
    before = earlier_run(run, 10, ["train.tensorboard=true"])
    assert any(name.startswith("tensorboard/events.") for name in before)

    def broken(self, group):
        raise RuntimeError("boom")

    monkeypatch.setattr(Trainer, "_update", broken)
    trainer = Trainer(make_cfg(10, ["train.tensorboard=true"]), run, Start.scratch(overwrite=True))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.run()
    assert snapshot(run) == before  # the new run's events file went with it


def test_a_run_killed_before_its_first_checkpoint_leaves_the_earlier_run_aside(tmp_path, caplog):
    run = tmp_path / "run"
    before = earlier_run(run, 10)
    # A process killed hard (SIGKILL) after the set-up: nothing put the earlier run back.
    Trainer(make_cfg(10, ["train.seed=7"]), run, Start.scratch(overwrite=True))
    (aside,) = set_aside(run)
    assert snapshot(aside) == before
    caplog.set_level(logging.INFO, logger="nmtkit.train")
    # --resume finds no last.pt, and says where the earlier run is.
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        Trainer(make_cfg(10), run, Start.resume())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(aside) in w and "recover" in w for w in warnings)
    # A later --overwrite runs, leaves the folder alone and names it again.
    caplog.clear()
    result = Trainer(make_cfg(10, ["train.seed=9"]), run, Start.scratch(overwrite=True)).run()
    assert result["step"] == 10
    assert set_aside(run) == [aside] and snapshot(aside) == before
    assert any(str(aside) in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)
    assert (run / "last.pt").read_bytes() != before["last.pt"]
    # And a failed one after it puts back that run's files, still not touching the folder.
    now = snapshot(run)
    with pytest.raises(TrainingError):
        Trainer(make_cfg(10, ["train.lr=1e30"]), run, Start.scratch(overwrite=True)).run()
    assert snapshot(run) == now and set_aside(run) == [aside]
