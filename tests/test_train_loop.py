"""The training loop's guards (issue "Reliability II", items 1 and 5): no endless loop on an
empty training split, an exact resume after Ctrl-C, a finished run is not trained further,
and a fresh run never mixes with an earlier run's files."""

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.cli import main as cli_main
from nmtkit.config import load
from nmtkit.train.loop import Trainer
from nmtkit.train.start import SCRATCH, Start
from nmtkit.train.step import TrainingError

from .helpers import ROOT, make_cfg, run_until_ctrl_c, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


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
    run_until_ctrl_c(monkeypatch, interrupted, 23)  # Ctrl-C arrives during the 23rd update
    resumed = Trainer(make_cfg(30), tmp_path / "b", Start.resume())
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
    again = Trainer(make_cfg(10), tmp_path, Start.resume())
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
    Trainer(make_cfg(10, ["train.seed=7"]), tmp_path, Start.scratch(overwrite=True)).run()
    assert (tmp_path / "best.pt").read_bytes() != before
    assert len(list(tmp_path.glob("step_*.pt"))) == 1


def fp16_trainer(steps, run_dir, start=SCRATCH):
    """``train.amp: fp16`` on the CPU, with a loss scale so large that the gradients overflow
    (the scaler must back off) and a short growth interval (it must grow again), so that
    both sides of the scaler run in a few steps. A resumed run takes both from its checkpoint."""
    trainer = Trainer(make_cfg(steps, ["train.amp=fp16"]), run_dir, start)
    assert trainer.updater.scaler.is_enabled() and trainer.updater.autocast().fast_dtype == torch.float16
    if not start.resumes:
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24, growth_interval=4)
        trainer.updater.scaler = scaler
    return trainer


def test_fp16_scales_the_loss_and_resumes_exactly(tmp_path, monkeypatch, caplog):
    straight = fp16_trainer(30, tmp_path / "a")
    with caplog.at_level("INFO", logger="nmtkit.train"):
        straight.run()
    overflows = [r.getMessage() for r in caplog.records if "overflowed" in r.getMessage()]
    assert overflows, "the scaler never backed off"
    assert straight.updater.scaler.get_scale() < 2.0 ** 24
    saved = load_checkpoint(tmp_path / "a" / "last.pt")["scaler"]
    assert saved == straight.updater.scaler.state_dict() and saved["growth_interval"] == 4

    interrupted = fp16_trainer(30, tmp_path / "b")
    run_until_ctrl_c(monkeypatch, interrupted, 23)
    resumed = fp16_trainer(30, tmp_path / "b", Start.resume())
    assert resumed.progress.step == 22
    assert resumed.updater.scaler.state_dict() == load_checkpoint(tmp_path / "b" / "last.pt")["scaler"]
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    assert resumed.updater.scaler.state_dict() == straight.updater.scaler.state_dict()


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from nmtkit.viz.attention import attention_image  # what the command line passes in

    trainer = Trainer(make_cfg(20, ["train.tensorboard=true", "train.log_every=5"]), tmp_path,
                      attention_image=attention_image)
    trainer.run()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/tokens_per_s", "valid/loss", "valid/ppl",
            "valid/bleu"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
    valid = [(e.step, e.value) for e in events.Scalars("valid/loss")]
    assert valid == [(r["step"], pytest.approx(r["valid_loss"], abs=1e-4))
                     for r in trainer.progress.history]
    assert [e.step for e in events.Scalars("valid/bleu")] == [10, 20]
    # Each validation: the sample translations as a Markdown table, an attention image.
    text = tmp_path / "tensorboard"
    from tensorboard.backend.event_processing.plugin_event_accumulator import (
        EventAccumulator as PluginEvents,
    )
    plugin = PluginEvents(str(text))
    plugin.Reload()
    texts = plugin.Tensors("valid/samples/text_summary")
    assert [e.step for e in texts] == [10, 20]
    table = texts[-1].tensor_proto.string_val[0].decode()
    assert table.startswith("| # | source | reference | hypothesis |")
    assert trainer.data.valid_text.src[0].split()[0] in table
    images = events.Images("valid/attention")
    assert [e.step for e in images] == [10, 20]
    assert images[-1].width > 50 and images[-1].height > 50
    # The image's decoding packed the weights (nmtkit.fast) for itself only: a pack left in
    # place would go stale under the fused optimizer and decode the next validation with it.
    assert not any(type(m).__name__.startswith("Packed") for m in trainer.model.modules())
    # A fresh run over it (--overwrite) does not mix with the old events.
    Trainer(make_cfg(10, ["train.tensorboard=true"]), tmp_path, Start.scratch(overwrite=True)).run()
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 1


@pytest.mark.parametrize("lowercase", [False, True])
def test_a_lowercased_model_is_validated_by_lowercased_bleu(tmp_path, monkeypatch, lowercase):
    # Its output has no capitals: cased BLEU would choose best.pt for the case it never
    # learnt, so validation reads bleu_lc_tok instead.
    cfg = make_cfg(5, [f"data.lowercase={str(lowercase).lower()}"])
    trainer = Trainer(cfg, tmp_path / "run")
    monkeypatch.setattr("nmtkit.train.validate.score",
                        lambda hyps, refs: {"bleu": 11.0, "bleu_lc_tok": 22.0})
    assert trainer.validate()["valid_bleu"] == (22.0 if lowercase else 11.0)
