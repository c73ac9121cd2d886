"""nmtkit.train.tensorboard: the sample table and the attention image of each validation."""

from __future__ import annotations

import pytest
import torch

from nmtkit.decode.translator import Translator
from nmtkit.train import tensorboard
from nmtkit.train.loop import Trainer

from .helpers import make_cfg


def test_samples_markdown_is_one_row_per_sentence_with_pipes_escaped():
    table = tensorboard.samples_markdown([("a | b", "ref", "hyp\nnext"), ("", "r", "h")])
    lines = table.splitlines()
    assert lines[0] == "| # | source | reference | hypothesis |"
    assert lines[2] == "| 1 | a \\| b | ref | hyp next |"
    assert lines[3] == "| 2 |   | r | h |"  # an empty cell stays a cell
    assert len(lines) == 4


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    trainer = Trainer(make_cfg(10), tmp_path_factory.mktemp("run"))
    trainer.run()
    trainer.model.eval()
    return trainer.bundle()


@pytest.mark.slow
def test_the_figures_attention_image_is_an_rgb_picture(bundle):
    pytest.importorskip("matplotlib")
    from nmtkit.viz.attention import attention_image

    img = attention_image(bundle, "3 4 5 6")
    assert img.dim() == 3 and img.size(0) == 3 and img.size(1) > 50 and img.size(2) > 50
    assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0 and float(img.std()) > 0


@pytest.mark.slow
def test_the_grey_map_without_a_drawing_is_the_last_layers_mean_source_attention(bundle):
    from nmtkit.decode.sentence_attention import sentence_attention

    img = tensorboard.grey_attention_image(bundle, "3 4 5 6")
    att = sentence_attention(Translator.from_bundle(bundle), "3 4 5 6", model=bundle.model, beam=1)
    w = att.maps["decoder_src"][-1].mean(0)  # (T, S)
    assert img.shape == (3, *w.shape)
    torch.testing.assert_close(img[0], w / w.max())
    assert torch.equal(img[0], img[2])


@pytest.mark.slow
def test_a_failing_image_is_only_a_warning(bundle, caplog):
    class Writer:
        def add_image(self, *a):
            raise RuntimeError("disk full")

    tensorboard.log_attention(Writer(), bundle, "3 4 5", step=1)
    assert "attention image not written: disk full" in caplog.text

    def broken_drawing(bundle, text, tgt_lang):
        raise ValueError("no canvas")

    class Collecting:
        def add_image(self, *a):
            raise AssertionError("nothing to add")

    tensorboard.log_attention(Collecting(), bundle, "3 4 5", step=1, image=broken_drawing)
    assert "attention image not written: no canvas" in caplog.text


def test_the_command_line_passes_the_figures_drawing_in():
    """Training never imports the figures: ``nmtkit train`` hands it the heatmap."""
    pytest.importorskip("matplotlib")
    from nmtkit.cli.train import attention_image_callback
    from nmtkit.viz.attention import attention_image

    assert attention_image_callback() is attention_image
