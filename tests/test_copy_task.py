"""The seed's first example: a Transformer learns to copy its input.

What is asserted holds on every CPU of this machine kind (AVX2 or AVX-512, oneDNN's
paths, any thread count): those change the float rounding of every step, so a 600-step
run lands on slightly different weights, and one in a few hundred copied symbols can
flip (a 99.64 BLEU run on one host, 100.0 on another), or one sentence end early. So the
test asks for what "learned to copy" means as bounds, not for one host's exact numbers.
"""

import pytest

from nmtkit.config import load
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import ROOT

pytestmark = [pytest.mark.numerics, pytest.mark.slow]  # slow: not in the fast tier

EXAMPLES = ["1 2 3 4 5 6 7 8 9 10", "3 3 7 1 9 2 2 8 5 4", "10 9 8 7 6 5 4 3 2 1"]


def symbols_right(hyp: str, ref: str) -> int:
    return sum(a == b for a, b in zip(hyp.split(), ref.split(), strict=False))


def test_copy_task_is_learned(tmp_path):
    # One thread: the result then does not depend on what earlier tests left torch set to.
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               ["train.max_steps=600", "data.copy_train_size=12000", "train.keep_last=0",
                "train.threads=1"])
    trainer = Trainer(cfg, tmp_path)
    result = trainer.run()
    assert result["valid_bleu"] >= 99.0
    assert result["valid_loss"] < 0.05
    tr = Translator.from_bundle(trainer.bundle())
    valid = trainer.data.valid_text.src
    hyps = tr.translate_lines(valid, beam=1)
    # Lengths are right for all but at most 1% of the sentences: on a 2-core Intel AVX-512
    # host one of the 200 stops after four symbols (the same with the code of 92a5404).
    same_length = sum(len(h.split()) == len(s.split()) for h, s in zip(hyps, valid, strict=True))
    assert same_length >= 0.99 * len(valid), same_length
    assert sum(h == s for h, s in zip(hyps, valid, strict=True)) >= 0.95 * len(valid)
    for beam in (1, 4):
        out = tr.translate_lines(EXAMPLES, beam=beam)
        assert sum(symbols_right(h, s) for h, s in zip(out, EXAMPLES, strict=True)) >= 28, out
        assert sum(h == s for h, s in zip(out, EXAMPLES, strict=True)) >= 2, out
