import math

import pytest
import torch

from nmtkit.config import POSITIONAL_ENCODINGS, ModelConfig
from nmtkit.data.vocab import PAD
from nmtkit.models.seq2seq import target_mask
from nmtkit.models.transformer import Embeddings, Transformer, sinusoid_table

from .helpers import V_SRC, V_TGT, D, padded_batch
from .helpers import make_transformer as make_model


def test_sinusoid_table_matches_formula():
    d, n = 10, 7
    pe = sinusoid_table(n, d)
    assert pe.shape == (n, d)
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embeddings_scale_by_sqrt_d():
    torch.manual_seed(0)
    emb = Embeddings(9, 16)
    ids = torch.tensor([[1, 4, 8]])
    assert torch.allclose(emb(ids), emb.lut.weight[ids] * 4.0)


@pytest.mark.parametrize("positional", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_incremental_step_equals_forward(norm, positional):
    model = make_model(norm=norm, positional=positional)
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt, None)  # (batch, T, V)
        state = model.start(model.encode(src, src_mask), src_mask)
        steps = []
        for t in range(tgt.size(1)):
            lp, state, attn = model.step(state, tgt[:, t])
            assert attn is None
            steps.append(lp)
    inc = torch.stack(steps, dim=1)
    assert inc.shape == full.shape == (3, 5, V_TGT)
    assert torch.allclose(inc, full, atol=1e-5)
    assert torch.allclose(full.exp().sum(-1), torch.ones(3, 5), atol=1e-5)


def test_step_attention_over_source_hides_padding():
    model = make_model()
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        state = model.start(model.encode(src, src_mask), src_mask, need_attention=True)
        _, _, attn = model.step(state, tgt[:, 0])
    assert attn.shape == (3, 6)
    assert torch.allclose(attn.sum(-1), torch.ones(3), atol=1e-5)
    assert torch.all(attn[2, 2:] == 0) and torch.all(attn[1, 4:] == 0)


def test_explicit_target_mask_equals_causal_fast_path():
    model = make_model(norm="post")
    src, src_mask, tgt = padded_batch()
    tgt[1, 3:] = PAD
    tgt[2, 4:] = PAD
    with torch.no_grad():
        explicit = model(src, src_mask, tgt, target_mask(tgt))
        causal = model(src, src_mask, tgt, None)
    real = tgt != PAD
    assert torch.allclose(explicit[real], causal[real], atol=1e-5)


def test_tie_output_shares_parameter():
    model = make_model(tie_output=True, tie_all=False)
    assert model.generator.weight is model.tgt_embed.lut.weight
    assert model.src_embed.lut.weight is not model.tgt_embed.lut.weight


def test_tie_all_shares_all_three():
    model = make_model(vocab=(V_TGT, V_TGT), tie_output=True, tie_all=True)
    w = model.tgt_embed.lut.weight
    assert model.generator.weight is w and model.src_embed.lut.weight is w
    untied = make_model(vocab=(V_TGT, V_TGT))
    assert untied.num_parameters() - model.num_parameters() == 2 * V_TGT * D  # counted once


def test_tie_all_with_different_vocab_sizes_raises():
    with pytest.raises(ValueError, match="joint"):
        make_model(vocab=(V_SRC, V_TGT), tie_output=True, tie_all=True)


def test_untied_parameters_are_distinct():
    model = make_model()
    assert model.generator.weight is not model.tgt_embed.lut.weight


def test_reorder_selects_rows():
    model = make_model()
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        state = model.start(model.encode(src, src_mask), src_mask)
        _, state, _ = model.step(state, tgt[:, 0])
        _, state, _ = model.step(state, tgt[:, 1])
        before_kv = [(k.clone(), v.clone()) for k, v in state.self_kv]
        before_src = [(k.clone(), v.clone()) for k, v in state.src_kv]
        index = torch.tensor([2, 0, 0, 1])
        state = model.reorder(state, index)
        assert torch.equal(state.src_mask, src_mask[index])
        for (k, v), (k0, v0) in zip(state.self_kv, before_kv, strict=True):
            assert k.shape[0] == 4 and torch.equal(k, k0[index]) and torch.equal(v, v0[index])
        for (k, v), (k0, v0) in zip(state.src_kv, before_src, strict=True):
            assert torch.equal(k, k0[index]) and torch.equal(v, v0[index])
        # decoding on from the reordered state equals decoding the reordered batch
        lp, _, _ = model.step(state, tgt[index, 2])
        ref = model(src[index], src_mask[index], tgt[index, :3], None)[:, 2]
    assert torch.allclose(lp, ref, atol=1e-5)


def test_reorder_within_the_beam_keeps_the_source_side():
    """Beam search's ``same_source`` reorder gathers only the self-attention cache and
    decodes on exactly as the full reorder does when rows stay in their sentence."""
    model = make_model()
    src, src_mask, tgt = padded_batch()
    k = 2
    expand = torch.arange(src.size(0)).repeat_interleave(k)  # two beam rows per sentence
    within = torch.tensor([1, 1, 2, 3, 5, 4, 6, 6])[: expand.numel()]
    with torch.no_grad():
        outs = []
        for same in (False, True):
            state = model.start(model.encode(src, src_mask), src_mask)
            state = model.reorder(state, expand)
            _, state, _ = model.step(state, tgt[expand, 0])
            src_kv_before = state.src_kv
            state = model.reorder(state, within, same_source=same)
            if same:
                assert state.src_kv is src_kv_before  # not gathered
            lp, _, _ = model.step(state, tgt[expand, 1][within])
            outs.append(lp)
    assert torch.equal(outs[0], outs[1])


def test_glorot_init_bounds():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(layers=1, d_model=D, d_ff=64, heads=4, tie_output=False,
                                    tie_all=False), V_SRC, V_TGT)
    attn = model.encoder_layers[0].self_attn
    bound = math.sqrt(6.0 / (D + D))  # fan_avg of one d x d projection
    for i in range(3):
        w = attn.in_proj.weight[i * D:(i + 1) * D]
        assert w.abs().max() <= bound
        assert w.abs().max() > 0.9 * bound
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)
    assert torch.all(attn.in_proj.bias == 0)
    w1 = model.encoder_layers[0].feed_forward.w_1.weight  # (d_ff, d)
    b1 = math.sqrt(6.0 / (64 + D))
    assert w1.abs().max() <= b1 and w1.abs().max() > 0.9 * b1
    assert torch.all(model.src_embed.lut.weight[PAD] == 0)


def test_attention_maps_shapes_and_rows_sum_to_one():
    model = make_model()
    src, _, tgt = padded_batch()
    with torch.no_grad():
        maps = model.attention_maps(src, tgt)
    assert set(maps) == {"encoder", "decoder_self", "decoder_src"}
    for key, shape in (("encoder", (3, 4, 6, 6)), ("decoder_self", (3, 4, 5, 5)),
                       ("decoder_src", (3, 4, 5, 6))):
        assert len(maps[key]) == 2
        for w in maps[key]:
            assert w.shape == shape
            assert torch.allclose(w.sum(-1), torch.ones(shape[:-1]), atol=1e-5)
    for w in maps["decoder_self"]:
        assert torch.all(w.triu(1) == 0)
    for w in maps["decoder_src"] + maps["encoder"]:
        assert torch.all(w[2, ..., 2:] == 0)
