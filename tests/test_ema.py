"""``train.ema`` (issue 16, item 6): an exponential moving average of the weights, which
validation scores and every checkpoint (``best.pt`` included) holds; ``--resume`` is exact."""

import pytest
import torch

from nmtkit.checkpoint import load_bundle, load_checkpoint
from nmtkit.config import load
from nmtkit.train.ema import WeightAverage
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, tiny_copy_overrides


def make_cfg(steps, extra=()):
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps) + [
        "train.ema=0.9", "train.early_stop_metric=loss", "train.keep_last=5", *extra])


def test_the_average_follows_the_formula():
    w = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        w.weight.fill_(0.0)
    ema = WeightAverage(w, decay=0.9)
    with torch.no_grad():
        w.weight.fill_(1.0)
    ema.update(1)  # d_1 = min(0.9, 2 / 11)
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 9 / 11))
    ema.update(100)  # d_100 = 0.9
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 0.9 * 9 / 11 + 0.1))
    with ema.applied():
        assert torch.equal(w.weight, ema.shadow[0])
    assert torch.equal(w.weight, torch.ones(1, 2))


@pytest.mark.slow
def test_checkpoints_hold_the_average_that_validation_scored(tmp_path):
    trainer = Trainer(make_cfg(30), tmp_path)
    trainer.run()
    last = load_checkpoint(tmp_path / "last.pt")
    raw, averaged = trainer.model.state_dict(), trainer.updater.ema.state_dict()
    weights = {n for n, _ in trainer.model.named_parameters(remove_duplicate=False)}
    for k in weights:
        assert torch.equal(last["train_model"][k], raw[k]), k
        assert torch.equal(last["model"][k], averaged[k]), k
        assert not torch.equal(averaged[k], raw[k]), k  # the average is not the weights
    # best.pt holds the average of its step, and that is what validation scored there.
    # (best.pt is a release checkpoint: the average alone, no train_model.)
    best = load_checkpoint(tmp_path / "best.pt")
    step = best["step"]
    assert "train_model" not in best
    row = next(r for r in trainer.progress.history if r["step"] == step)
    kept = load_checkpoint(tmp_path / f"step_{step:08d}.pt")
    assert all(torch.equal(best["model"][k], kept["model"][k]) for k in weights)
    trainer.model.load_state_dict(best["model"])
    assert round(trainer.validate()["valid_loss"], 4) == row["valid_loss"]
    # Readers load the average as the model.
    bundle = load_bundle(tmp_path / "best.pt")
    assert all(torch.equal(bundle.model.state_dict()[k], best["model"][k]) for k in weights)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False])
def test_resume_with_an_average_is_exact(tmp_path, tied):
    extra = [] if tied else ["model.tie_output=false", "model.tie_all=false"]
    straight = Trainer(make_cfg(30, extra), tmp_path / "a")
    straight.run()
    Trainer(make_cfg(20, extra), tmp_path / "b").run()
    resumed = Trainer(make_cfg(30, extra), tmp_path / "b", Start.resume())
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    for k, v in straight.updater.ema.state_dict().items():
        assert torch.equal(v, resumed.updater.ema.state_dict()[k]), k
