"""nmtkit.decode.choice: the search that gives MBR or reranking its candidates, and which of
the two chooses among them."""

import pytest

from nmtkit.config import DecodeConfig
from nmtkit.decode.choice import candidate_options, choose_all
from nmtkit.decode.translation import Translation


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


class FixedReverse:
    """A stand-in reverse model: the reverse scores are those stored in the candidates."""

    def __init__(self, line):
        self.by_text = {c.text: c.reverse_log_prob for c in line}
        self.translators, self.r2l = ["a reverse model"], []  # one reverse model, no right-to-left

    def score(self, candidates, sources):
        return [self.by_text[c] for c in candidates]


def test_with_both_mbr_chooses_among_the_reranking_best():
    """decode.rerank 6 and decode.mbr 3: the reranking keeps its 3 best, MBR chooses among
    them: not the reranking's own best (x y z, unlike the others), and not MBR's choice over
    all six (a b c d e, which the reverse model ranks low)."""
    def cand(text, score, reverse):
        return Translation(text, text.split(), [], score, log_prob=score, reverse_log_prob=reverse)

    line = [cand("x y z", -1.0, -1.0), cand("a b c d", -1.5, -1.0), cand("a b c e", -1.6, -1.0),
            cand("a b c d e", -1.2, -9.0), cand("a b c d e f", -1.3, -9.0),
            cand("a b c d e g", -1.3, -9.0)]
    rev = FixedReverse(line)
    alone = choose_all([line], ["s"], DecodeConfig(rerank=6, reverse_weight=1.0), rev)[0][0]
    by_mbr = choose_all([line], ["s"], DecodeConfig(mbr=6), rev)[0][0]
    both_cfg = DecodeConfig(rerank=6, mbr=3, n_best=2, reverse_weight=1.0)
    both = choose_all([line], ["s"], both_cfg, rev)[0]
    assert (alone.text, by_mbr.text, both[0].text) == ("x y z", "a b c d e", "a b c d")
    assert [c.text for c in both] == ["a b c d", "a b c e"]  # n_best 2, in MBR's order
    assert both[0].rerank_score == pytest.approx(-2.5) and both[0].mbr_utility is not None
    assert both[0].ranking_score == both[0].mbr_utility  # what ordered the final list
    wide = candidate_options(both_cfg)
    assert (wide.beam, wide.n_best) == (6, 6)  # the search gives the reranking's 6


def test_mbr_with_rerank_must_choose_among_fewer_than_were_reranked():
    from nmtkit.config import Config, ConfigError

    Config.from_dict({"decode": {"rerank": 10, "mbr": 4}})
    with pytest.raises(ConfigError, match="decode.mbr with decode.rerank chooses among the "
                       "reranking's best: it must be below decode.rerank"):
        Config.from_dict({"decode": {"rerank": 10, "mbr": 10}})
