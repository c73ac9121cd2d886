"""nmtkit.viz.curves.compare_figure / `nmtkit plot compare`: several runs' curves in one figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from nmtkit.cli import main  # noqa: E402
from nmtkit.viz.curves import compare_figure, read_metrics, write_comparison  # noqa: E402

from .helpers import assert_png  # noqa: E402

HEADER = "step,epoch,train_loss,train_ppl,valid_loss,valid_ppl,valid_bleu,lr,tgt_tokens,elapsed_s\n"


def fake_run(root: Path, name: str, rows: list[tuple[int, float, float, int, float]]) -> Path:
    """A run directory whose metrics.csv has (step, valid_loss, valid_bleu, tgt_tokens, seconds)."""
    run = root / name
    run.mkdir()
    lines = [f"{s},0,{loss + 0.1},1,{loss},1,{bleu},0.001,{tok},{sec}"
             for s, loss, bleu, tok, sec in rows]
    (run / "metrics.csv").write_text(HEADER + "\n".join(lines) + "\n")
    return run


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    rnn = fake_run(tmp_path, "rnn", [(100, 5.0, 3.0, 200_000, 60.0), (200, 4.0, 9.0, 400_000, 120.0)])
    tf = fake_run(tmp_path, "transformer", [(100, 4.5, 6.0, 300_000, 30.0),
                                            (200, 3.5, 15.0, 600_000, 60.0),
                                            (300, 3.2, 20.0, 900_000, 90.0)])
    return rnn, tf


def test_compare_draws_each_run_on_each_panel(two_runs):
    rnn, tf = two_runs
    fig = compare_figure([("RNN", read_metrics(rnn)), ("Transformer", read_metrics(tf))])
    loss, bleu, tokens, minutes = fig.get_axes()
    assert [ln.get_label() for ln in bleu.get_lines()] == ["RNN", "Transformer"]
    x, y = loss.get_lines()[1].get_data()
    np.testing.assert_allclose(x, [100, 200, 300])
    np.testing.assert_allclose(y, [4.5, 3.5, 3.2])
    x, y = tokens.get_lines()[0].get_data()
    np.testing.assert_allclose(x, [0.2, 0.4])  # millions of target tokens
    np.testing.assert_allclose(y, [3.0, 9.0])
    x, _ = minutes.get_lines()[1].get_data()
    np.testing.assert_allclose(x, [0.5, 1.0, 1.5])  # seconds -> minutes


def test_compare_png_and_labels(two_runs, tmp_path):
    out = write_comparison(list(two_runs), tmp_path / "c.png", labels=["RNN", "Transformer"])
    assert_png(out)
    with pytest.raises(ValueError, match="1 --label for 2 --run"):
        write_comparison(list(two_runs), tmp_path / "d.png", labels=["RNN"])
    with pytest.raises(ValueError, match="at least two"):
        write_comparison([two_runs[0]], tmp_path / "d.png")


def test_plot_compare_command(two_runs, tmp_path, capsys):
    rnn, tf = two_runs
    out = tmp_path / "cmp.png"
    assert main(["plot", "compare", "--run", str(rnn), "--run", str(tf),
                 "--label", "RNN", "--label", "Transformer", "-o", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == [str(out)]
    assert_png(out)
    with pytest.raises(SystemExit, match="one --run"):
        main(["plot", "curves", "--run", str(rnn), "--run", str(tf)])
    with pytest.raises(SystemExit, match="--label names the runs"):
        main(["plot", "curves", "--run", str(rnn), "--label", "x"])
    assert main(["plot", "compare", "--run", str(rnn)]) != 0
    assert "plot compare needs two or more --run" in capsys.readouterr().err
