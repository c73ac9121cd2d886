"""data/prepare.py: corpora -> tokenizers -> vocabularies -> token ids, on tiny data."""

from __future__ import annotations

import io
import logging

import numpy as np
import torch

from nmtkit.config import DataConfig
from nmtkit.data.corpora import Parallel
from nmtkit.data.prepare import (
    build_vocabularies,
    encode_pairs,
    encode_parallel,
    load_split,
    pairs_of,
    sample_pairs,
    vocab_from_state,
    vocab_state,
)
from nmtkit.data.vocab import EOS, SPECIALS, UNK

from .helpers import PAR, whitespace_cfg


def test_pairs_of_gives_a_fresh_pass_each_call():
    pairs = pairs_of(PAR)
    assert list(pairs()) == list(pairs()) == list(zip(PAR.src, PAR.tgt, strict=True))


def test_sample_pairs_is_uniform_seeded_and_in_corpus_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    src, tgt = sample_pairs(iter(pairs), 10)
    assert len(src) == len(tgt) == 10
    assert [int(s[1:]) for s in src] == sorted(int(s[1:]) for s in src)  # corpus order
    assert [s[1:] for s in src] == [t[1:] for t in tgt]  # still pairs
    assert sample_pairs(iter(pairs), 10) == (src, tgt)  # the same sample every time
    assert sample_pairs(iter(pairs), 10, seed=1) != (src, tgt)
    assert max(int(s[1:]) for s in src) >= 100  # not just the first ten
    assert sample_pairs(iter(pairs[:3]), 0) == (["s0", "s1", "s2"], ["t0", "t1", "t2"])
    assert sample_pairs(iter(pairs[:3]), 5) == (["s0", "s1", "s2"], ["t0", "t1", "t2"])


def test_separate_vocabularies_keep_types_seen_min_freq_times():
    v = build_vocabularies(whitespace_cfg(joint_vocab=False, min_freq=2), pairs_of(PAR))
    assert v.src_vocab.itos == SPECIALS + ["a", "b"]  # a x3, b x2; c, d, e once
    assert v.tgt_vocab.itos == SPECIALS + ["x", "w", "y"]  # x x3; w, y x2 (ties by string)
    assert v.src_tok.encode("a  b") == ["a", "b"]


def test_joint_vocabulary_counts_both_sides():
    v = build_vocabularies(whitespace_cfg(joint_vocab=True, min_freq=1), pairs_of(PAR))
    assert v.src_vocab is v.tgt_vocab
    assert v.src_vocab.itos == SPECIALS + ["a", "x", "b", "w", "y", "c", "d", "e", "z"]


def test_vocabulary_counts_every_pair_not_only_the_tokenizer_sample():
    v = build_vocabularies(whitespace_cfg(joint_vocab=False, min_freq=1, tokenizer_sample=1),
                           pairs_of(PAR))
    assert v.src_vocab.itos == SPECIALS + ["a", "b", "c", "d", "e"]


def test_copy_task_keeps_every_symbol_whatever_min_freq():
    cfg = DataConfig(corpus="copy", tokenizer="whitespace", joint_vocab=True, min_freq=5)
    v = build_vocabularies(cfg, pairs_of(Parallel(["1 2", "3"], ["1 2", "3"], "copy")))
    assert sorted(v.src_vocab.itos[4:]) == ["1", "2", "3"]


def test_encode_pairs_ends_sources_with_eos_and_maps_unknowns():
    cfg = whitespace_cfg(joint_vocab=False, min_freq=2)
    v = build_vocabularies(cfg, pairs_of(PAR))
    got = list(encode_pairs(cfg, [("a b c", "x y z"), ("e", "")], v, False, "t"))
    a, b = v.src_vocab.stoi["a"], v.src_vocab.stoi["b"]
    x, y = v.tgt_vocab.stoi["x"], v.tgt_vocab.stoi["y"]
    assert [s.tolist() for s, _ in got] == [[a, b, UNK, EOS], [UNK, EOS]]
    assert [t.tolist() for _, t in got] == [[x, y, UNK], []]  # no BOS/EOS on targets
    assert all(s.dtype == np.int64 and t.dtype == np.int64 for s, t in got)


def test_reverse_source_reverses_tokens_but_keeps_eos_last():
    cfg = whitespace_cfg(joint_vocab=False, min_freq=1, reverse_source=True)
    v = build_vocabularies(cfg, pairs_of(PAR))
    (s, t), = encode_pairs(cfg, [("a b c", "x y")], v, False, "t")
    assert v.src_vocab.decode(s, strip_special=False) == ["c", "b", "a", "</s>"]
    assert v.tgt_vocab.decode(t) == ["x", "y"]


def test_long_pairs_are_dropped_in_training_and_truncated_otherwise(caplog):
    cfg = whitespace_cfg(joint_vocab=True, min_freq=1, max_len=2)
    v = build_vocabularies(cfg, pairs_of(PAR))
    pairs = [("a b", "x"), ("a b c", "x"), ("a", "x y z"), ("d", "w")]
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.prepare"):
        kept = list(encode_pairs(cfg, pairs, v, True, "train"))
    assert [v.src_vocab.decode(s) for s, _ in kept] == [["a", "b"], ["d"]]
    assert "train: skipped 2 of 4 pairs longer than data.max_len=2" in caplog.text
    cut = list(encode_pairs(cfg, pairs, v, False, "test"))
    assert len(cut) == 4
    assert v.src_vocab.decode(cut[1][0]) == ["a", "b"] and v.tgt_vocab.decode(cut[2][1]) == ["x", "y"]


def test_encode_parallel_holds_the_same_ids_as_encode_pairs():
    cfg = whitespace_cfg(joint_vocab=False, min_freq=1)
    v = build_vocabularies(cfg, pairs_of(PAR))
    ids = encode_parallel(cfg, PAR, v, drop_long=True)
    expected = list(encode_pairs(cfg, pairs_of(PAR)(), v, True, "tiny"))
    assert len(ids) == len(PAR) == len(expected)
    for i, (s, t) in enumerate(expected):
        assert ids.source(i).tolist() == s.tolist() and ids.target(i).tolist() == t.tolist()


def test_vocab_state_round_trips_through_a_weights_only_load():
    v = build_vocabularies(whitespace_cfg(joint_vocab=False, min_freq=1, lowercase=True),
                           pairs_of(PAR))
    buf = io.BytesIO()
    torch.save(vocab_state(v), buf)
    buf.seek(0)
    back = vocab_from_state(torch.load(buf, weights_only=True))
    assert back.src_vocab == v.src_vocab and back.tgt_vocab == v.tgt_vocab
    assert back.src_tok.state() == v.src_tok.state() == {"kind": "whitespace", "lowercase": True}
    assert back.src_tok.encode("A B") == ["a", "b"]


def test_load_split_reads_the_configured_split(tmp_path):
    for name, (de, en) in {"tr": (["eins", "", "zwei"], ["one", "blank", "two"]),
                           "va": (["drei"], ["three"])}.items():
        (tmp_path / f"{name}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
        (tmp_path / f"{name}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    cfg = whitespace_cfg(train=str(tmp_path / "tr"), valid=str(tmp_path / "va"),
                         test=str(tmp_path / "va"))
    train = load_split(cfg, "train")
    assert (train.src, train.tgt, train.skipped_empty) == (["eins", "zwei"], ["one", "two"], 1)
    assert load_split(cfg, "valid").tgt == ["three"]
