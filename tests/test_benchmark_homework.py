"""benchmarks/homework_rnn.py: a finished run is kept only if it had the same budget."""

import pytest

from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.models import build_model

from .helpers import COPY_VOCAB, load_benchmark, make_cfg, save_tiny_checkpoint

homework = load_benchmark("homework_rnn")


def finished_run(run, minutes):
    """A run directory whose best.pt (a release checkpoint, as a run writes it) was trained
    for ``minutes``."""
    run.mkdir()
    cfg = make_cfg(1, [f"train.max_minutes={minutes}"])
    tok = WhitespaceTokenizer()
    save_tiny_checkpoint(run / "best.pt", cfg, tok, tok, COPY_VOCAB, COPY_VOCAB,
                         build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB)))
    return run


def test_a_finished_run_of_another_budget_stops_the_script(tmp_path):
    run = finished_run(tmp_path / "homework", 10.0)
    assert homework.kept_budget(run) == 10.0
    with pytest.raises(SystemExit, match=r"holds a finished run of 10 minutes, not 35"):
        homework.train("homework", run, 35.0, retrain=False)


def test_a_finished_run_of_the_same_budget_is_kept(tmp_path):
    run = finished_run(tmp_path / "homework", 35.0)
    kept = homework.train("homework", run, 35.0, retrain=False)
    assert kept["kept"] == str(run) and "max_minutes=35" in kept["command"]
