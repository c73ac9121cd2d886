"""The seed's first example: a Transformer learns to copy its input exactly."""

from nmtkit.config import load
from nmtkit.train.loop import Trainer

from .conftest import ROOT


def test_copy_task_is_learned(tmp_path):
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               ["train.max_steps=600", "data.copy_train_size=12000", "train.keep_last=0"])
    trainer = Trainer(cfg, tmp_path)
    result = trainer.run()
    assert result["valid_bleu"] == 100.0
    tr = trainer.bundle().translator()
    lines = ["1 2 3 4 5 6 7 8 9 10", "3 3 7 1 9 2 2 8 5 4", "10 9 8 7 6 5 4 3 2 1"]
    assert tr.translate_lines(lines, beam=1) == lines
    assert tr.translate_lines(lines, beam=4) == lines
