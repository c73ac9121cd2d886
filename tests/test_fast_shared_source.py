"""nmtkit.fast.shared_source: beam search with one source row per sentence gives the readable
model's translations, scores and attention, and really keeps one row per sentence."""

import copy

import pytest
import torch

from nmtkit import fast
from nmtkit.config import DecodeConfig
from nmtkit.data.batching import pad_mask
from nmtkit.data.vocab import EOS, PAD
from nmtkit.decode.ensemble import Ensemble
from nmtkit.decode.search import search
from nmtkit.fast.packing import PackedAttention
from nmtkit.fast.shared_source import (
    LAYOUT,
    PackedSharedSourceAttention,
    SharedSourceAttention,
    SharedSourceTransformer,
    share_sources,
    unshare_sources,
)
from nmtkit.models.attention import MultiHeadAttention
from nmtkit.models.transformer import Transformer

from .helpers import make_rnn
from .helpers import make_transformer as make_model


def model_for(seed: int = 0, **kw) -> Transformer:
    model = make_model(seed, vocab=(12, 12), **kw)
    with torch.no_grad():
        model.generator.bias[EOS] += 1.0  # sentences end at different steps
    return model


def batch(lengths=(6, 2, 5, 1, 4, 3)):
    torch.manual_seed(11)
    src = torch.randint(4, 12, (len(lengths), max(lengths)))
    for i, n in enumerate(lengths):
        src[i, n:] = PAD
    return src, pad_mask(src)


def opts(**kw) -> DecodeConfig:
    base = dict(beam=4, n_best=2, max_len_a=1.5, max_len_b=3, length_penalty=0.6)
    base.update(kw)
    return DecodeConfig(**base)


def assert_same(plain_out, shared_out):
    for p_hyps, s_hyps in zip(plain_out, shared_out, strict=True):
        assert [h.tokens for h in p_hyps] == [h.tokens for h in s_hyps]
        for p, s in zip(p_hyps, s_hyps, strict=True):
            assert p.score == pytest.approx(s.score, abs=1e-4)
            if p.attention is not None:
                torch.testing.assert_close(p.attention, s.attention, atol=1e-5, rtol=0)
            if p.token_log_probs is not None:
                assert p.token_log_probs == pytest.approx(s.token_log_probs, abs=1e-4)


def shared_copy(model):
    other = copy.deepcopy(model)
    assert share_sources(other) == 1
    return other


@pytest.mark.parametrize("kw", [dict(norm="pre"), dict(norm="post", positional="rope"),
                                dict(norm="pre", positional="learned")])
@pytest.mark.parametrize("early_stop", [False, True])
def test_beam_search_gives_the_readable_models_results(kw, early_stop):
    model = model_for(**kw)
    src, mask = batch()
    cfg = opts(early_stop=early_stop)
    args = dict(need_attention=True, token_scores=True)
    assert_same(search(model, src, mask, cfg, **args),
                search(shared_copy(model), src, mask, cfg, **args))


def test_one_source_row_per_sentence_while_the_beams_are_searched():
    """After the first step every source attention sees one key row per sentence still
    searched and up to ``beam`` query rows (its live hypotheses) for each."""
    model = shared_copy(model_for())
    src, mask = batch()
    seen, layouts = [], []
    attn = model.decoder_layers[0].src_attn
    real_attend, real_reorder = attn.attend, model.reorder

    def attend(q, k, v, mask=None, causal=False, need_attention=False):
        seen.append((q.size(0), k.size(0)))
        return real_attend(q, k, v, mask, causal, need_attention)

    def reorder(state, index, same_source=False):
        state = real_reorder(state, index, same_source=same_source)
        layouts.append(state.extras[LAYOUT])
        return state

    attn.attend, model.reorder = attend, reorder
    search(model, src, mask, opts(beam=4))
    assert seen[0] == (6, 6)  # the first step: one row per sentence
    assert all(k < q <= 4 * k for q, k in seen[1:]) and len(seen) > 3
    assert len({k for _, k in seen}) > 2  # sentences left on the way, each its own row
    assert all(layout is not None for layout in layouts)
    assert any(layout.slot is not None for layout in layouts)  # some sentence had fewer rows


