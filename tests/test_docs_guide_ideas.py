"""The guide's idea-sized models (:mod:`nmtkit.models.simple`) compute what the production
modules compute, on random inputs and weights:

- :func:`~nmtkit.models.simple.multi_head_attention` (split into heads, Eq. 1 per head,
  concatenation, W^O) is :class:`nmtkit.models.attention.MultiHeadAttention`, for
  self-attention and for attention over another sequence, with and without masks;
- :func:`~nmtkit.models.simple.encoder_layer` and :func:`~nmtkit.models.simple.decoder_layer`
  are :class:`nmtkit.models.transformer.EncoderLayer` and ``DecoderLayer``, pre- and
  post-norm, with a materialised target mask and with the causal kernel;
- :func:`~nmtkit.models.simple.concat_attention` is :class:`nmtkit.models.rnn.RNNAttention`
  (``concat``, with a temperature), and :func:`~nmtkit.models.simple.rnn_decoder_step`
  is ``RNNSeq2Seq.step`` for several positions of a padded batch, on a model of the
  homework's recipe (``configs/multi30k_homework_rnn.yaml``, made small).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from nmtkit.config import load
from nmtkit.data.batching import pad_mask
from nmtkit.data.vocab import BOS, PAD
from nmtkit.models import build_model, simple
from nmtkit.models.attention import MultiHeadAttention
from nmtkit.models.rnn import RNNAttention
from nmtkit.models.seq2seq import subsequent_mask, target_mask

from .helpers import ROOT, make_transformer

ATOL = 1e-5


def _perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """The module with every bias and norm moved off its initial value, in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return module.eval()


def _padded(batch: int, length: int, lengths: list[int], vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (batch, length), generator=g)
    for i, n in enumerate(lengths):
        ids[i, n:] = PAD
    return ids


@pytest.mark.parametrize("heads", [1, 4, 8])
def test_multi_head_attention_is_the_module(heads):
    torch.manual_seed(heads)
    mha = _perturbed(MultiHeadAttention(32, heads), seed=heads)
    x = torch.randn(3, 7, 32)
    memory = torch.randn(3, 5, 32)
    src_mask = pad_mask(_padded(3, 5, [5, 3, 1], 20, seed=1))  # (3, 1, 5)
    causal = target_mask(_padded(3, 7, [7, 6, 2], 20, seed=2))  # (3, 7, 7)
    with torch.no_grad():
        for query, key, mask in ((x, x, None), (x, x, causal), (x, memory, src_mask),
                                 (x, memory, None)):
            expected, _ = mha(query, key, key, mask)
            got = simple.multi_head_attention(mha, query, key, key, mask)
            assert got.shape == expected.shape == (3, 7, 32)
            assert torch.allclose(got, expected, atol=ATOL), float((got - expected).abs().max())


def test_multi_head_attention_with_distinct_keys_and_values():
    torch.manual_seed(0)
    mha = _perturbed(MultiHeadAttention(16, 4), seed=0)
    q, k, v = torch.randn(2, 3, 16), torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    with torch.no_grad():
        expected, _ = mha(q, k, v)
        assert torch.allclose(simple.multi_head_attention(mha, q, k, v), expected, atol=ATOL)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_idea_sized_layers_are_the_production_layers(norm):
    model = make_transformer(seed=3, norm=norm)
    src = _padded(3, 6, [6, 4, 2], model.src_vocab_size, seed=3)
    tgt = _padded(3, 5, [5, 5, 3], model.tgt_vocab_size, seed=4)
    tgt[:, 0] = BOS
    src_mask, tgt_mask = pad_mask(src), target_mask(tgt)
    torch.manual_seed(5)
    x, y = torch.randn(3, 6, model.cfg.d_model), torch.randn(3, 5, model.cfg.d_model)
    with torch.no_grad():
        for layer in model.encoder_layers:
            expected, _ = layer(x, src_mask)
            assert torch.allclose(simple.encoder_layer(layer, x, src_mask), expected, atol=ATOL)
        for layer in model.decoder_layers:
            src_kv = layer.src_attn.project_kv(x)
            expected, _, _ = layer(y, src_kv, src_mask, tgt_mask)
            got = simple.decoder_layer(layer, y, x, src_mask, tgt_mask)
            assert torch.allclose(got, expected, atol=ATOL), float((got - expected).abs().max())
            # the future hidden by the production layer's causal kernel (tgt_mask None)
            expected, _, _ = layer(y, src_kv, src_mask, None)
            got = simple.decoder_layer(layer, y, x, src_mask, subsequent_mask(5))
            assert torch.allclose(got, expected, atol=ATOL), float((got - expected).abs().max())


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_concat_attention_is_rnn_attention(temperature):
    torch.manual_seed(0)
    attn = _perturbed(RNNAttention("concat", 12, 10, 9, temperature), seed=1)
    with torch.no_grad():
        attn.v.normal_()
    memory, query = torch.randn(3, 6, 12), torch.randn(3, 10)
    mask = pad_mask(_padded(3, 6, [6, 4, 1], 20, seed=2)).squeeze(1)  # (3, 6)
    with torch.no_grad():
        w_expected, a_expected = attn(attn.keys(memory), memory, mask, query)
        w, a = simple.concat_attention(attn, memory, mask, query)
    assert torch.allclose(a, a_expected, atol=ATOL) and torch.allclose(w, w_expected, atol=ATOL)
    assert float(a[2, 1:].abs().max()) == 0.0  # padding gets no weight


def _homework_model(temperature: float = 1.0):
    """The homework's recipe's model, made small: concat attention, an untied output layer."""
    cfg = load(ROOT / "configs" / "multi30k_homework_rnn.yaml").model
    cfg = replace(cfg, emb_dim=10, rnn_hidden=16, dropout=0.0, attention_temperature=temperature)
    assert cfg.attention == "concat" and not cfg.tie_output
    torch.manual_seed(0)
    model = build_model(cfg, 30, 25).eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # the recipe's U(-0.08, 0.08) leaves attention almost uniform
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rnn_decoder_step_is_the_model_step(temperature):
    model = _homework_model(temperature)
    src = _padded(3, 7, [7, 5, 2], 30, seed=5)
    src_mask = pad_mask(src)
    prevs = _padded(3, 6, [6, 6, 6], 25, seed=6)
    prevs[:, 0] = BOS
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        state = model.start(memory, src_mask, need_attention=True)
        hidden, mask = memory.hidden, src_mask.squeeze(1)
        for t in range(prevs.size(1)):
            log_probs, state, a_expected = model.step(state, prevs[:, t])
            logits, hidden, a = simple.rnn_decoder_step(model, prevs[:, t], hidden,
                                                        memory.states, mask)
            assert torch.allclose(F.log_softmax(logits, dim=-1), log_probs, atol=ATOL), t
            assert torch.allclose(hidden, state.hidden, atol=ATOL), t
            assert a_expected is not None and torch.allclose(a, a_expected, atol=ATOL), t
