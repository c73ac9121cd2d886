import math
import time

import pytest
import torch

from nmtkit.config import DecodeConfig, ModelConfig
from nmtkit.data.batching import pad_mask
from nmtkit.data.vocab import BOS, EOS, PAD
from nmtkit.decode.beams import length_caps
from nmtkit.decode.search import beam_search, greedy_search, search
from nmtkit.models.transformer import Transformer
from nmtkit.rules import length_penalty

from .helpers import BIGRAM_VOCAB as V
from .helpers import PREFIXES, BigramModel, mixed_batch, prefers_567, src_batch, tiny_model


def opts(**kw) -> DecodeConfig:
    """Decoding options for a test: the defaults, some replaced."""
    return DecodeConfig(**kw)


def test_greedy_and_beam_stop_at_eos():
    model = prefers_567()
    src, mask = src_batch([3, 5])
    hyps = greedy_search(model, src, mask, opts(max_len_a=2.0, max_len_b=5))
    assert [h.tokens for h in hyps] == [[5, 6, 7], [5, 6, 7]]
    path = [BOS, 5, 6, 7, EOS]
    raw = sum(model.log_probs[a, b].item() for a, b in zip(path, path[1:], strict=False))
    assert hyps[0].log_prob == pytest.approx(raw, abs=1e-5)
    beams = beam_search(model, src, mask, opts(beam=3, length_penalty=0.0, max_len_a=2.0,
                                               max_len_b=5, n_best=3))
    for nbest in beams:
        assert len(nbest) == 3
        assert nbest[0].tokens == [5, 6, 7]
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 3
        for h in nbest:
            assert EOS not in h.tokens and PAD not in h.tokens


def test_beam_scores_are_length_normalised():
    model = prefers_567()
    src, mask = src_batch([4])
    alpha = 0.6
    (nbest,) = beam_search(model, src, mask, opts(beam=3, length_penalty=alpha, n_best=3))
    for h in nbest:
        lp = ((5 + len(h.tokens) + 1) / 6) ** alpha  # |Y| counts EOS
        assert h.score == pytest.approx(h.log_prob / lp, rel=1e-5)
        # the raw log-prob is the model's: sum of bigram log-probs along BOS y EOS
        path = [BOS, *h.tokens, EOS]
        raw = sum(model.log_probs[a, b].item() for a, b in zip(path, path[1:], strict=False))
        assert h.log_prob == pytest.approx(raw, abs=1e-4)


def test_length_cap_is_respected():
    model = BigramModel({t: {4: 0.9} for t in range(V)})  # never wants EOS
    src, mask = src_batch([3, 5, 1])
    a, b = 1.5, 2
    caps = [int(a * n + b) for n in (3, 5, 1)]  # tokens incl. the forced EOS
    assert length_caps(mask, a, b).tolist() == caps
    hyps = greedy_search(model, src, mask, opts(max_len_a=a, max_len_b=b))
    assert [len(h.tokens) for h in hyps] == [c - 1 for c in caps]
    assert all(set(h.tokens) == {4} for h in hyps)
    beams = beam_search(model, src, mask, opts(beam=2, max_len_a=a, max_len_b=b, n_best=2))
    for nbest, c in zip(beams, caps, strict=True):
        assert all(len(h.tokens) <= c - 1 for h in nbest)
        assert len(nbest[0].tokens) == c - 1


def test_max_length_is_an_absolute_cap_on_top_of_the_relative_one():
    model = BigramModel({t: {4: 0.9} for t in range(V)})  # never wants EOS
    src, mask = src_batch([3, 5, 1])
    # relative caps (tokens incl. EOS) 6, 9, 3; max_length=3 output tokens -> 4 incl. EOS
    assert length_caps(mask, 1.5, 2, max_length=3).tolist() == [4, 4, 3]
    cfg = opts(beam=2, max_len_a=1.5, max_len_b=2)
    hyps = greedy_search(model, src, mask, cfg, max_length=3)
    assert [len(h.tokens) for h in hyps] == [3, 3, 2]
    beams = beam_search(model, src, mask, cfg, max_length=3)
    assert [len(nb[0].tokens) for nb in beams] == [3, 3, 2]