@pytest.mark.parametrize("need_attention", [False, True])
def test_reorders_in_unequal_groups_and_mixed_sentences_equal_the_readable_model(need_attention):
    """Rows sentence by sentence in unequal groups share their source rows; rows that mix
    sentences get one source row each again; every step equals the readable model's."""
    plain = model_for(seed=2)
    shared = shared_copy(plain)
    src, mask = batch((5, 3, 4))
    reorders = [([0, 0, 0, 1, 1, 1, 2, 2, 2], False),  # equal groups of 3
                ([0, 1, 3, 4, 4, 6], False),  # unequal groups: 2, 3 and 1 rows
                ([1, 0, 2, 3, 4, 5], True),  # within each sentence (same_source)
                ([5, 0, 3, 3, 1], False)]  # mixed sentences, out of order
    steps = {}
    for name, model in (("plain", plain), ("shared", shared)):
        out, layouts = [], []
        with torch.no_grad():
            state = model.start(model.encode(src, mask), mask, need_attention=need_attention)
            lp, state, a = model.step(state, torch.tensor([4, 5, 6]))
            for index, same in reorders:
                state = model.reorder(state, torch.tensor(index), same_source=same)
                layouts.append(state.extras.get(LAYOUT))
                lp, state, a = model.step(state, torch.arange(len(index)) % 8 + 4)
                out.append((lp, a))
        steps[name] = (out, layouts, state)
    for (p_lp, p_a), (s_lp, s_a) in zip(steps["plain"][0], steps["shared"][0], strict=True):
        torch.testing.assert_close(p_lp, s_lp, atol=1e-5, rtol=0)
        if need_attention:
            torch.testing.assert_close(p_a, s_a, atol=1e-5, rtol=0)
    layouts, state = steps["shared"][1], steps["shared"][2]
    assert layouts[0].width == 3 and layouts[0].slot is None
    assert layouts[1].width == 3 and layouts[1].slot.tolist() == [0, 1, 3, 4, 5, 6]
    assert layouts[2] is layouts[1]
    assert layouts[3] is None and state.src_kv[0][0].size(0) == 5  # one source row per row


def test_greedy_prefixes_and_constraints_agree():
    model = model_for(seed=4)
    shared = shared_copy(model)
    src, mask = batch()
    prefixes = [[5, 6], [], [7], [], [4, 4, 4], []]
    constraints = [[[5]], [], [[7, 8]], [], [], [[9]]]
    for cfg, extra in ((opts(beam=1, n_best=1), {}), (opts(), {"prefixes": prefixes}),
                       (opts(), {"constraints": constraints})):
        assert_same(search(model, src, mask, cfg, **extra), search(shared, src, mask, cfg, **extra))


def test_an_ensemble_shares_each_members_sources():
    members = [model_for(seed=5), model_for(seed=6)]
    plain = Ensemble(members)
    shared = copy.deepcopy(plain)
    assert share_sources(shared) == 2
    assert all(isinstance(m, SharedSourceTransformer) for m in shared.models)
    src, mask = batch()
    assert_same(search(plain, src, mask, opts()), search(shared, src, mask, opts()))


def test_for_inference_installs_it_over_packing_and_leaving_restores_the_classes():
    model = model_for()
    src, mask = batch()
    before = search(model, src, mask, opts())
    fast.for_inference(model)
    attn = model.decoder_layers[0].src_attn
    assert isinstance(model, SharedSourceTransformer)
    if isinstance(attn, PackedAttention):  # packed (oneDNN): the packed query projection stays
        assert type(attn) is PackedSharedSourceAttention
    else:
        assert type(attn) is SharedSourceAttention
    fast.for_inference(model)  # idempotent: packing again keeps the shared-source class
    assert type(model.decoder_layers[0].src_attn) is type(attn)
    assert_same(before, search(model, src, mask, opts()))
    fast.leave_inference(model)
    assert type(model) is Transformer
    assert {type(layer.src_attn) for layer in model.decoder_layers} == {MultiHeadAttention}
    unshare_sources(model)  # nothing to take off: no change
    assert type(model) is Transformer


def test_the_rnn_is_left_alone():
    model = make_rnn()
    assert share_sources(model) == 0
    assert not fast.is_fast(model)
