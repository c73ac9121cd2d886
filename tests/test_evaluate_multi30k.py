"""BLEU against Multi30k's official tokenized references (the multimodal-MT literature's number):
the pinned hashes, the reference files, and the hypothesis-side processing that matches them."""

import gzip

import pytest

from nmtkit.data.corpora import MULTI30K_SHA256, CorpusError, multi30k_reference_file
from nmtkit.evaluate import moses_lc_norm_tok, multi30k_tok_bleu


def test_every_task1_file_of_the_dataset_is_pinned(multi30k_mirror):
    """The table in corpora.py holds exactly the SHA256SUMS of the multi30k/dataset repository."""
    sums = {}
    for line in (multi30k_mirror / "multi30k" / "SHA256SUMS").read_text().splitlines():
        if line and not line.startswith("#"):
            digest, path = line.split()
            sums[path.split("data/task1/")[1].replace("raw/", "")] = digest
    assert sums == MULTI30K_SHA256
    assert len(sums) == 44


@pytest.mark.parametrize("split", ["val", "test_2016_flickr"])
@pytest.mark.parametrize("lang", ["de", "en"])
def test_moses_processing_reproduces_the_official_references(multi30k_mirror, split, lang):
    with gzip.open(multi30k_mirror / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        raw = f.read().splitlines()
    official = multi30k_reference_file(split, lang).read_text(encoding="utf-8").splitlines()
    ours = moses_lc_norm_tok(raw, lang)
    same = sum(a == b for a, b in zip(ours, official, strict=True))
    assert same >= len(official) - 1  # 4027 of 4028 lines over the four files


def test_the_raw_reference_scores_100_against_the_official_one(multi30k_mirror):
    with gzip.open(multi30k_mirror / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        raw = f.read().splitlines()
    score, signature = multi30k_tok_bleu(raw, "test_2016_flickr", "en")
    assert score == 100.0
    assert "tok:none" in signature and "test_2016_flickr.lc.norm.tok.en" in signature
    worse, _ = multi30k_tok_bleu(raw[1:] + raw[:1], "test_2016_flickr", "en")  # misaligned
    assert worse < 10


def test_wrong_count_and_unknown_split_are_clear_errors(multi30k_mirror):
    with pytest.raises(ValueError, match="1000 references vs 2 hypotheses"):
        multi30k_tok_bleu(["a", "b"], "test_2016_flickr", "en")
    with pytest.raises(CorpusError, match="no split 'test_2019'"):
        multi30k_reference_file("test_2019", "en")


def test_moses_processing_by_hand():
    # lowercased; curly quotes normalised to '"' (and, in English, a comma moved inside them);
    # split off punctuation; ' and " escaped as the Moses tokenizer does
    assert moses_lc_norm_tok(["A dog's \u201cball\u201d, 2 cats."], "en") == \
        ["a dog &apos;s &quot; ball , &quot; 2 cats ."]