def test_length_penalty_gnmt_formula():
    lengths = torch.tensor([1, 4, 10, 30])
    for alpha in (0.0, 0.6, 1.0):
        got = length_penalty(lengths, alpha)
        expected = [((5 + n) / 6) ** alpha for n in (1, 4, 10, 30)]
        assert got.tolist() == pytest.approx(expected, rel=1e-6)
    assert length_penalty(torch.tensor([1]), 0.6).item() == pytest.approx(1.0)


def test_beam_finds_better_path_than_greedy():
    # Greedy takes 4 (p=0.6) then the best it can do is EOS with p=0.3: total 0.18.
    # Taking 5 first (p=0.4) then EOS (p~0.99) gives 0.396.
    table = {BOS: {4: 0.6, 5: 0.4}, 4: {EOS: 0.3, 6: 0.25, 7: 0.25, 8: 0.2}, 5: {EOS: 1.0}}
    model = BigramModel(table, floor=1e-6)
    src, mask = src_batch([3])
    (g,) = greedy_search(model, src, mask, opts())
    assert g.tokens == [4]
    assert g.log_prob == pytest.approx(math.log(0.18), abs=1e-3)
    (b1,) = beam_search(model, src, mask, opts(beam=1, length_penalty=0.0))
    assert b1[0].tokens == [4]
    (b2,) = beam_search(model, src, mask, opts(beam=2, length_penalty=0.0, n_best=2))
    assert [h.tokens for h in b2] == [[5], [4]]
    assert b2[0].log_prob == pytest.approx(math.log(0.4), abs=1e-3)
    assert b2[0].score > g.log_prob
    assert model.reorders > 0


@pytest.mark.parametrize("seed", [1, 2, 3])  # these seeds give both early EOS and capped outputs
def test_beam_of_one_equals_greedy_on_random_models(seed):
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=1, d_model=32, d_ff=64, heads=4, dropout=0.0,
                      norm="pre" if seed % 2 else "post", tie_output=False, tie_all=False,
                      max_positions=64)
    model = Transformer(cfg, 12, 12).eval()
    with torch.no_grad():  # favour EOS a little, so that some sentences end before the cap
        model.generator.bias[EOS] = 1.0
    src = torch.randint(4, 12, (4, 7))
    src[1, 5:] = PAD
    src[3, 2:] = PAD
    mask = pad_mask(src)
    cfg = opts(beam=1, max_len_a=1.0, max_len_b=3)
    greedy = greedy_search(model, src, mask, cfg)
    beam = beam_search(model, src, mask, cfg)
    assert [h.tokens for h in greedy] == [nb[0].tokens for nb in beam]
    for h, nb in zip(greedy, beam, strict=True):
        assert h.log_prob == pytest.approx(nb[0].log_prob, abs=1e-4)


@pytest.mark.parametrize("early_stop", [False, True])
@pytest.mark.parametrize("seed", [4, 5])
def test_batched_search_with_finished_sentences_leaving_equals_one_at_a_time(seed, early_stop):
    # Sentences end at different steps and leave the batch (their rows are dropped from the
    # model state); every sentence must still get what it gets when searched on its own.
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0, norm="pre",
                      tie_output=False, tie_all=False, max_positions=64)
    model = Transformer(cfg, 14, 14).eval()
    with torch.no_grad():
        model.generator.bias[EOS] = 1.5
    lengths = [7, 2, 5, 1, 6, 3]
    src = torch.randint(4, 14, (len(lengths), 7))
    for i, n in enumerate(lengths):
        src[i, n:] = PAD
    mask = pad_mask(src)
    cfg = opts(beam=3, n_best=2, max_len_a=1.5, max_len_b=2, early_stop=early_stop)
    greedy = greedy_search(model, src, mask, cfg, need_attention=True)
    beam = beam_search(model, src, mask, cfg, need_attention=True)
    assert len({len(h.tokens) for h in greedy}) > 2  # the sentences really end apart
    for i, n in enumerate(lengths):
        one_src = src[i:i + 1, :n]
        (g,) = greedy_search(model, one_src, pad_mask(one_src), cfg, need_attention=True)
        assert greedy[i].tokens == g.tokens
        assert greedy[i].log_prob == pytest.approx(g.log_prob, abs=1e-4)
        torch.testing.assert_close(greedy[i].attention[:, :n], g.attention, atol=1e-5, rtol=0)
        assert float(greedy[i].attention[:, n:].abs().sum()) == 0.0  # padding gets nothing
        (alone,) = beam_search(model, one_src, pad_mask(one_src), cfg, need_attention=True)
        assert [h.tokens for h in beam[i]] == [h.tokens for h in alone]
        for h, a in zip(beam[i], alone, strict=True):
            assert h.score == pytest.approx(a.score, abs=1e-4)
            torch.testing.assert_close(h.attention[:, :n], a.attention, atol=1e-5, rtol=0)


