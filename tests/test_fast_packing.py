"""Weights packed for CPU inference: same outputs, used only while they are the weights' value."""

import pytest
import torch

from nmtkit import fast
from nmtkit.decode.options import TranslateOptions
from nmtkit.fast import onednn, packing
from nmtkit.fast.packing import PackedAttention, PackedLinear, pack_for_inference, unpack
from nmtkit.models.attention import MultiHeadAttention

from .helpers import make_transformer as make_model
from .helpers import padded_batch

pytestmark = pytest.mark.skipif(not onednn.available(), reason="PyTorch built without oneDNN")


def packed_calls(monkeypatch) -> list:
    """Count the products that went through a packed weight."""
    calls = []
    real = onednn.packed_linear

    def counting(x, packed, bias):
        calls.append(packed.shape)
        return real(x, packed, bias)

    monkeypatch.setattr(onednn, "packed_linear", counting)
    return calls


def decode(model, steps=4):
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        state = model.start(model.encode(src, src_mask), src_mask)
        out = []
        for t in range(steps):
            lp, state, _ = model.step(state, tgt[:, t])
            out.append(lp)
    return torch.stack(out, 1)


def test_packed_decoding_equals_plain(monkeypatch):
    model = make_model()
    plain = decode(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    params = [id(p) for p in model.parameters()]
    # qkv, q, out of 2 encoder + 4 decoder attentions, w_1/w_2 of 4 FFNs, the generator
    assert pack_for_inference(model) == 6 * 3 + 4 * 2 + 1
    assert pack_for_inference(model) == 0  # idempotent: everything is current
    assert isinstance(model.generator, PackedLinear)
    assert isinstance(model.decoder_layers[0].src_attn, PackedAttention)
    assert model.state_dict().keys() == state.keys()  # a class swap: same modules, same keys
    assert [id(p) for p in model.parameters()] == params  # the same parameters (and ties)
    calls = packed_calls(monkeypatch)
    packed = decode(model)
    assert torch.allclose(packed, plain, atol=1e-5)
    assert len(calls) > 0 and torch.Size([11, 32]) in calls  # the generator: (V_TGT, D)
    unpack(model)
    assert type(model.generator) is torch.nn.Linear
    assert type(model.decoder_layers[0].src_attn) is MultiHeadAttention
    calls.clear()
    assert torch.allclose(decode(model), plain, atol=1e-6) and calls == []


def test_not_used_while_recording_gradients(monkeypatch):
    model = make_model()
    pack_for_inference(model)
    calls = packed_calls(monkeypatch)
    src, src_mask, tgt = padded_batch()
    model(src, src_mask, tgt).sum().backward()
    assert calls == []
    assert model.generator.weight.grad is not None


@pytest.mark.parametrize("change", ["optimizer", "load_state_dict", "in_place"])
def test_stale_packs_are_never_used(change, monkeypatch):
    """After the weights change, decoding equals a fresh model with the new weights."""
    model = make_model()
    pack_for_inference(model)
    new = make_model(seed=3)
    if change == "optimizer":  # fused Adam updates in place without bumping version counters,
        unpack(model)  # so a model is unpacked before it trains (as fast.inference does)
        opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
        model.train()
        src, src_mask, tgt = padded_batch()
        model(src, src_mask, tgt).sum().backward()
        opt.step()
        model.eval()
        assert not fast.is_fast(model)
        new.load_state_dict(model.state_dict())
    elif change == "load_state_dict":
        model.load_state_dict(new.state_dict())
    else:
        with torch.no_grad():
            for p, q in zip(model.parameters(), new.parameters(), strict=True):
                p.copy_(q)
    calls = packed_calls(monkeypatch)
    assert torch.allclose(decode(model), decode(new), atol=1e-6)
    assert calls == []  # every pack was stale: plain products
    assert pack_for_inference(model) > 0  # and they are packed again on request
    assert torch.allclose(decode(model), decode(new), atol=1e-5) and calls


def test_translator_packs_and_translations_are_unchanged(monkeypatch):
    from nmtkit.config import DecodeConfig
    from nmtkit.data.tokenizers import WhitespaceTokenizer
    from nmtkit.data.vocab import Vocab
    from nmtkit.decode.translator import Translator

    src_vocab = Vocab.build([["a", "b", "c", "d", "e", "f", "g", "h", "i"]])
    tgt_vocab = Vocab.build([["u", "v", "w", "x", "y", "z", "q"]])
    model = make_model(vocab=(len(src_vocab), len(tgt_vocab)))
    tok = WhitespaceTokenizer()
    lines = ["a b c", "d e f g h", "i", "c c a b"]
    off = DecodeConfig(fast=False)
    plain = Translator(model, tok, tok, src_vocab, tgt_vocab, off).translate(lines, TranslateOptions(beam=3))
    assert not fast.is_fast(model)
    tr = Translator(model, tok, tok, src_vocab, tgt_vocab, DecodeConfig())
    assert fast.is_fast(model)
    packed = tr.translate(lines, TranslateOptions(beam=3))
    for a, b in zip(plain, packed, strict=True):
        assert a[0].text == b[0].text and a[0].score == pytest.approx(b[0].score, abs=1e-4)


def test_row_buckets_pad_and_slice_back(monkeypatch):
    """Products are padded to a few row counts (one oneDNN kernel each); results are exact rows."""
    from nmtkit.fast.packing import MAX_ROWS, row_bucket

    assert [row_bucket(r) for r in (1, 4, 5, 16, 17, 64, 65, 160, 257, 320)] == \
        [1, 4, 16, 16, 32, 64, 96, 160, 320, 320]
    assert all(row_bucket(r) >= r for r in range(1, MAX_ROWS + 1))
    assert len({row_bucket(r) for r in range(1, MAX_ROWS + 1)}) <= 22
    model = make_model()
    ffn = model.decoder_layers[0].feed_forward
    pack_for_inference(model)
    calls = packed_calls(monkeypatch)
    torch.manual_seed(9)
    for shape in ((5, 1, 32), (7, 3, 32), (1, 32), (MAX_ROWS + 1, 32)):
        x = torch.randn(*shape)
        with torch.no_grad():
            got = ffn.w_1(x)
        assert got.shape == (*shape[:-1], 64)
        assert torch.allclose(got, torch.nn.functional.linear(x, ffn.w_1.weight, ffn.w_1.bias), atol=1e-5)
    assert len(calls) == 3  # the product above MAX_ROWS rows went to F.linear


def test_padded_rows_come_from_a_buffer_per_thread_whose_leftovers_change_nothing():
    import threading

    from nmtkit.fast.packing import MAX_ROWS

    model = make_model()
    w_1 = model.decoder_layers[0].feed_forward.w_1
    pack_for_inference(model)
    torch.manual_seed(3)
    with torch.no_grad():
        w_1(torch.randn(60, 32) * 1e3)  # leaves 60 large rows in the buffer (padded to 64)
        x = torch.randn(5, 32)  # padded to 16 rows: 11 leftovers below it
        torch.testing.assert_close(w_1(x), torch.nn.functional.linear(x, w_1.weight, w_1.bias),
                                   atol=1e-5, rtol=0)
    mine = w_1._product.local.staging
    assert mine.shape == (MAX_ROWS, 32)
    theirs = []

    def other_thread():
        with torch.no_grad():
            w_1(torch.randn(7, 32))
        theirs.append(w_1._product.local.staging)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert theirs and theirs[0] is not mine and w_1._product.local.staging is mine


def test_switching_onednn_off_falls_back_to_plain_products(monkeypatch):
    model = make_model()
    pack_for_inference(model)
    calls = packed_calls(monkeypatch)
    plain = decode(model)
    assert calls
    calls.clear()
    with torch.backends.mkldnn.flags(enabled=False):
        assert not onednn.available()
        assert torch.allclose(decode(model), plain, atol=1e-5)
    assert calls == []


def test_without_onednn_nothing_is_swapped(monkeypatch):
    monkeypatch.setattr(onednn, "available", lambda: False)
    model = make_model()
    assert pack_for_inference(model) == 0 and not fast.is_fast(model)


def test_a_refused_reorder_falls_back_to_f_linear(monkeypatch):
    """A build that cannot reorder a weight (``reorder`` returns None) multiplies plainly."""
    model = make_model()
    plain = decode(model)
    monkeypatch.setattr(onednn, "reorder", lambda w, rows: None)
    assert pack_for_inference(model) == 0
    calls = packed_calls(monkeypatch)
    assert torch.allclose(decode(model), plain, atol=1e-6) and calls == []


def test_inference_context_gives_the_training_classes_back():
    model = make_model()
    fast.for_training(model, retain_memory=False)
    trained = type(model.decoder_layers[0].self_attn)
    with fast.inference(model):
        assert isinstance(model.decoder_layers[0].self_attn, PackedAttention)
    assert type(model.decoder_layers[0].self_attn) is trained
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    assert packing.MAX_ROWS >= packing.ROWS_HINT
