"""Where a run starts is one value (issue 72 item 5): :class:`nmtkit.train.start.Start`,
built from ``--resume``/``--init-from``/``--vocab-from``/``--overwrite`` where they are
parsed, contradictory flags refused there, naming them; the :class:`Trainer` that takes it
holds a handful of objects, not a bag of attributes; ``--resume`` of a run that kept only
``best.pt`` says how to go on from it (issue 74 item 10)."""

from pathlib import Path

import pytest

from nmtkit.cli import build_parser
from nmtkit.cli import main as cli_main
from nmtkit.cli.train import start_of
from nmtkit.errors import UserError
from nmtkit.train.loop import Trainer
from nmtkit.train.start import SCRATCH, Start

from .helpers import ROOT, make_cfg, tiny_copy_overrides

COPY = ROOT / "configs" / "copy_task.yaml"
MAX_TRAINER_ATTRIBUTES = 15


def flags_start(*flags):
    return start_of(build_parser().parse_args(["train", str(COPY), *flags]))


def test_each_start_is_one_value():
    assert SCRATCH == Start.scratch() == Start() and not SCRATCH.resumes
    assert (SCRATCH.checkpoint, SCRATCH.parent, SCRATCH.overwrite) == (None, None, False)
    assert Start.resume().resumes and Start.resume().checkpoint is None
    tune = Start.fine_tune("runs/x/best.pt")
    assert (tune.kind, tune.checkpoint, tune.parent) == ("fine_tune", Path("runs/x/best.pt"),
                                                         Path("runs/x/best.pt"))
    vocab = Start.vocabulary_from(Path("runs/x/best.pt"), overwrite=True)
    assert (vocab.kind, vocab.checkpoint, vocab.parent, vocab.overwrite) == (
        "vocabulary_from", Path("runs/x/best.pt"), None, True)
    assert Start.scratch(overwrite=True).overwrite and not Start.scratch(overwrite=True).resumes
    with pytest.raises(AttributeError):  # frozen: a start is chosen once
        tune.kind = "resume"  # type: ignore[misc]


@pytest.mark.parametrize("kind, checkpoint, overwrite", [
    ("resume", None, True),  # continues the run: cannot set it aside
    ("fine_tune", None, False),  # fine-tunes nothing
    ("vocabulary_from", None, False),
    ("scratch", Path("x.pt"), False),  # reads a checkpoint it never uses
    ("resume", Path("x.pt"), False),
    ("warm", None, False),  # no such start
])
def test_a_start_that_means_nothing_is_a_programming_error(kind, checkpoint, overwrite):
    with pytest.raises(ValueError) as e:
        Start(kind, checkpoint, overwrite)
    assert not isinstance(e.value, UserError)  # a caller's bug, not the user's input


@pytest.mark.parametrize("flags, start", [
    ([], Start.scratch()),
    (["--overwrite"], Start.scratch(overwrite=True)),
    (["--resume"], Start.resume()),
    (["--init-from", "p.pt"], Start.fine_tune("p.pt")),
    (["--init-from", "p.pt", "--overwrite"], Start.fine_tune("p.pt", overwrite=True)),
    (["--vocab-from", "v.pt"], Start.vocabulary_from("v.pt")),
    (["--overwrite", "--vocab-from", "v.pt"], Start.vocabulary_from("v.pt", overwrite=True)),
])
def test_the_flags_build_one_start(flags, start):
    assert flags_start(*flags) == start


RESUME_AND = ("{flag} and --resume cannot be combined: --resume continues the run from its own "
              "last.pt (weights, tokenizers and vocabularies): drop {flag} to continue the run, "
              "or start a new run from {path} (another --run-dir, or --overwrite)")


@pytest.mark.parametrize("flags, message", [
    (["--resume", "--overwrite"],
     "--resume and --overwrite cannot be combined: --resume continues the run in RUN_DIR from "
     "its last.pt, --overwrite starts a new one there (the earlier run set aside): drop one of "
     "them"),
    (["--resume", "--init-from", "p.pt"], RESUME_AND.format(flag="--init-from", path="p.pt")),
    (["--vocab-from", "v.pt", "--resume"], RESUME_AND.format(flag="--vocab-from", path="v.pt")),
    (["--resume", "--overwrite", "--init-from", "p.pt"],
     RESUME_AND.format(flag="--init-from", path="p.pt")),
    (["--init-from", "p.pt", "--vocab-from", "v.pt"],
     "--init-from and --vocab-from cannot be combined (--init-from already takes the parent's "
     "tokenizers and vocabularies)"),
    (["--init-from", "p.pt", "--vocab-from", "v.pt", "--resume", "--overwrite"],
     "--init-from and --vocab-from cannot be combined (--init-from already takes the parent's "
     "tokenizers and vocabularies)"),
])
def test_contradictory_flags_are_refused_as_they_are_parsed(flags, message, tmp_path, capsys):
    with pytest.raises(UserError) as e:
        flags_start(*flags)
    assert str(e.value) == message
    # On the command line: exit 2 with the message, before the recipe (not there) is read.
    recipe = tmp_path / "no_such_recipe.yaml"
    assert cli_main(["train", str(recipe), "--run-dir", str(tmp_path / "run"), *flags]) == 2
    assert capsys.readouterr().err == f"nmtkit: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_resume_with_only_best_pt_says_to_fine_tune_from_it(tmp_path, capsys):
    """Issue 74 item 10: a run directory that kept ``best.pt`` but no ``last.pt`` has no
    resume state; ``--resume`` says so and names ``--init-from RUN/best.pt``."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"weights")
    args = ["train", str(COPY), "--run-dir", str(run), "--resume"]
    for s in tiny_copy_overrides(4):
        args += ["--set", s]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"nmtkit: error: {run / 'last.pt'}: nothing to resume: the run has no resume "
                   f"state (last.pt); {run / 'best.pt'} holds its best weights, without optimizer "
                   f"state: to fine-tune from them, start a new run with --init-from "
                   f"{run / 'best.pt'} and another --run-dir\n")
    assert sorted(p.name for p in run.iterdir()) == ["best.pt"]  # nothing else written


def test_the_trainer_holds_a_handful_of_objects(tmp_path):
    """At most :data:`MAX_TRAINER_ATTRIBUTES` instance attributes once set up, each a part of
    the algorithm (data, model, updater, schedule, progress ...) rather than their pieces."""
    trainer = Trainer(make_cfg(2), tmp_path / "run")
    held = sorted(vars(trainer))
    assert len(held) <= MAX_TRAINER_ATTRIBUTES, held
    assert {"cfg", "place", "directory", "data", "model", "updater", "schedule",
            "progress"} <= set(held)
    trainer.directory.release()


@pytest.mark.slow
def test_the_trainer_holds_a_handful_of_objects_after_a_run(tmp_path):
    trainer = Trainer(make_cfg(2, ["train.valid_every=1", "train.tensorboard=false"]),
                      tmp_path / "run")
    trainer.run()
    assert len(vars(trainer)) <= MAX_TRAINER_ATTRIBUTES, sorted(vars(trainer))
    assert trainer.summary is not None and trainer.summary["step"] == 2