def test_early_stop_ends_a_sentence_once_its_best_hypotheses_have_ended():
    # BOS -> 5 -> EOS is by far the best translation; the other hypotheses wander among
    # 6/7/8 (never ending before the cap). Exhaustive search runs them to the cap; with
    # early_stop the sentence ends as soon as its n_best best-ranked hypotheses have ended.
    table = {BOS: {5: 0.6, 6: 0.2, 7: 0.2}, 5: {EOS: 0.95},
             6: {6: 0.3, 7: 0.3, 8: 0.3, 9: 0.1}, 7: {6: 0.3, 7: 0.3, 8: 0.3, 9: 0.1},
             8: {6: 0.3, 7: 0.3, 8: 0.3, 9: 0.1}, 9: {6: 0.3, 7: 0.3, 8: 0.3, 9: 0.1}}
    src, mask = src_batch([6])
    runs = {}
    for early in (False, True):
        model = BigramModel(table, floor=1e-6)
        calls = []
        step = model.step
        model.step = lambda state, prev, step=step, calls=calls: (calls.append(1),
                                                                   step(state, prev))[1]
        (hyps,) = beam_search(model, src, mask, opts(beam=3, max_len_a=2.0, max_len_b=4,
                                                     early_stop=early))
        runs[early] = (hyps, len(calls))
    assert runs[False][0][0].tokens == runs[True][0][0].tokens == [5]
    assert runs[True][0][0].score == pytest.approx(runs[False][0][0].score)
    assert runs[True][1] == 2 < runs[False][1] == 16  # BOS->5, 5->EOS; the cap is 2*6+4


def test_options_are_read_from_the_decode_config():
    # n_best and beam come from the config: three distinct hypotheses, best first
    model = prefers_567()
    src, mask = src_batch([3])
    (nbest,) = beam_search(model, src, mask, opts(beam=4, n_best=3, length_penalty=0.0))
    assert len(nbest) == 3 and nbest[0].tokens == [5, 6, 7]
    (one,) = beam_search(model, src, mask, opts(beam=4, n_best=1, length_penalty=0.0))
    assert len(one) == 1 and one[0].tokens == nbest[0].tokens
    # length_penalty from the config changes the ranking score, not the raw log-probability
    (lp,) = beam_search(model, src, mask, opts(beam=4, n_best=1, length_penalty=1.0))
    assert lp[0].log_prob == pytest.approx(one[0].log_prob, abs=1e-5)
    assert lp[0].score == pytest.approx(one[0].log_prob / ((5 + 4) / 6), rel=1e-5)


def test_search_picks_greedy_only_for_one_beam_and_one_best():
    model = prefers_567()
    src, mask = src_batch([3, 5])
    calls = []
    for cfg in (opts(beam=1, n_best=1), opts(beam=3, n_best=1), opts(beam=3, n_best=2)):
        model.reorders = 0
        out = search(model, src, mask, cfg)
        calls.append(model.reorders)
        assert [len(hs) for hs in out] == [cfg.n_best, cfg.n_best]
        assert all(hs[0].tokens == [5, 6, 7] for hs in out)
    assert calls[0] == 0 < calls[1]  # greedy never reorders here: nobody leaves early


def test_early_stop_is_read_from_the_config():
    table = {BOS: {5: 0.6, 6: 0.2, 7: 0.2}, 5: {EOS: 0.95},
             6: {6: 0.5, 7: 0.5}, 7: {6: 0.5, 7: 0.5}}
    src, mask = src_batch([6])
    steps = {}
    for early in (False, True):
        model = BigramModel(table, floor=1e-6)
        n = [0]
        step = model.step

        def counting(state, prev, step=step, n=n):
            n[0] += 1
            return step(state, prev)

        model.step = counting
        beam_search(model, src, mask, opts(beam=3, max_len_a=2.0, max_len_b=4, early_stop=early))
        steps[early] = n[0]
    assert steps[True] == 2 < steps[False]


