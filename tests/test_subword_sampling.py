"""Subword regularisation (data.subword_alpha / data.subword_nbest): BPE-dropout and unigram
sampling of the training split, one segmentation per epoch, seeded by (train.seed, epoch)."""

import dataclasses

import numpy as np
import pytest
import torch

from nmtkit.checkpoint import load_bundle
from nmtkit.config import ConfigError, DataConfig, load
from nmtkit.data.corpora import Parallel
from nmtkit.data.prepare import build_vocabularies, encode_parallel, pairs_of
from nmtkit.data.subword_sampling import SubwordSampler, epoch_seed
from nmtkit.data.tokenizers import SentencePieceTokenizer
from nmtkit.data.vocab import UNK
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, tiny_copy_overrides

SUBJECTS = [("ein mann", "a man"), ("eine frau", "a woman"), ("zwei hunde", "two dogs"),
            ("ein kind", "a child"), ("drei männer", "three men")]
VERBS = [("spielt", "plays"), ("läuft", "runs"), ("schläft", "sleeps"), ("sitzt", "sits")]
PLACES = [("im park", "in the park"), ("auf der straße", "on the street"),
          ("im schnee", "in the snow")]


def corpus() -> Parallel:
    """60 small German-English pairs (every subject, verb, place)."""
    pairs = [(f"{s} {v} {p}", f"{se} {ve} {pe}") for s, se in SUBJECTS for v, ve in VERBS
             for p, pe in PLACES]
    return Parallel([s for s, _ in pairs], [t for _, t in pairs], "toy")


def data_cfg(**kw) -> DataConfig:
    base = {"corpus": "parallel", "tokenizer": "sentencepiece", "vocab_size": 60,
            "subword_alpha": 0.3, **kw}
    return DataConfig(**base)


def segmentations(sampler: SubwordSampler, epoch: int) -> list[list[str]]:
    ids = sampler.ids(epoch)
    vocab = sampler.vocabs.src_vocab
    return [vocab.decode(ids.source(i)) for i in range(len(ids))]


@pytest.fixture(scope="module")
def bpe():
    cfg = data_cfg()
    par = corpus()
    return cfg, par, build_vocabularies(cfg, pairs_of(par))


def test_epochs_differ_the_same_seed_repeats_and_every_rank_agrees(bpe):
    cfg, par, vocabs = bpe
    sampler = SubwordSampler(cfg, par, vocabs, seed=1)
    first, second = segmentations(sampler, 0), segmentations(sampler, 1)
    assert first != second
    # Some sentence is cut differently, into pieces of the same text.
    changed = [i for i in range(len(par)) if first[i] != second[i]]
    assert changed and all("".join(first[i]) == "".join(second[i]) for i in changed)
    # Another process (a resumed run, another torchrun rank) draws the same, whatever was
    # drawn before it: the seed is set from (train.seed, epoch) before each epoch.
    other = SubwordSampler(cfg, par, vocabs, seed=1)
    other.ids(5)
    assert segmentations(other, 1) == second and segmentations(other, 0) == first
    assert segmentations(SubwordSampler(cfg, par, vocabs, seed=2), 1) != second
    assert epoch_seed(1, 1) == epoch_seed(1, 1) != epoch_seed(1, 2) != epoch_seed(2, 1)
    assert 0 <= epoch_seed(1, 1) < 2 ** 32
    # Sampled pieces are all in the vocabulary: no <unk>.
    assert not np.any(np.asarray(sampler.ids(1).src_tokens) == UNK)
    assert not np.any(np.asarray(sampler.ids(1).tgt_tokens) == UNK)


def test_sampling_splits_more_and_leaves_the_deterministic_tokenizer_alone(bpe):
    cfg, par, vocabs = bpe
    plain = encode_parallel(cfg, par, vocabs, drop_long=True)
    tok = vocabs.src_tok
    assert isinstance(tok, SentencePieceTokenizer)
    text = par.src[0]
    before = tok.encode(text)
    sampler = SubwordSampler(cfg, par, vocabs, seed=1)
    sampled = sampler.ids(0)
    assert len(sampled.src_tokens) > len(plain.src_tokens)  # merges dropped: more pieces
    # Decoding, validation and the checkpoint's tokenizer: the deterministic segmentation.
    assert tok.encode(text) == before == tok.encode(text)
    assert sampler.vocabs.src_tok.state() == tok.state()
    again = encode_parallel(cfg, par, vocabs, drop_long=True)
    assert np.array_equal(again.src_tokens, plain.src_tokens)


def test_alpha_zero_changes_nothing():
    par = corpus()
    off = data_cfg(subword_alpha=0.0)
    vocabs = build_vocabularies(off, pairs_of(par))
    seen = {p for s, t in zip(par.src, par.tgt, strict=True)
            for p in vocabs.src_tok.encode(s) + vocabs.tgt_tok.encode(t)}
    # only the pieces the corpus uses, as before, and data.byte_fallback's byte pieces
    assert set(vocabs.src_vocab.itos[4:]) == seen | set(vocabs.src_tok.byte_pieces())
    on = build_vocabularies(data_cfg(), pairs_of(par))
    tok = on.src_tok
    assert isinstance(tok, SentencePieceTokenizer)
    assert set(on.src_vocab.itos[4:]) == set(tok.pieces()) - {"<unk>"}  # every piece, for sampling
    assert on.src_vocab.itos[:len(vocabs.src_vocab)] == vocabs.src_vocab.itos  # seen ones first


