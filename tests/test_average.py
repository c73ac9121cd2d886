"""train/average.py: the paper's checkpoint averaging (Sec. 6.1)."""

import pytest
import torch

from nmtkit.checkpoint import CheckpointError, load_bundle, load_checkpoint
from nmtkit.decode.translator import Translator
from nmtkit.train.average import average_checkpoints
from nmtkit.train.loop import Trainer

from .helpers import make_cfg

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    run = tmp_path_factory.mktemp("average")
    Trainer(make_cfg(30), run).run()  # valid_every 10, keep_last 3: steps 10, 20, 30
    return sorted(run.glob("step_*.pt"))


def test_mean_of_weights_and_what_is_kept(steps, tmp_path):
    out = tmp_path / "avg.pt"
    average_checkpoints(steps, out)
    avg, parts = load_checkpoint(out), [load_checkpoint(p) for p in steps]
    for k, v in avg["model"].items():
        want = sum(p["model"][k].double() for p in parts) / len(parts)
        assert torch.allclose(v.double(), want, atol=1e-6), k
    assert all("optimizer" not in p for p in parts)  # step files: weights only (release)
    assert "optimizer" not in avg and "rng" not in avg and "step" not in avg
    assert avg["averaged_from"] == [str(p) for p in steps]
    assert avg["config"] == parts[-1]["config"] and avg["vocab"] == parts[-1]["vocab"]
    assert Translator.from_bundle(load_bundle(out)).translate_lines(["1 2 3"], beam=1)[0] is not None


def test_refusals(steps, tmp_path):
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([], tmp_path / "x.pt")
    other_run = tmp_path / "other"
    Trainer(make_cfg(10, ["model.d_ff=128"]), other_run).run()
    with pytest.raises(CheckpointError, match="architecture or vocabulary differs"):
        average_checkpoints([steps[0], other_run / "last.pt"], tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