# --- forced prefixes, per-token scores, sampling (issue 15) ----------------------------------

def forced_log_probs(model, src, mask, tokens):
    """Teacher-forced log P of each token of BOS tokens EOS, for one sentence: (len + 1,)."""
    ys = torch.tensor([[BOS, *tokens]])
    lp = model(src, mask, ys, None)[0]  # (len + 1, V)
    return lp.gather(1, torch.tensor([*tokens, EOS]).unsqueeze(1)).view(-1)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize("constrained", [False, True])
def test_beam_search_computes_the_first_step_once_per_sentence(arch, constrained):
    """Every hypothesis starts as the same empty prefix: the first step runs one row per
    sentence, the next ones beam rows per sentence, and every hypothesis's score is still
    the model's log P(y | x) (the state was spread to the right rows)."""
    model = tiny_model(arch, seed=3)
    src, mask = mixed_batch()
    rows, real_step = [], model.step

    def counting_step(state, prev):
        rows.append(prev.size(0))
        return real_step(state, prev)

    model.step = counting_step
    cfg = opts(beam=3, n_best=3, max_len_a=1.5, max_len_b=2)
    out = search(model, src, mask, cfg, constraints=[[[5]], [], [[7, 8]], []] if constrained else None)
    assert rows[0] == 4
    # the constrained search computes every slot; plain beam search only the live ones
    assert rows[1] == 12 if constrained else 4 < rows[1] <= 12
    for i, hyps in enumerate(out):
        one_src = src[i:i + 1, :int(mask[i].sum())]
        assert len(hyps) == 3
        for h in hyps:
            with torch.no_grad():
                lp = forced_log_probs(model, one_src, pad_mask(one_src), h.tokens)
            assert h.log_prob == pytest.approx(float(lp.sum()), abs=1e-4)
    if constrained:  # the best output meets its constraints
        best0, best2 = out[0][0].tokens, out[2][0].tokens
        assert 5 in best0 and any(best2[j:j + 2] == [7, 8] for j in range(len(best2)))


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_ended_hypotheses_leave_the_models_batch(arch):
    """A hypothesis that has ended is never fed to the model again (it goes on with </s> at
    no cost), and still competes for its beam's slots: n-best lists equal one-at-a-time's."""
    model = tiny_model(arch, seed=5)
    src, mask = mixed_batch()
    fed, real_step = [], model.step

    def spying_step(state, prev):
        fed.append(prev.clone())
        return real_step(state, prev)

    model.step = spying_step
    cfg = opts(beam=4, n_best=4, max_len_a=2.0, max_len_b=3)
    out = search(model, src, mask, cfg)
    model.step = real_step
    assert not any(bool(((p == EOS) | (p == PAD)).any()) for p in fed)
    assert sum(p.numel() for p in fed[1:]) < 4 * src.size(0) * len(fed[1:])  # < beam x batch per step
    for i, hyps in enumerate(out):
        one = src[i:i + 1, :int(mask[i].sum())]
        alone = search(model, one, pad_mask(one), cfg)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize("beam", [1, 3])
def test_prefixes_are_forced_verbatim_in_a_mixed_batch(arch, beam):
    model = tiny_model(arch)
    src, mask = mixed_batch()
    cfg = opts(beam=beam, n_best=1, max_len_a=1.0, max_len_b=2)
    out = search(model, src, mask, cfg, prefixes=PREFIXES, token_scores=True)
    plain = search(model, src, mask, cfg)
    for i, prefix in enumerate(PREFIXES):
        h = out[i][0]
        assert h.tokens[:len(prefix)] == prefix  # verbatim, even past the usual cap
        one_src = src[i:i + 1, :int(mask[i].sum())]
        (alone,) = search(model, one_src, pad_mask(one_src), cfg, prefixes=[prefix])
        assert alone[0].tokens == h.tokens  # batching with other prefixes changes nothing
        assert alone[0].log_prob == pytest.approx(h.log_prob, abs=1e-4)
        # the score includes the prefix tokens' log-probs: it is the model's log P(y | x)
        with torch.no_grad():
            lp = forced_log_probs(model, one_src, pad_mask(one_src), h.tokens)
        assert h.log_prob == pytest.approx(float(lp.sum()), abs=1e-4)
        assert h.token_log_probs == pytest.approx(lp.tolist(), abs=1e-4)
    assert out[1][0].tokens == plain[1][0].tokens  # no prefix: the plain search's output
    assert out[1][0].log_prob == pytest.approx(plain[1][0].log_prob, abs=1e-5)


