"""nmtkit.fast.unpadded_encoder: the encoder on real tokens only gives the readable encoder's
memory at every real position, the same loss and the same gradients."""

import copy

import pytest
import torch

from nmtkit import fast
from nmtkit.fast.unpadded_encoder import UnpaddedEncoderTransformer, UnpaddedSelfAttention
from nmtkit.models.loss import label_smoothed_cross_entropy
from nmtkit.models.transformer import Transformer

from .helpers import make_transformer, padded_batch


def run(model, src, src_mask, tgt):
    model.zero_grad()
    memory = model.encode(src, src_mask)
    logits = model.generator(model.decode(memory, src_mask, tgt[:, :-1]))
    loss, _, n = label_smoothed_cross_entropy(logits, tgt[:, 1:], 0.1)
    (loss / n).backward()
    return memory.detach(), loss.detach(), {k: p.grad for k, p in model.named_parameters()}


@pytest.mark.parametrize("kw", [dict(norm="pre"), dict(norm="post"), dict(positional="rope"),
                                dict(positional="learned", tie_output=True)])
def test_unpadded_encoder_agrees_with_the_readable_one(kw):
    plain = make_transformer(**kw).train()  # dropout 0: deterministic
    unpadded = copy.deepcopy(plain)
    assert "unpadded encoder" in fast.for_training(unpadded, retain_memory=False)
    assert isinstance(unpadded, UnpaddedEncoderTransformer)
    assert all(isinstance(layer.self_attn, UnpaddedSelfAttention) for layer in unpadded.encoder_layers)
    src, src_mask, tgt = padded_batch()  # rows with 6, 4 and 2 real tokens
    m0, l0, g0 = run(plain, src, src_mask, tgt)
    m1, l1, g1 = run(unpadded, src, src_mask, tgt)
    real = src_mask[:, 0]  # (batch, S)
    assert torch.allclose(m0[real], m1[real], atol=1e-5)
    assert (m1[~real] == 0).all()  # padding positions: zeros, hidden by the source mask
    assert torch.allclose(l0, l1, rtol=1e-5)
    assert g0.keys() == g1.keys()
    for k in g0:
        assert (g0[k] is None) == (g1[k] is None), k
        if g0[k] is not None:
            assert torch.allclose(g0[k], g1[k], atol=1e-5), k


def test_the_unpadded_encoder_leaves_padding_out_only_while_training_on_padding(monkeypatch):
    model = make_transformer()
    fast.for_training(model, retain_memory=False)
    calls = []
    original = UnpaddedSelfAttention.forward

    def spy(self, query, *args, **kw):
        calls.append(tuple(query.shape[:2]))
        return original(self, query, *args, **kw)

    monkeypatch.setattr(UnpaddedSelfAttention, "forward", spy)
    src, src_mask, _ = padded_batch()  # 3 x 6 positions, 12 real
    model.encode(src, src_mask)
    assert calls == [(1, 12)] * 2  # two layers, each on the 12 real positions
    calls.clear()
    with torch.no_grad():  # decoding: the readable layout
        model.encode(src, src_mask)
    assert calls == [(3, 6)] * 2
    calls.clear()
    full = src[:1]  # a batch without padding: nothing to leave out
    model.encode(full, src_mask[:1])
    assert calls == [(1, 6)] * 2
    fast.plain(model)
    assert type(model) is Transformer
