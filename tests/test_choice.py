"""nmtkit.decode.choice: the search that gives MBR or reranking its candidates, and which of
the two chooses among them."""

import pytest

from nmtkit.config import DecodeConfig
from nmtkit.decode.choice import candidate_options, choose_all
from nmtkit.decode.translator import Translation


@pytest.mark.parametrize("key", ["mbr", "rerank"])
def test_candidate_options_widen_the_beam_or_draw_that_many_samples(key):
    cfg = DecodeConfig(beam=5, n_best=1, **{key: 12})
    assert (candidate_options(cfg).beam, candidate_options(cfg).n_best) == (12, 12)
    wide = DecodeConfig(beam=16, n_best=2, **{key: 8})
    assert (candidate_options(wide).beam, candidate_options(wide).n_best) == (16, 8)
    samples = DecodeConfig(sampling=True, n_best=1, **{key: 30})
    assert candidate_options(samples).n_best == 30 and candidate_options(samples).beam == 5
    off = DecodeConfig()
    assert candidate_options(off) is off


def test_choose_all_hands_the_candidates_to_mbr_or_reranking_or_neither():
    line = [Translation("a b", ["a", "b"], [], -1.0, log_prob=-1.0, reverse_log_prob=-9.0),
            Translation("a b c", ["a", "b", "c"], [], -1.5, log_prob=-1.5, reverse_log_prob=-1.0),
            Translation("a b d", ["a", "b", "d"], [], -1.6, log_prob=-1.6, reverse_log_prob=-9.0)]
    assert choose_all([line], ["x"], DecodeConfig(n_best=3)) == [line]  # neither
    by_mbr = choose_all([line], ["x"], DecodeConfig(mbr=3))[0]
    assert by_mbr[0].mbr_utility is not None and by_mbr[0].rerank_score is None
    with pytest.raises(ValueError, match="decode.rerank needs a model of the reverse direction"):
        choose_all([line], ["x"], DecodeConfig(rerank=3))
