"""evaluate.py: sacreBLEU scores with signatures, perplexity."""

import math

import pytest

from nmtkit.evaluate import perplexity, score


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


def test_mismatched_counts_are_an_error():
    with pytest.raises(ValueError, match="2 hypotheses vs 1 references"):
        score(["a", "b"], ["a"])


def test_perplexity():
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(10 * math.log(4), 10) == pytest.approx(4.0)
    assert perplexity(1.0, 0) == pytest.approx(math.e)  # no tokens: no division by zero
    assert math.isfinite(perplexity(1e9, 1))  # capped, never inf
