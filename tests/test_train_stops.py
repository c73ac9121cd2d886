"""Every stop ends a run the same way (issue 64, item 1): whatever stops it (``max_steps``,
``max_epochs``, ``max_minutes``, the budget plan, early stopping, Ctrl-C), the run directory
then holds ``last.pt`` and ``best.pt`` of the update it stopped at, and ``metrics.csv`` ends
with a validation of that update, validated once (``Trainer._finish``). Before, a run
stopped by ``max_epochs`` kept nothing: no checkpoint, no validation."""

import csv
import logging
import signal
import threading

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.config import load
from nmtkit.train import run_dir
from nmtkit.train.budget import INTERRUPTED
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, clocked_updates, run_until_ctrl_c, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"


def make_cfg(steps, extra=()):
    return load(COPY, tiny_copy_overrides(steps) + list(extra))


def metrics_rows(run):
    with open(run / "metrics.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def snapshot(run):
    return {str(f.relative_to(run)): f.read_bytes() for f in sorted(run.rglob("*")) if f.is_file()}


def steps_per_epoch(cfg, tmp_path):
    """The updates of the first epoch of ``cfg``'s training data (train.accum is 1 here)."""
    trainer = Trainer(cfg, tmp_path / "count")
    return len(trainer.epoch_batches(0))


BUDGET = ["train.max_minutes=0.5", "train.budget_schedule=true", "train.budget_probe_steps=4",
          "train.budget_reserve=0.1", "train.valid_every=20", "train.lr_schedule=inverse_sqrt",
          "train.lr=0.003", "train.warmup=30", "train.min_lr=0.0001"]
STALLED = ["train.valid_every=2", "train.patience=1", "train.lr_schedule=constant",
           "train.lr=1e-30"]

# Each stop: its config (max_steps, overrides), whether updates take 1 s on the loop's clock,
# the stop reason, the update it stops at (None: the end of the first epoch) and the updates
# validated (None: that one alone).
STOPS = {
    "max_steps": ((13, []), False, "max_steps=13", 13, [10, 13]),
    "max_epochs": ((1000, ["train.max_epochs=1", "train.valid_every=1000"]), False,
                   "max_epochs=1", None, None),
    "max_minutes": ((1000, ["train.max_minutes=0.1", "train.valid_every=4"]), True,
                    "max_minutes=0.1", 6, [4, 6]),
    "budget_plan": ((1000, BUDGET), True, "the budget plan's 29 updates (max_minutes=0.5)", 29,
                    [20, 29]),
    "early_stopping": ((50, STALLED), False, "no improvement in 1 validations", 4, [2, 4]),
    "ctrl_c": ((30, []), False, INTERRUPTED, 13, [10, 13]),
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_every_stop_validates_and_saves_its_last_update(stop, tmp_path, monkeypatch, caplog):
    (steps, extra), clocked, reason, at, validated = STOPS[stop]
    cfg = make_cfg(steps, extra)
    if at is None:
        at = steps_per_epoch(cfg, tmp_path)
        validated = [at]
    if clocked:
        clocked_updates(monkeypatch, lambda n: 1.0)
    seen, drawn = [], []
    real_validate = Trainer.validate

    def counted(self):
        seen.append(self.progress.step)
        return real_validate(self)

    monkeypatch.setattr(Trainer, "validate", counted)
    run = tmp_path / "run"
    # on_validation (the CLI redraws curves.png there) sees metrics.csv's newest row.
    trainer = Trainer(cfg, run, on_validation=lambda d: drawn.append(metrics_rows(d)[-1]["step"]))
    caplog.set_level(logging.INFO, logger="nmtkit.train")
    if stop == "ctrl_c":
        run_until_ctrl_c(monkeypatch, trainer, at + 1)  # during update 14: 13 are done
        summary = trainer.summary
        assert f"interrupted at step {at}: saved {run / 'last.pt'}" in caplog.text
    else:
        summary = trainer.run()
        assert summary == trainer.summary
        assert f"stopped: {reason} (step {at}," in caplog.text
    assert (summary["stop_reason"], summary["step"]) == (reason, at)
    assert seen == validated  # each update validated once: the stop's own included
    assert (run / "best.pt").is_file() and (run / "last.pt").is_file()
    assert load_checkpoint(run / "last.pt")["progress"]["step"] == at
    rows = metrics_rows(run)
    assert [int(r["step"]) for r in rows] == validated
    assert float(rows[-1]["valid_loss"]) == pytest.approx(summary["valid_loss"])
    assert drawn[-1] == str(at)
    if stop == "max_epochs":
        assert summary["epoch"] == 1
    if stop != "ctrl_c":  # the same recipe resumed: nothing left to do, nothing rewritten
        before = snapshot(run)
        again = Trainer(cfg, run, Start.resume()).run()
        assert again["step"] == at and snapshot(run) == before


def test_ctrl_c_validation_changes_nothing_the_run_goes_on_from(tmp_path, monkeypatch):
    """Ctrl-C's validation is reported (metrics.csv, curves, best.pt where it beats the best)
    but what last.pt keeps takes no notice of it (the history, the best so far, early
    stopping's count, the schedule): --resume goes on as the uninterrupted run, to the same
    weights and validations."""
    extra = ["train.lr_schedule=plateau", "train.plateau_patience=0", "train.lr=0.003"]
    straight = Trainer(make_cfg(30, extra), tmp_path / "a")
    straight.run()
    run = tmp_path / "b"
    run_until_ctrl_c(monkeypatch, Trainer(make_cfg(30, extra), run), 14)
    assert [int(r["step"]) for r in metrics_rows(run)] == [10, 13]
    at_13 = load_checkpoint(run / "last.pt")["progress"]
    assert (at_13["step"], [row["step"] for row in at_13["history"]]) == (13, [10])
    # The best so far is step 10's (early_stop_metric: bleu), and no validation counted as bad.
    assert (at_13["best"], at_13["bad_validations"]) == (straight.progress.history[0]["valid_bleu"], 0)
    resumed = Trainer(make_cfg(30, extra), run, Start.resume())
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    kept = ("step", "valid_loss", "valid_ppl", "valid_bleu", "lr")  # (not the training loss
    # of row 20: the resumed session's covers updates 14 to 20)
    assert [{k: r[k] for k in kept} for r in resumed.progress.history] == [
        {k: r[k] for k in kept} for r in straight.progress.history]
    assert (resumed.progress.best, resumed.progress.bad_validations) == (
        straight.progress.best, straight.progress.bad_validations)
    assert [int(r["step"]) for r in metrics_rows(run)] == [10, 20, 30]


@pytest.fixture
def python_sigint_handler():
    """SIGINT raises KeyboardInterrupt in this (main) thread during the test, as at a terminal."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("when", ["ctrl_c", "final_validation"])
def test_ctrl_c_again_skips_the_validation_never_last_pt(when, tmp_path, monkeypatch, caplog,
                                                         python_sigint_handler):
    """A second Ctrl-C during the last validation (Ctrl-C's, or the one a budget's stop
    runs) skips it, as the log says, and a third during the save of last.pt waits for it."""
    real_validate, real_save = Trainer.validate, run_dir.save_checkpoints

    def ctrl_c_at_13(self):
        if self.progress.step == 13:
            raise KeyboardInterrupt
        return real_validate(self)

    def save_under_ctrl_c(*args, **kw):
        signal.raise_signal(signal.SIGINT)  # (a handler that raised would end the save here)
        return real_save(*args, **kw)

    real_round = Trainer._validation_round

    def round_then_ctrl_c_in_saves(self, *args, **kw):  # (after step 10's validation and save)
        real_round(self, *args, **kw)
        monkeypatch.setattr(run_dir, "save_checkpoints", save_under_ctrl_c)

    monkeypatch.setattr(Trainer, "validate", ctrl_c_at_13)
    monkeypatch.setattr(Trainer, "_validation_round", round_then_ctrl_c_in_saves)
    run = tmp_path / "run"
    caplog.set_level(logging.INFO, logger="nmtkit.train")
    if when == "ctrl_c":
        trainer = Trainer(make_cfg(30), run)
        run_until_ctrl_c(monkeypatch, trainer, 14)
    else:  # max_steps=13: its final validation is interrupted
        trainer = Trainer(make_cfg(13), run)
        with pytest.raises(KeyboardInterrupt):
            trainer.run()
    assert "interrupted again: the validation of step 13 skipped" in caplog.text
    assert "Ctrl-C: still writing last.pt" in caplog.text
    assert load_checkpoint(run / "last.pt")["progress"]["step"] == 13
    assert [int(r["step"]) for r in metrics_rows(run)] == [10]  # step 13: not validated
    assert trainer.summary is not None
    assert (trainer.summary["stop_reason"], trainer.summary["step"]) == (INTERRUPTED, 13)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert Trainer(make_cfg(30), run, Start.resume()).progress.step == 13