def test_a_prefix_the_model_dislikes_is_still_forced():
    model = prefers_567()  # BOS -> 5 -> 6 -> 7 -> EOS; 9 is nearly impossible
    src, mask = src_batch([3, 3])
    for cfg in (opts(beam=1), opts(beam=3)):
        out = search(model, src, mask, cfg, prefixes=[[9, 9], []])
        assert out[0][0].tokens[:2] == [9, 9] and out[1][0].tokens == [5, 6, 7]
        assert out[0][0].log_prob < out[1][0].log_prob
    with pytest.raises(ValueError, match="2 prefixes for a batch of 1"):
        greedy_search(model, src[:1], mask[:1], opts(), prefixes=[[], []])


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_per_token_log_probs_sum_to_the_sentence_log_prob(arch):
    model = tiny_model(arch, seed=3)
    src, mask = mixed_batch()
    for cfg in (opts(beam=1), opts(beam=4, n_best=3, length_penalty=0.6)):
        for hs in search(model, src, mask, cfg, token_scores=True):
            for h in hs:
                assert h.token_log_probs is not None
                assert len(h.token_log_probs) == len(h.tokens) + 1  # the tokens and </s>
                assert sum(h.token_log_probs) == pytest.approx(h.log_prob, abs=1e-4)
                assert all(x <= 0 for x in h.token_log_probs)
    assert search(model, src, mask, opts(beam=2))[0][0].token_log_probs is None  # on request only


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_sampling_is_reproducible_with_its_seed_and_differs_across_seeds(arch):
    model = tiny_model(arch, seed=5)
    src, mask = mixed_batch()

    def draw(**kw):
        cfg = opts(sampling=True, n_best=4, max_len_a=1.5, max_len_b=3, **kw)
        return search(model, src, mask, cfg, token_scores=True)

    a, b, c = draw(sampling_seed=1), draw(sampling_seed=1), draw(sampling_seed=2)
    assert [len(hs) for hs in a] == [4] * 4  # n_best samples per sentence
    toks = [[h.tokens for h in hs] for hs in a]
    assert toks == [[h.tokens for h in hs] for hs in b]
    assert toks != [[h.tokens for h in hs] for hs in c]
    assert len({tuple(t) for hs in toks for t in hs}) > 4  # the samples really vary
    for i, hs in enumerate(a):  # a sample's score is its log-probability under the model
        one_src = src[i:i + 1, :int(mask[i].sum())]
        h = hs[0]
        with torch.no_grad():
            lp = forced_log_probs(model, one_src, pad_mask(one_src), h.tokens)
        assert h.score == h.log_prob == pytest.approx(float(lp.sum()), abs=1e-4)
        assert sum(h.token_log_probs) == pytest.approx(h.log_prob, abs=1e-4)
    # top-k 1 and a tiny top-p leave only the best token: greedy search, whatever the seed
    greedy = [h.tokens for h in greedy_search(model, src, mask, opts(max_len_a=1.5, max_len_b=3))]
    for kw in ({"sampling_top_k": 1}, {"sampling_top_p": 1e-6}, {"sampling_temperature": 1e-3}):
        assert [[h.tokens for h in hs] for hs in draw(sampling_seed=7, **kw)] == [[g] * 4 for g in greedy]
    # prefixes are forced while sampling too
    cfg = opts(sampling=True, n_best=2, sampling_seed=3)
    for hs, prefix in zip(search(model, src, mask, cfg, prefixes=PREFIXES), PREFIXES, strict=True):
        assert all(h.tokens[:len(prefix)] == prefix for h in hs)


