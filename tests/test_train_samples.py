"""train.sample_every / train.samples: fixed validation sentences translated at validations,
into the log and appended to <run>/samples.txt (issue 14, item 3)."""

import logging

import pytest

from nmtkit.config import load
from nmtkit.data.corpora import load_parallel
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"


def test_validations_print_and_append_samples(tmp_path, caplog):
    cfg = load(COPY, tiny_copy_overrides(steps=30) + ["train.samples=2", "train.sample_every=2"])
    trainer = Trainer(cfg, tmp_path)
    with caplog.at_level(logging.INFO, logger="nmtkit"):
        trainer.run()
    # Validations at steps 10, 20 and 30: every 2nd one shows the samples.
    path = tmp_path / "samples.txt"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("== step 20, epoch ") and text.count("== step") == 1
    valid = load_parallel(cfg.data, cfg.data.valid)
    lines = text.splitlines()
    for i in (1, 2):  # the first two validation sentences, each as source / reference / hypothesis
        assert lines[3 * i - 2] == f"[{i}] src: {valid.src[i - 1]}"
        assert lines[3 * i - 1] == f"[{i}] ref: {valid.tgt[i - 1]}"
        assert lines[3 * i].startswith(f"[{i}] hyp:")
        assert lines[3 * i] in caplog.text  # the same lines go to the log
    assert "[3] src:" not in text
    # The next time (here called directly) appends under its own header; the hypotheses are
    # the model's greedy translations.
    trainer.cfg.train.sample_every = 1
    samples = trainer.write_samples()
    hyps = Translator.from_bundle(trainer.bundle(), fast=False).translate_lines(valid.src[:2], beam=1)
    assert [h for _, _, h in samples] == hyps
    text = path.read_text(encoding="utf-8")
    assert text.count("== step") == 2 and text.startswith("== step 20,")
    assert "== step 30, epoch" in text and text.endswith(f"[2] hyp: {hyps[1]}\n\n")


def test_sample_every_zero_writes_nothing_and_overwrite_removes_the_file(tmp_path):
    cfg = load(COPY, tiny_copy_overrides(steps=10) + ["train.sample_every=0"])
    Trainer(cfg, tmp_path / "off").run()
    assert not (tmp_path / "off" / "samples.txt").exists()
    Trainer(load(COPY, tiny_copy_overrides(steps=10)), tmp_path / "on").run()
    assert (tmp_path / "on" / "samples.txt").read_text(encoding="utf-8").count("[3] hyp:") == 1
    # a fresh run: the old samples go too
    Trainer(cfg, tmp_path / "on", Start.scratch(overwrite=True))
    assert not (tmp_path / "on" / "samples.txt").exists()
