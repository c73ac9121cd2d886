"""The training loop's guards (issue "Reliability II", items 1 and 5): no endless loop on an
empty training split, an exact resume after Ctrl-C, a finished run is not trained further,
and a fresh run never mixes with an earlier run's files."""

import pytest
import torch

from nmtkit.cli import main as cli_main
from nmtkit.config import load
from nmtkit.train.loop import Trainer, TrainingError

from .conftest import ROOT, tiny_copy_overrides


def make_cfg(steps=20, extra=()):
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps) + list(extra))


def parallel_cfg(tmp_path, src_lines, tgt_lines, extra=()):
    for lang, lines in (("de", src_lines), ("en", tgt_lines)):
        (tmp_path / f"train.{lang}").write_text("".join(x + "\n" for x in lines))
        (tmp_path / f"val.{lang}").write_text("a b\n")
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(5) + [
        "data.corpus=parallel", f"data.train={tmp_path / 'train'}", f"data.valid={tmp_path / 'val'}",
        "data.src_lang=de", "data.tgt_lang=en", "data.min_freq=1", *extra])


@pytest.mark.parametrize("case", ["blank", "too_long"])
def test_no_usable_training_pair_is_an_error_not_a_hang(tmp_path, case):
    if case == "blank":
        cfg = parallel_cfg(tmp_path, ["", "  ", "x"], ["y", "", ""])
        expected = r"no training pairs left after filtering \(3 with an empty side"
    else:
        cfg = parallel_cfg(tmp_path, ["a b c", "d e"], ["a b", "c d e"], ["data.max_len=1"])
        expected = r"no training pairs left.*longer than data.max_len=1"
    run = tmp_path / "run"
    with pytest.raises(TrainingError, match=expected):
        Trainer(cfg, run)
    assert not run.exists()  # a data error leaves no run directory behind


def test_cli_reports_training_errors_in_one_line(tmp_path, capsys):
    parallel_cfg(tmp_path, ["", ""], ["y", "z"])
    sets = tiny_copy_overrides(5) + [
        "data.corpus=parallel", f"data.train={tmp_path / 'train'}", f"data.valid={tmp_path / 'val'}",
        "data.src_lang=de", "data.tgt_lang=en", "data.min_freq=1"]
    args = ["train", str(ROOT / "configs" / "copy_task.yaml"), "--run-dir", str(tmp_path / "r")]
    for s in sets:
        args += ["--set", s]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "nmtkit: error:" in err and "no training pairs left" in err
    assert "Traceback" not in err


def test_interrupt_inside_an_update_resumes_exactly(tmp_path, monkeypatch):
    straight = Trainer(make_cfg(30), tmp_path / "a")
    straight.run()
    interrupted = Trainer(make_cfg(30), tmp_path / "b")
    real_update, calls = Trainer._update, {"n": 0}

    def update_then_ctrl_c(self, group):
        calls["n"] += 1
        if calls["n"] == 23:  # Ctrl-C arrives during the 23rd update
            raise KeyboardInterrupt
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "_update", update_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        interrupted.run()
    monkeypatch.setattr(Trainer, "_update", real_update)
    resumed = Trainer(make_cfg(30), tmp_path / "b", resume=True)
    assert resumed.progress.step == 22
    at_22 = Trainer(make_cfg(22), tmp_path / "c")
    at_22.run()
    assert resumed.progress.batch_in_epoch == at_22.progress.batch_in_epoch
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_resuming_a_finished_run_trains_no_further(tmp_path):
    first = Trainer(make_cfg(10), tmp_path)
    first.run()
    again = Trainer(make_cfg(10), tmp_path, resume=True)
    result = again.run()
    assert result["step"] == 10 and again.progress.step == 10
    for k, v in first.model.state_dict().items():
        assert torch.equal(v, again.model.state_dict()[k]), k


def test_a_fresh_run_never_mixes_with_an_earlier_one(tmp_path):
    Trainer(make_cfg(10), tmp_path).run()
    before = (tmp_path / "best.pt").read_bytes()
    with pytest.raises(ValueError, match="--resume.*--overwrite"):
        Trainer(make_cfg(10), tmp_path)
    assert (tmp_path / "best.pt").read_bytes() == before
    Trainer(make_cfg(10, ["train.seed=7"]), tmp_path, overwrite=True).run()
    assert (tmp_path / "best.pt").read_bytes() != before
    assert len(list(tmp_path.glob("step_*.pt"))) == 1
