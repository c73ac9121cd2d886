import gzip
import io
import sys
from pathlib import Path

import pytest
import torch

from nmtkit.config import DataConfig
from nmtkit.data.tokenizers import (
    SentencePieceTokenizer,
    Tokenizer,
    WhitespaceTokenizer,
    WordTokenizer,
    detokenize,
    tokenizer_from_state,
    train_tokenizers,
)

MULTI30K = Path("/work/shared/data/multi30k")
needs_multi30k = pytest.mark.skipif(
    not (MULTI30K / "train.de.gz").is_file(), reason="Multi30k mirror not available"
)


def multi30k(split: str, lang: str, n: int | None = None) -> list[str]:
    with gzip.open(MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return lines[:n] if n is not None else lines


def reload(state: dict) -> dict:
    """state -> torch.save -> torch.load(weights_only=True), as a checkpoint would."""
    buf = io.BytesIO()
    torch.save({"tokenizer": state}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)["tokenizer"]


@pytest.fixture(scope="module")
def de_en_2000() -> list[str]:
    return multi30k("train", "de", 1000) + multi30k("train", "en", 1000)


@pytest.fixture(scope="module")
def spm_bpe(de_en_2000) -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(de_en_2000, vocab_size=500, model_type="bpe")


# --- SentencePiece ----------------------------------------------------------


@pytest.mark.slow
@needs_multi30k
def test_spm_training_is_deterministic(de_en_2000, spm_bpe):
    again = SentencePieceTokenizer.train(de_en_2000, vocab_size=500, model_type="bpe")
    assert again.state() == spm_bpe.state()
    assert again.model_proto == spm_bpe.model_proto
    assert len(spm_bpe.pieces()) == 500
    assert spm_bpe.pieces()[0] == "<unk>"


@pytest.mark.slow
@needs_multi30k
def test_spm_unigram_is_deterministic(de_en_2000):
    lines = de_en_2000[:600] + de_en_2000[1000:1600]
    a = SentencePieceTokenizer.train(lines, vocab_size=300, model_type="unigram")
    b = SentencePieceTokenizer.train(lines, vocab_size=300, model_type="unigram")
    assert a.model_proto == b.model_proto


@pytest.mark.slow
@needs_multi30k
def test_spm_round_trip_on_multi30k(spm_bpe):
    sents = multi30k("val", "de", 200) + multi30k("val", "en", 200)
    for s in sents:
        pieces = spm_bpe.encode(s)
        assert all(isinstance(p, str) for p in pieces)
        # SentencePiece collapses runs of spaces; nothing else may change
        assert spm_bpe.decode(pieces) == " ".join(s.split()), s
    pieces = spm_bpe.encode("Ein Mann läuft.")
    assert pieces[0].startswith("▁")
    assert len(pieces) > 1


@pytest.mark.slow
@needs_multi30k
def test_spm_state_round_trip_through_torch(spm_bpe):
    state = spm_bpe.state()
    assert state["kind"] == "sentencepiece"
    assert isinstance(state["model_proto"], bytes)
    restored = tokenizer_from_state(reload(state))
    assert isinstance(restored, SentencePieceTokenizer)
    for s in multi30k("test_2016_flickr", "en", 50):
        assert restored.encode(s) == spm_bpe.encode(s)


def test_spm_small_corpus_soft_vocab_limit():
    tok = SentencePieceTokenizer.train(["hello world", "hello there"] * 3, vocab_size=1000)
    assert 10 < len(tok.pieces()) < 1000
    assert tok.decode(tok.encode("hello world")) == "hello world"


def test_spm_lowercase_and_errors():
    tok = SentencePieceTokenizer.train(["Hello World", "HELLO there"], 100, lowercase=True)
    assert tok.encode("HeLLo") == tok.encode("hello")
    assert tok.decode(tok.encode("Hello World")) == "hello world"
    assert tokenizer_from_state(reload(tok.state())).encode("WORLD") == tok.encode("world")
    with pytest.raises(ValueError, match="empty corpus"):
        SentencePieceTokenizer.train(["", "  "], 100)
    with pytest.raises(ValueError, match="model_type"):
        SentencePieceTokenizer.train(["a"], 100, model_type="wordpiece")
    with pytest.raises(ValueError, match="vocab_size=16"):
        SentencePieceTokenizer.train(["abcdefghijklmnopqrstuvwxyz"], 16)
    with pytest.raises(ValueError, match="SentencePiece"):
        SentencePieceTokenizer(b"not a model")


# --- word level (spaCy) -------------------------------------------------------


@pytest.mark.slow
def test_word_tokenizer_splits_punctuation():
    pytest.importorskip("spacy")
    de = WordTokenizer("de")
    assert de.encode("Ein Mann, der läuft.") == ["Ein", "Mann", ",", "der", "läuft", "."]
    en = WordTokenizer("en")
    assert en.encode("A dog's  ball (red).") == ["A", "dog", "'s", "ball", "(", "red", ")", "."]
    assert WordTokenizer("en", lowercase=True).encode("Two MEN.") == ["two", "men", "."]


@pytest.mark.parametrize(
    "text",
    [
        "Ein Mann, der läuft.",
        "A man in a T-shirt is jumping!",
        "A dog's ball isn't red; it's blue: really?",
        'A sign that says "free dinner" hangs (barely) on the wall.',
        "A sign that says 'free dinner' and the girls' hats.",
        "Ein Schild mit der Aufschrift „Pop! Tech“ im Hintergrund.",
        "Ein Mann mit einem #5-Trikot kostet $5 und 50% weniger...",
    ],
)
def test_word_detokenizer_round_trips(text):
    pytest.importorskip("spacy")
    lang = "de" if any(w in text for w in ("Ein", "Mann")) else "en"
    tok = WordTokenizer(lang)
    assert tok.decode(tok.encode(text)) == text


@needs_multi30k
@pytest.mark.parametrize("lang", ["de", "en"])
def test_word_detokenizer_on_multi30k(lang):
    pytest.importorskip("spacy")
    tok = WordTokenizer(lang)
    sents = multi30k("val", lang)
    same = sum(tok.decode(tok.encode(s)) == " ".join(s.split()) for s in sents)
    assert same / len(sents) > 0.995


def test_detokenize_rules_without_spacy():
    assert detokenize(["Hello", ",", "world", "!"]) == "Hello, world!"
    assert detokenize(["(", "a", ")", "b"]) == "(a) b"
    assert detokenize(['"', "hi", '"', "she", "said"]) == '"hi" she said'
    assert detokenize(["do", "n't", "go"]) == "don't go"
    assert detokenize(["well", "-", "known"]) == "well-known"
    assert detokenize(["-", "a"]) == "- a"
    assert detokenize([]) == ""


def test_word_tokenizer_state_round_trip():
    pytest.importorskip("spacy")
    tok = WordTokenizer("de", lowercase=True)
    state = reload(tok.state())
    assert state == {"kind": "word", "lang": "de", "lowercase": True}
    restored = tokenizer_from_state(state)
    assert restored.encode("Ein Mann, der läuft.") == tok.encode("Ein Mann, der läuft.")


def test_word_tokenizer_without_spacy(monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy", None)  # makes `import spacy` fail
    with pytest.raises(ImportError, match=r"nmtkit\[word\]"):
        WordTokenizer("en")


# --- whitespace and factories -------------------------------------------------


def test_whitespace_tokenizer():
    tok = WhitespaceTokenizer()
    assert tok.encode(" 1  2 3 ") == ["1", "2", "3"]
    assert tok.decode(["1", "2", "3"]) == "1 2 3"
    low = WhitespaceTokenizer(lowercase=True)
    assert low.encode("A b") == ["a", "b"]
    restored = tokenizer_from_state(reload(low.state()))
    assert isinstance(restored, WhitespaceTokenizer) and restored.lowercase
    assert isinstance(tok, Tokenizer)


def test_tokenizer_from_state_rejects_unknown():
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        tokenizer_from_state({"kind": "bytes"})
    with pytest.raises(ValueError, match="kind"):
        tokenizer_from_state({})


@pytest.mark.slow
def test_train_tokenizers_sentencepiece_joint_and_separate():
    src = ["ein mann läuft", "eine frau singt", "zwei hunde spielen"] * 5
    tgt = ["a man runs", "a woman sings", "two dogs play"] * 5
    cfg = DataConfig(tokenizer="sentencepiece", vocab_size=40, joint_vocab=True)
    s, t = train_tokenizers(cfg, src, tgt)
    assert s is t
    joined = "".join(s.pieces())
    assert "ä" in joined and "y" in joined  # trained on both sides
    assert s.decode(s.encode("a man runs")) == "a man runs"
    assert s.decode(s.encode("ein mann läuft")) == "ein mann läuft"
    cfg = DataConfig(
        tokenizer="sentencepiece",
        vocab_size=40,
        joint_vocab=False,
        spm_model_type="unigram",
        lowercase=True,
    )
    s, t = train_tokenizers(cfg, src, tgt)
    assert s is not t and s.lowercase and t.lowercase
    assert "ä" in "".join(s.pieces()) and "ä" not in "".join(t.pieces())
    assert "y" not in "".join(s.pieces()) and "y" in "".join(t.pieces())


@pytest.mark.slow
def test_train_tokenizers_word_and_whitespace():
    cfg = DataConfig(tokenizer="whitespace", lowercase=True)
    s, t = train_tokenizers(cfg, ["A"], ["B"])
    assert isinstance(s, WhitespaceTokenizer) and isinstance(t, WhitespaceTokenizer)
    assert s.lowercase
    pytest.importorskip("spacy")
    cfg = DataConfig(tokenizer="word", src_lang="de", tgt_lang="en")
    s, t = train_tokenizers(cfg, [], [])
    assert (s.lang, t.lang) == ("de", "en")
    assert isinstance(s, Tokenizer)
