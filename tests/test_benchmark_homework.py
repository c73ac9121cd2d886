"""benchmarks/homework_rnn.py: a finished run is kept only if it had the same budget."""

import pytest
import torch

from .helpers import load_benchmark

homework = load_benchmark("homework_rnn")


def finished_run(run, minutes):
    run.mkdir()
    torch.save({"config": {"train": {"max_minutes": minutes}}}, run / "best.pt")
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