def test_top_k_and_top_p_restrict_the_draws():
    from nmtkit.decode.search import sample_tokens

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).repeat(2000, 1)
    lp = probs.log()
    gen = torch.Generator().manual_seed(0)
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_top_k=2), gen)
    assert set(tok.tolist()) == {0, 1}
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_top_p=0.75), gen)
    assert set(tok.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.75: the third is never drawn
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_top_p=0.85), gen)
    assert set(tok.tolist()) == {0, 1, 2}
    got, tok = sample_tokens(lp, opts(sampling=True), gen)
    assert set(tok.tolist()) == {0, 1, 2, 3}
    assert abs((tok == 0).float().mean().item() - 0.5) < 0.05
    torch.testing.assert_close(got, lp.gather(1, tok.unsqueeze(1)).view(-1))  # the model's log-prob
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_epsilon=0.1), gen)
    assert set(tok.tolist()) == {0, 1, 2}  # 0.05 < 0.1: never drawn
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_epsilon=0.9), gen)
    assert set(tok.tolist()) == {0}  # none reaches 0.9: the most probable stays
    # on the tempered distribution: T = 3 flattens it, and every token passes 0.1
    _, tok = sample_tokens(lp, opts(sampling=True, sampling_epsilon=0.1, sampling_temperature=3.0), gen)
    assert set(tok.tolist()) == {0, 1, 2, 3}


# --- deadlines (nmtkit.decode.deadline) ------------------------------------------------------------

def endless():
    """A model that never wants EOS: every search runs to its length cap."""
    return BigramModel({t: {4: 0.9} for t in range(V)})


def counting_steps(model, deadline, cancel_at):
    """Wrap ``model.step`` (the search's one call per step): each call is counted, and the
    ``cancel_at``-th cancels ``deadline`` (as the server does when a request is given up)."""
    calls, step = [], model.step

    def counted(state, prev):
        calls.append(prev.numel())
        if len(calls) == cancel_at:
            deadline.cancel()
        return step(state, prev)

    model.step = counted
    return calls


def endless_ensemble():
    from nmtkit.decode.ensemble import Ensemble

    members = [tiny_model("transformer", seed) for seed in (1, 2)]
    for m in members:
        with torch.no_grad():
            m.generator.bias[EOS] -= 100.0
    return Ensemble(members)


SEARCH_KINDS = {  # kind -> (model maker, options): search() picks the search from the options
    "greedy": (endless, dict(beam=1, n_best=1)),
    "beam": (endless, dict(beam=3, n_best=1)),
    "n_best": (endless, dict(beam=4, n_best=3, early_stop=True)),
    "sampling": (endless, dict(sampling=True, n_best=3, sampling_seed=5)),
    "ensemble": (endless_ensemble, dict(beam=3, n_best=2)),
}


@pytest.mark.parametrize("kind", sorted(SEARCH_KINDS))
def test_a_deadline_stops_every_search_within_one_step(kind):
    from nmtkit.decode.deadline import Deadline, DeadlineExceeded

    make, kw = SEARCH_KINDS[kind]
    cfg = opts(max_len_a=0.0, max_len_b=40, **kw)
    src, mask = mixed_batch() if kind == "ensemble" else src_batch([3, 5, 2])
    free = search(make(), src, mask, cfg)
    # a deadline that has not passed changes nothing
    assert [[h.tokens for h in hs] for hs in search(make(), src, mask, cfg,
                                                    deadline=Deadline.after(600))] == \
        [[h.tokens for h in hs] for hs in free]
    assert max(len(hs[0].tokens) for hs in free) == 39  # without a deadline: 40 steps
    # cancelled during the third step: the search stops before the fourth
    model, deadline = make(), Deadline.after(600)
    calls = counting_steps(model, deadline, cancel_at=3)
    with pytest.raises(DeadlineExceeded, match="cancelled"):
        search(model, src, mask, cfg, deadline=deadline)
    assert len(calls) == 3
    # one that has already passed: not one step
    model = make()
    calls = counting_steps(model, Deadline(), cancel_at=0)
    with pytest.raises(DeadlineExceeded, match="deadline"):
        search(model, src, mask, cfg, deadline=Deadline(time.monotonic() - 1))
    assert calls == []


def test_a_search_stops_at_its_deadline_in_time():
    """Time, not a flag: 40 steps of 50 ms with a deadline of 0.2 s stop after about 4."""
    from nmtkit.decode.deadline import Deadline, DeadlineExceeded

    model = endless()
    step = model.step

    def slow(state, prev):
        time.sleep(0.05)
        return step(state, prev)

    model.step = slow
    src, mask = src_batch([3, 5])
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        search(model, src, mask, opts(beam=2, max_len_a=0.0, max_len_b=40),
               deadline=Deadline(start + 0.2))
    assert time.monotonic() - start < 0.2 + 0.05 + 0.5  # the deadline, one step, slack