@pytest.mark.slow
def test_unigram_samples_among_the_n_best():
    par = corpus()
    cfg = data_cfg(spm_model_type="unigram", subword_alpha=0.5, subword_nbest=2)
    vocabs = build_vocabularies(cfg, pairs_of(par))
    two = SubwordSampler(cfg, par, vocabs, seed=1)
    variants = [{tuple(segmentations(two, e)[i]) for e in range(8)} for i in range(len(par))]
    assert max(len(v) for v in variants) == 2
    every = SubwordSampler(dataclasses.replace(cfg, subword_nbest=-1, subword_alpha=0.1), par,
                           vocabs, seed=1)
    variants = [{tuple(segmentations(every, e)[i]) for e in range(8)} for i in range(len(par))]
    assert max(len(v) for v in variants) > 2


@pytest.mark.parametrize("kw,msg", [
    ({"tokenizer": "whitespace"}, "needs data.tokenizer: sentencepiece"),
    ({"mmap": True}, "needs data.mmap: false"),
    ({"subword_alpha": 1.0}, r"BPE-dropout probability, in \[0, 1\)"),
    ({"subword_alpha": -0.1}, r"BPE-dropout probability"),
    ({"subword_nbest": 4}, "subword_nbest applies to spm_model_type: unigram"),
    ({"subword_nbest": 1, "spm_model_type": "unigram"}, "subword_nbest must be -1"),
    ({"subword_nbest": 0, "subword_alpha": 0.0}, "subword_nbest must be -1"),
    ({"spm_model_type": "unigram", "subword_alpha": 1.5}, "smoothing exponent"),
])
def test_bad_settings_are_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        data_cfg(**kw).validate("<test>")
    data_cfg(spm_model_type="unigram", subword_alpha=1.0, subword_nbest=8).validate("<test>")


# --- a tiny training run --------------------------------------------------------------------


def train_cfg(tmp_path, steps, extra=()):
    par = corpus()
    for lang, lines in (("de", par.src), ("en", par.tgt)):
        (tmp_path / f"train.{lang}").write_text("".join(x + "\n" for x in lines))
        (tmp_path / f"val.{lang}").write_text("".join(x + "\n" for x in lines[:4]))
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps) + [
        "data.corpus=parallel", f"data.train={tmp_path / 'train'}", f"data.valid={tmp_path / 'val'}",
        "data.src_lang=de", "data.tgt_lang=en", "data.tokenizer=sentencepiece",
        "data.vocab_size=60", "data.subword_alpha=0.2", "train.valid_every=5", *extra])


@pytest.mark.slow
def test_training_with_bpe_dropout_runs_and_resumes_exactly(tmp_path, monkeypatch):
    # How many batches an epoch holds depends on the sampled segmentations (and so on the
    # host's sentencepiece build): the test counts them instead of assuming a number.
    straight = Trainer(train_cfg(tmp_path, 24), tmp_path / "a")
    assert straight.data.sampler is not None
    epochs, drawn_after = [], []  # epoch of each segmentation drawn; updates done before it
    real_ids, real_update, calls = SubwordSampler.ids, Trainer._update, {"n": 0}

    def note(self, epoch):
        epochs.append(epoch)
        drawn_after.append(calls["n"])
        return real_ids(self, epoch)

    def counted_update(self, group):
        calls["n"] += 1
        return real_update(self, group)

    monkeypatch.setattr(SubwordSampler, "ids", note)
    monkeypatch.setattr(Trainer, "_update", counted_update)
    straight.run()
    assert straight.progress.epoch >= 2 and epochs == list(range(straight.progress.epoch + 1))
    first_epoch = drawn_after[1]  # updates in epoch 0
    assert 0 < first_epoch < 24

    interrupted = Trainer(train_cfg(tmp_path, 24), tmp_path / "b")
    calls["n"] = 0

    def update_then_ctrl_c(self, group):
        calls["n"] += 1
        if calls["n"] == first_epoch + 2:  # the second update of the second epoch
            raise KeyboardInterrupt
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "_update", update_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        interrupted.run()
    monkeypatch.setattr(Trainer, "_update", real_update)
    resumed = Trainer(train_cfg(tmp_path, 24), tmp_path / "b", Start.resume())
    assert resumed.progress.step == first_epoch + 1 and resumed.progress.epoch == 1
    resumed.run()
    assert resumed.progress.step == straight.progress.step == 24
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k

    # The checkpoint holds the deterministic tokenizer: translation segments as always.
    bundle = load_bundle(tmp_path / "a" / "best.pt")
    assert isinstance(bundle.src_tok, SentencePieceTokenizer)
    text = corpus().src[0]
    assert bundle.src_tok.encode(text) == straight.data.vocabs.src_tok.encode(text)
    assert np.array_equal(
        straight.data.valid_ids.src_tokens,
        encode_parallel(straight.cfg.data, straight.data.valid_text, straight.data.vocabs, False).src_tokens)


@pytest.mark.slow
def test_training_without_sampling_keeps_one_segmentation(tmp_path):
    trainer = Trainer(train_cfg(tmp_path, 2, ["data.subword_alpha=0"]), tmp_path / "r")
    assert trainer.data.sampler is None
    ids = trainer.data.train_ids
    trainer.run()
    assert trainer.data.train_ids is ids
