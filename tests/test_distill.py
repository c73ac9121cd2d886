"""Sequence-level knowledge distillation: ``nmtkit distill`` writes the teacher's (or an
ensemble's) translations of the training sources, and a student trains on them."""

import json

import pytest

from nmtkit.cli import main as cli_main
from nmtkit.config import load
from nmtkit.data.corpora import load_parallel
from nmtkit.train.loop import Trainer

from .helpers import ROOT, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """Two tiny copy-task models (de -> en) of different seeds."""
    runs = []
    for seed in (1, 2):
        run = tmp_path_factory.mktemp(f"teacher{seed}") / "run"
        Trainer(load(COPY, tiny_copy_overrides(20) + [f"train.seed={seed}"]), run).run()
        runs.append(run / "last.pt")
    return runs


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def models(paths):
    return [x for p in paths for x in ("--model", str(p))]


@pytest.mark.parametrize("n_teachers", [1, 2])
def test_distill_writes_the_training_sources_and_the_teachers_translations(
        tmp_path, teachers, n_teachers, capsys):
    chosen = teachers[:n_teachers]
    prefix = tmp_path / "distilled"
    assert cli_main(["distill", *models(chosen), "--beam", "2", "-o", str(prefix)]) == 0
    report = json.loads(capsys.readouterr().out)
    sources = load_parallel(load(COPY, tiny_copy_overrides(20)).data, "train").src
    assert lines(prefix.with_suffix(".de")) == sources
    # The translations are what `nmtkit translate` gives with the same model(s) and beam.
    (tmp_path / "src.de").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    out = tmp_path / "translate.en"
    assert cli_main(["translate", *models(chosen), "--beam", "2", "-i", str(tmp_path / "src.de"),
                     "-o", str(out)]) == 0
    assert lines(prefix.with_suffix(".en")) == lines(out)
    assert report["pairs"] == len(sources) == 400 and report["beam"] == 2
    assert report["src"] == f"{prefix}.de" and report["tgt"] == f"{prefix}.en"
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def test_distill_another_split_and_train_a_student_on_it(tmp_path, teachers, capsys):
    prefix = tmp_path / "val_distilled"
    assert cli_main(["distill", "--model", str(teachers[0]), "--split", "valid",
                     "-o", str(prefix)]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == 20
    student = Trainer(load(COPY, tiny_copy_overrides(4) + [
        f"data.extra=[{{path: {prefix}, weight: 1, tag: ''}}]"]), tmp_path / "student")
    assert len(student.data.train_ids) == 400 + 20  # the real pairs and the distilled ones
    assert student.run()["step"] == 4
