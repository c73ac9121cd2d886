"""evaluate.py: sacreBLEU scores with signatures, perplexity."""

import json
import math

import pytest

from nmtkit.evaluate import perplexity, score, tokenized_bleu, word_punct_tokens


def test_perfect_and_empty_scores():
    refs = ["a man rides a bike .", "two dogs play in the snow ."]
    s = score(refs, refs)
    assert s["bleu"] == 100.0 and s["chrf"] == 100.0 and s["n"] == 2
    assert s["signature"]["bleu"].startswith("nrefs:1") and "case:mixed" in s["signature"]["bleu"]
    assert score(["", ""], refs)["bleu"] == 0.0


def test_score_is_cased_and_corpus_level():
    refs = ["A man rides a bike .", "Two dogs play ."]
    lower = score([r.lower() for r in refs], refs)["bleu"]
    assert lower < 100.0  # cased: case errors cost
    one_good = score([refs[0], "x"], refs)["bleu"]
    assert 0.0 < one_good < 100.0


def test_tokenized_lowercased_bleu():
    """``bleu_lc_tok``: WordPunct tokens (nltk's pattern) of both sides, then sacreBLEU with
    lowercase=True and tokenize="none" -- blind to case and to how punctuation was spaced."""
    assert word_punct_tokens("Don't stop, Cordelia-Hotel!") == [
        "Don", "'", "t", "stop", ",", "Cordelia", "-", "Hotel", "!"]
    refs = ["Cordelia Hotel is situated in Tbilisi, a 3-minute walk away.", "Two dogs play ."]
    hyps = ["cordelia hotel is situated in tbilisi , a 3 - minute walk away .", "two dogs play."]
    s = score(hyps, refs)
    assert s["bleu_lc_tok"] == 100.0 and s["bleu"] < 70.0
    assert "case:lc" in s["signature"]["bleu_lc_tok"] and "tok:none" in s["signature"]["bleu_lc_tok"]
    assert s["signature"]["bleu_lc_tok"].endswith("|pretok:wordpunct")
    partial, _ = tokenized_bleu(["the cat sat on a mat ."], ["The cat sat on the mat."])
    assert 0.0 < partial < 100.0
    # By hand: 6/7 unigrams, 4/6 bigrams, 2/5 trigrams, 1/4 4-grams match; equal lengths.
    expected = 100 * math.exp((math.log(6 / 7) + math.log(4 / 6) + math.log(2 / 5) + math.log(1 / 4)) / 4)
    assert partial == pytest.approx(expected, abs=0.01)


def test_mismatched_counts_are_an_error():
    with pytest.raises(ValueError, match="2 hypotheses vs 1 references"):
        score(["a", "b"], ["a"])


def test_perplexity():
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(10 * math.log(4), 10) == pytest.approx(4.0)
    assert perplexity(1.0, 0) == pytest.approx(math.e)  # no tokens: no division by zero
    assert math.isfinite(perplexity(1e9, 1))  # capped, never inf


def test_ter_is_sacrebleus_edit_rate_with_its_signature():
    """TER (Snover et al. 2006): word edits per reference word x 100, lower is better."""
    refs = ["a man rides a bike .", "two dogs play in the snow ."]
    assert score(refs, refs)["ter"] == 0.0
    # One substitution in 6 reference words, none in the 7 of the second: 1/13 edits per word.
    s = score(["a man rides a horse .", refs[1]], refs)
    assert s["ter"] == round(100 * 1 / 13, 2)
    assert s["signature"]["ter"].startswith("nrefs:1") and "case:lc" in s["signature"]["ter"]
    assert score(["", ""], refs)["ter"] == 100.0  # every reference word deleted


def test_cli_evaluate_reports_ter_with_its_signature(copy_run, tmp_path, capsys):
    """``nmtkit evaluate`` prints TER beside BLEU and chrF, each with sacreBLEU's signature."""
    from nmtkit.cli import main

    src = tmp_path / "dev.src"
    src.write_text("1 2 3 4 5\n7 7 3 9\n")
    assert main(["evaluate", "--model", str(copy_run / "last.pt"), "--src", str(src),
                 "--ref", str(src), "--beam", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0.0 <= result["ter"] and set(result["signature"]) >= {"bleu", "chrf", "ter"}
    assert result["signature"]["ter"].startswith("nrefs:1|case:lc|tok:tercom")
