"""decode/constraints.py: lexically constrained beam search (dynamic beam allocation)."""

import pytest
import torch

from nmtkit.config import DecodeConfig
from nmtkit.data.batching import pad_mask
from nmtkit.decode.constraints import Progress, constrained_beam_search
from nmtkit.decode.ensemble import Ensemble
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.search import search
from nmtkit.decode.translator import Translator

from .helpers import contains, make_cfg, mixed_batch, prefers_567, src_batch, tiny_model


def test_progress_follows_phrases_and_unwinds_a_phrase_left_halfway():
    phrases = [[5, 6, 7], [9]]
    p = Progress((False, False))
    assert sorted(p.wanted(phrases)) == [5, 9] and p.met(phrases) == 0
    p = p.advance(5, phrases).advance(6, phrases)
    assert (p.phrase, p.pos, p.met(phrases), p.wanted(phrases)) == (0, 2, 2, [7])
    q = p.advance(5, phrases)  # left the phrase, and 5 starts it again
    assert (q.phrase, q.pos, q.met(phrases)) == (0, 1, 1)
    q = p.advance(9, phrases)  # left it for the other phrase: that one is done, this one unwound
    assert q.done == (False, True) and q.phrase == -1 and q.met(phrases) == 1
    p = p.advance(7, phrases)
    assert p.done == (True, False) and p.met(phrases) == 3 and p.wanted(phrases) == [9]
    assert p.advance(9, phrases).complete()


@pytest.mark.parametrize("beam", [1, 4])
def test_constraints_the_model_dislikes_appear_and_others_are_unchanged(beam):
    model = prefers_567()  # BOS 5 6 7 EOS; 8 and 9 nearly impossible
    src, mask = src_batch([3, 3, 3, 3])
    cfg = DecodeConfig(beam=beam, n_best=1, max_len_a=2.0, max_len_b=4)
    cons = [[[9]], [], [[8, 9], [4]], [[6, 7]]]
    out = search(model, src, mask, cfg, constraints=cons, token_scores=True)
    plain = search(model, src, mask, cfg)
    for hs, cs in zip(out, cons, strict=True):
        assert all(contains(hs[0].tokens, p) for p in cs), (hs[0].tokens, cs)
        assert sum(hs[0].token_log_probs) == pytest.approx(hs[0].log_prob, abs=1e-4)
    assert out[1][0].tokens == plain[1][0].tokens == [5, 6, 7]  # no constraint: plain search
    if beam > 1:  # already there: nothing to change (a beam of one takes a constraint first)
        assert out[3][0].tokens == [5, 6, 7]


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_every_constraint_appears_in_a_batch_and_each_sentence_gets_what_it_gets_alone(arch):
    model = tiny_model(arch, seed=6)
    src, mask = mixed_batch()
    torch.manual_seed(3)
    cons = [[[4, 5], [11]], [[7]], [], [[9, 9, 10]]]
    cfg = DecodeConfig(beam=4, n_best=2, max_len_a=1.0, max_len_b=2)
    out = search(model, src, mask, cfg, constraints=cons, prefixes=[[], [8], [6], []])
    for i, (hs, cs) in enumerate(zip(out, cons, strict=True)):
        assert len(hs) == 2
        met = [all(contains(h.tokens, p) for p in cs) for h in hs]
        assert met[0], (hs[0].tokens, cs)  # the output has every phrase
        assert met == sorted(met, reverse=True)  # n-best: those with every phrase first
        one = src[i:i + 1, :int(mask[i].sum())]
        (alone,) = constrained_beam_search(model, one, pad_mask(one), cfg, [cons[i] or [[]]],
                                           prefixes=[[[], [8], [6], []][i]])
        assert [h.tokens for h in alone] == [h.tokens for h in hs]
    assert out[1][0].tokens[0] == 8 and out[2][0].tokens[0] == 6  # with forced prefixes
    # an ensemble of the model with itself is the model, constraints included
    twice = search(Ensemble([model, model]), src, mask, cfg, constraints=cons,
                   prefixes=[[], [8], [6], []])
    assert [[h.tokens for h in hs] for hs in twice] == [[h.tokens for h in hs] for hs in out]
    with pytest.raises(ValueError, match="sampling"):
        search(model, src, mask, DecodeConfig(sampling=True), constraints=cons)


@pytest.mark.slow
def test_constraints_appear_in_a_trained_models_translations(tmp_path):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.train.loop import Trainer

    Trainer(make_cfg(60), tmp_path).run()
    tr = Translator.from_bundle(load_bundle(tmp_path / "last.pt"), beam=4, n_best=1)
    lines = ["1 2 3 4 5", "6 7 8", "9 9 1 2", "3 4"]
    cons = [["7 7"], [], ["1", "2 3"], ["9"]]
    out = tr.translate(lines, TranslateOptions(constraints=cons))
    for (h,), cs in zip(out, cons, strict=True):
        assert all(contains(h.tokens, c.split()) for c in cs), (h.text, cs)
    assert out[1][0].text == tr.translate(["6 7 8"])[0][0].text


def test_a_deadline_stops_the_constrained_search_within_one_step():
    """The constrained search checks its deadline before every step, as the others do
    (tests/test_search.py): cancelled during the third step, it stops before the fourth; one
    already passed, before the first."""
    from nmtkit.decode.deadline import Deadline, DeadlineExceeded

    from .helpers import BIGRAM_VOCAB as V
    from .helpers import BigramModel

    def endless():  # never wants EOS: only the cap ends a hypothesis
        return BigramModel({t: {4: 0.9} for t in range(V)})

    src, mask = src_batch([3, 4])
    cfg = DecodeConfig(beam=3, n_best=2, max_len_a=0.0, max_len_b=30)
    cons = [[[9], [8, 7]], [[6]]]
    free = search(endless(), src, mask, cfg, constraints=cons)
    assert all(hs[0].constraints_met for hs in free)
    same = search(endless(), src, mask, cfg, constraints=cons, deadline=Deadline.after(600))
    assert [[h.tokens for h in hs] for hs in same] == [[h.tokens for h in hs] for hs in free]
    for cancel_at, deadline in ((3, Deadline.after(600)), (0, Deadline(0.0))):
        model, calls = endless(), []
        step = model.step

        def counted(state, prev, deadline=deadline, cancel_at=cancel_at, step=step, calls=calls):
            calls.append(1)
            if len(calls) == cancel_at:
                deadline.cancel()
            return step(state, prev)

        model.step = counted
        with pytest.raises(DeadlineExceeded):
            search(model, src, mask, cfg, constraints=cons, deadline=deadline)
        assert len(calls) == cancel_at
