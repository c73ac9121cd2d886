"""Training's edges found by hostile-input probe III: a run directory used by two runs at
once (locked), a symbolic link that cannot be one, ``--resume`` of a run that ended however
it ended (nothing trained), a budget plan resumed with another budget or turned off, and the
refusals that must say what differs and how to go on."""

import fcntl
import os

import pytest

import nmtkit.train.setup as setup
from nmtkit.cli import main as cli_main
from nmtkit.config import load
from nmtkit.train.loop import Trainer
from nmtkit.train.run_dir import RunDirLock
from nmtkit.train.start import Start

from .helpers import ROOT, clocked_updates, run_until_ctrl_c, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"


def make_cfg(steps=10, extra=()):
    return load(COPY, tiny_copy_overrides(steps) + list(extra))


def train_args(run, steps=10, extra=()):
    args = ["train", str(COPY), "--run-dir", str(run)]
    for s in tiny_copy_overrides(steps) + list(extra):
        args += ["--set", s]
    return args


def snapshot(run):
    return {str(f.relative_to(run)): f.read_bytes() for f in sorted(run.rglob("*")) if f.is_file()}


@pytest.fixture
def no_data_work(monkeypatch):
    """Reading the corpus fails the test: what is checked must be refused before it."""
    def read(*_):
        raise AssertionError("the corpus was read")

    monkeypatch.setattr(setup, "load_training", read)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A copy-task run of 4 updates that ended on max_steps (a real checkpoint to resume)."""
    run = tmp_path_factory.mktemp("finished")
    Trainer(make_cfg(4, ["train.valid_every=2"]), run).run()
    return run


# --- failure 1: one run directory, one run ---------------------------------------------------

def test_a_second_run_on_a_locked_run_dir_is_refused_before_any_work(tmp_path, capsys,
                                                                     no_data_work):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("last.pt", "best.pt", "metrics.csv"):  # the first run's files
        (run / name).write_bytes(b"first run")
    with open(run / RunDirLock.NAME, "a+b") as other:  # another process's lock, as flock sees it
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        other.write(b"4242\n")
        other.flush()
        before = snapshot(run)
        for mode in ([], ["--overwrite"], ["--resume"]):
            assert cli_main(train_args(run) + mode) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"nmtkit: error: {run}: another training run holds this run "
                                  "directory (process 4242"), err
            assert snapshot(run) == before  # nothing moved aside, nothing written
        assert not list(run.glob(".overwritten.*"))


def test_the_lock_is_held_for_the_whole_run_and_gone_after(tmp_path):
    run = tmp_path / "run"
    seen = []

    def try_to_lock(run_dir):  # after each validation: a second process would be refused
        with open(run_dir / RunDirLock.NAME, "a+b") as f:
            with pytest.raises(BlockingIOError):
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            f.seek(0)
            seen.append(f.read().decode().strip())

    trainer = Trainer(make_cfg(4, ["train.valid_every=2"]), run, on_validation=try_to_lock)
    assert (run / RunDirLock.NAME).exists()  # from the set-up on, before the first update
    trainer.run()
    assert seen == [str(os.getpid())] * 2
    assert not (run / RunDirLock.NAME).exists()  # never part of the run's files
    # One process may set up one run directory's trainers in turn (a run, then its resume).
    again = Trainer(make_cfg(6, ["train.valid_every=2"]), run, Start.resume())
    also = Trainer(make_cfg(6, ["train.valid_every=2"]), run, Start.resume())
    del also
    assert again.run()["step"] == 6 and not (run / RunDirLock.NAME).exists()


# --- failure 20: a run directory that is a broken symbolic link --------------------------------

def test_a_symlink_loop_or_dangling_link_as_run_dir_is_named_before_the_data(tmp_path, capsys,
                                                                            no_data_work):
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    assert cli_main(train_args(tmp_path / "loopA")) == 2
    assert capsys.readouterr().err == (f"nmtkit: error: {tmp_path / 'loopA'}: run directory is "
                                       "a symbolic link loop\n")
    assert cli_main(train_args(tmp_path / "dangling")) == 2
    assert capsys.readouterr().err == (
        f"nmtkit: error: {tmp_path / 'dangling'}: run directory is a dangling symbolic link (to "
        f"{tmp_path / 'nowhere' / 'x'}, which does not exist)\n")
    assert not (tmp_path / "nowhere").exists()


# --- failure 24: --init-from or --vocab-from with --resume -------------------------------------

@pytest.mark.parametrize("flag", ["--init-from", "--vocab-from"])
def test_a_start_checkpoint_with_resume_is_refused(finished, tmp_path, capsys, flag,
                                                   no_data_work):
    run = tmp_path / "run"
    assert cli_main(train_args(run) + ["--resume", flag, str(finished / "best.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmtkit: error: {flag} and --resume cannot be combined"), err
    assert f"drop {flag} to continue the run" in err and not run.exists()


# --- failure 18: no last.pt, but step_*.pt ----------------------------------------------------

def test_without_last_pt_both_messages_point_to_the_step_checkpoint(tmp_path, no_data_work):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"x")
    with pytest.raises(ValueError) as fresh:
        Trainer(make_cfg(), run)
    assert str(fresh.value).endswith(
        "it has no last.pt to resume: to train on from the weights of best.pt, start a new run "
        f"with --init-from {run / 'best.pt'} and another --run-dir; or pass --overwrite to "
        "start afresh")
    assert "--resume" not in str(fresh.value)  # there is nothing it could read
    with pytest.raises(FileNotFoundError) as resumed:
        Trainer(make_cfg(), run, Start.resume())
    assert str(resumed.value) == (  # (issue 74 item 10: it named no way on from best.pt)
        f"{run / 'last.pt'}: nothing to resume: the run has no resume state (last.pt); "
        f"{run / 'best.pt'} holds its best weights, without optimizer state: to fine-tune from "
        f"them, start a new run with --init-from {run / 'best.pt'} and another --run-dir")
    for step in (10, 20):
        (run / f"step_{step:08d}.pt").write_bytes(b"x")
    with pytest.raises(FileNotFoundError) as resumed:
        Trainer(make_cfg(), run, Start.resume())
    newest = run / "step_00000020.pt"
    assert str(resumed.value) == (
        f"{run / 'last.pt'}: nothing to resume; {newest} is a release checkpoint of this run "
        "without optimizer state: to train on from its weights, start a new run with "
        f"--init-from {newest} and another --run-dir")
    with pytest.raises(ValueError) as fresh:
        Trainer(make_cfg(), run)
    assert str(fresh.value).endswith(
        "it has no last.pt to resume: to train on from the weights of step_00000020.pt, start "
        f"a new run with --init-from {newest} and another --run-dir; or pass --overwrite to "
        "start afresh")


# --- failure 22: what differs in the data section ----------------------------------------------

def test_a_changed_data_section_is_named_key_by_key(finished, no_data_work):
    cfg = make_cfg(8, ["data.copy_valid_size=30", "data.max_len=50"])
    with pytest.raises(ValueError) as e:
        Trainer(cfg, finished, Start.resume())
    assert str(e.value) == (
        f"{finished / 'last.pt'}: cannot resume: the data section of the config differs from the "
        "checkpoint's: data.max_len = 100 in the checkpoint, 50 here, data.copy_valid_size = 20 "
        "in the checkpoint, 30 here")


# --- failure 6: a run that ended is resumed with its recipe: nothing is trained ---------------

def resume_changes_nothing(run, cfg, reason):
    before = snapshot(run)
    result = Trainer(cfg, run, Start.resume()).run()
    assert result["stop_reason"] == reason
    assert snapshot(run) == before  # no update, no checkpoint, no metrics row
    return result


def test_a_run_ended_on_patience_or_time_trains_nothing_when_resumed(tmp_path, monkeypatch):
    stalled = ["train.valid_every=2", "train.patience=1", "train.lr_schedule=constant",
               "train.lr=1e-30"]
    run = tmp_path / "patience"
    first = Trainer(make_cfg(50, stalled), run).run()
    assert first["stop_reason"] == "no improvement in 1 validations"
    result = resume_changes_nothing(run, make_cfg(50, stalled), first["stop_reason"])
    assert result["step"] == first["step"] and result["valid_loss"] == first["valid_loss"]
    more = Trainer(make_cfg(50, [*stalled, "train.patience=2"]), run, Start.resume()).run()
    assert more["step"] == first["step"] + 2  # a larger patience: one more validation

    clocked_updates(monkeypatch, lambda n: 1.0)
    timed = ["train.max_minutes=0.1", "train.valid_every=4"]  # 6 s at 1 s an update
    run = tmp_path / "time"
    assert Trainer(make_cfg(50, timed), run).run()["step"] == 6
    resume_changes_nothing(run, make_cfg(50, timed), "max_minutes=0.1")
    longer = Trainer(make_cfg(50, ["train.max_minutes=0.15", "train.valid_every=4"]), run,
                     Start.resume())
    assert longer.run()["step"] == 9


# --- failure 5: a budget plan resumed with another budget, or turned off -----------------------

def budget_cfg(minutes=0.5, extra=()):
    """At 1 s an update, planned after update 5 (25 s left, 90% of it: 22 more, 27 in all),
    revised every 4 updates after its warmup (9, 13, 17: 27, 28, 28) and at the validation
    of update 20 (10 s left: 9 more, 29 in all)."""
    return make_cfg(1000, [f"train.max_minutes={minutes}", "train.budget_schedule=true",
                           "train.budget_probe_steps=4", "train.budget_reserve=0.1",
                           "train.valid_every=20", "train.lr_schedule=inverse_sqrt",
                           "train.lr=0.003", "train.warmup=30", "train.min_lr=0.0001", *extra])


def test_a_finished_budget_plan_is_not_stretched(tmp_path, monkeypatch):
    clocked_updates(monkeypatch, lambda n: 1.0)
    run = tmp_path / "r"
    first = Trainer(budget_cfg(), run).run()
    assert (first["step"], first["stop_reason"]) == (29, "the budget plan's 29 updates "
                                                           "(max_minutes=0.5)")
    resume_changes_nothing(run, budget_cfg(), first["stop_reason"])
    with pytest.raises(ValueError) as e:
        Trainer(budget_cfg(1.0), run, Start.resume())
    assert str(e.value).startswith(f"{run / 'last.pt'}: cannot resume with train.max_minutes=1 "
                                   "(was 0.5): the run ended at update 29, at the last update "
                                   "of its budget plan")
    assert f"--init-from {run / 'last.pt'} --run-dir NEW_DIR" in str(e.value)
    # Turned off, the plan neither sets the rate nor ends the run: the time does (1 s left).
    off = Trainer(budget_cfg(extra=["train.budget_schedule=false"]), run, Start.resume())
    assert off.schedule.plan is None
    result = off.run()
    assert (result["step"], result["stop_reason"]) == (30, "max_minutes=0.5")


def test_a_budget_run_ended_on_its_time_is_not_stretched_either(tmp_path, monkeypatch):
    # Updates after the validation of update 20 take 2 s: the time (30 s) is up at update 25,
    # before the plan's 29 (its rate near its floor all the same).
    clocked_updates(monkeypatch, lambda n: 1.0 if n <= 20 else 2.0)
    run = tmp_path / "r"
    first = Trainer(budget_cfg(), run).run()
    assert (first["step"], first["stop_reason"]) == (25, "max_minutes=0.5")
    resume_changes_nothing(run, budget_cfg(), "max_minutes=0.5")
    with pytest.raises(ValueError, match=r"cannot resume with train\.max_minutes=1 \(was 0\.5\): "
                       r"the run ended at update 25, on its time budget"):
        Trainer(budget_cfg(1.0), run, Start.resume())


def test_a_budget_plan_resumed_with_more_time_is_replanned_at_once(tmp_path, monkeypatch):
    clocked_updates(monkeypatch, lambda n: 1.0)
    run = tmp_path / "r"
    run_until_ctrl_c(monkeypatch, Trainer(budget_cfg(), run), 22)  # last.pt: update 21
    resumed = Trainer(budget_cfg(1.0), run, Start.resume())
    plan = resumed.schedule.plan
    # 60 - 21 s left, 90% of it at the 1 s an update measured: 35 more, 56 in all (the
    # fifth revision: after those at updates 9, 13, 17 and 20).
    assert plan is not None and (plan.made_at, plan.steps, plan.revisions) == (21, 56, 5)
    result = resumed.run()
    assert result["step"] > 29 and "budget plan" in result["stop_reason"]
