"""decode/attention.py: the one computation of a sentence's attention maps (viz and serve)."""

import numpy as np
import pytest
import torch

from nmtkit.checkpoint import Bundle
from nmtkit.config import Config, DataConfig, DecodeConfig, ModelConfig
from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.data.vocab import BOS, EOS, Vocab
from nmtkit.decode.attention import KINDS, reading_order, teacher_forced_maps
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.sentence_attention import sentence_attention
from nmtkit.decode.translator import Translator
from nmtkit.models import build_model

SYMBOLS = [str(i) for i in range(1, 20)]
VOCAB = Vocab(["<pad>", "<unk>", "<s>", "</s>", *SYMBOLS])
LAYERS, HEADS = 2, 2


def tiny_bundle(reverse_source: bool = False) -> Bundle:
    cfg = Config(name="attention_test",
                 data=DataConfig(corpus="copy", tokenizer="whitespace", reverse_source=reverse_source),
                 model=ModelConfig(d_model=16, d_ff=32, heads=HEADS, layers=LAYERS, dropout=0.0,
                                   max_positions=32),
                 decode=DecodeConfig(beam=2, max_len_a=1.0, max_len_b=3))
    torch.manual_seed(0)
    model = build_model(cfg.model, len(VOCAB), len(VOCAB)).eval()
    tok = WhitespaceTokenizer()
    return Bundle(cfg, model, tok, tok, VOCAB, VOCAB)


def test_maps_have_a_shape_per_layer_and_head():
    model = tiny_bundle().model
    src, tgt_in = [5, 6, 7, 8, EOS], [BOS, 9, 10]
    maps = teacher_forced_maps(model, src, tgt_in)
    assert list(maps) == list(KINDS)
    assert tuple(maps["encoder"].shape) == (LAYERS, HEADS, 5, 5)
    assert tuple(maps["decoder_self"].shape) == (LAYERS, HEADS, 3, 3)
    assert tuple(maps["decoder_src"].shape) == (LAYERS, HEADS, 3, 5)
    for w in maps.values():
        assert w.dtype == torch.float32 and w.device.type == "cpu"
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)
    raw = model.attention_maps(torch.tensor([src]), torch.tensor([tgt_in]))
    for layer in range(LAYERS):  # layer i, head j of the model, unchanged
        torch.testing.assert_close(maps["decoder_src"][layer], raw["decoder_src"][layer][0])


def test_reverse_source_maps_are_the_model_input_maps_reordered():
    model = tiny_bundle().model
    reading = [5, 6, 7, 8]
    src = [*reading[::-1], EOS]  # what a reverse_source model reads
    tgt_in = [BOS, 9, 10, 11]
    plain = teacher_forced_maps(model, src, tgt_in)  # in the model's input order
    shown = teacher_forced_maps(model, src, tgt_in, reverse_source=True)
    perm = [3, 2, 1, 0, 4]  # reading position -> model input position; </s> stays last
    np.testing.assert_array_equal(shown["encoder"].numpy(),
                                  plain["encoder"].numpy()[:, :, perm][:, :, :, perm])
    np.testing.assert_array_equal(shown["decoder_src"].numpy(),
                                  plain["decoder_src"].numpy()[:, :, :, perm])
    np.testing.assert_array_equal(shown["decoder_self"].numpy(), plain["decoder_self"].numpy())


def test_reading_order_flips_only_the_subwords():
    w = torch.arange(6.0).view(1, 6)  # 4 subwords, </s>, one padding column
    assert reading_order(w, 4, dims=[1]).tolist() == [[3.0, 2.0, 1.0, 0.0, 4.0, 5.0]]
    assert reading_order(w, 4, dims=[]).tolist() == w.tolist()


@pytest.mark.parametrize("reverse_source", [False, True])
def test_sentence_attention_is_in_reading_order(reverse_source):
    bundle = tiny_bundle(reverse_source)
    tr = Translator.from_bundle(bundle)
    att = sentence_attention(tr, "1 2 3 4", need_attention=True)
    assert att.tokens["source"] == ["1", "2", "3", "4", "</s>"]
    t = len(att.tokens["target"])
    assert tuple(att.maps["decoder_src"].shape) == (LAYERS, HEADS, t, 5)
    # what the search saw (last layer, mean over heads) is what teacher forcing gives
    torch.testing.assert_close(att.maps["decoder_src"][-1].mean(0),
                               torch.from_numpy(att.translation.attention), atol=1e-5, rtol=0)
    # the maps are those of the model's own input, reordered
    src_toks, src_ids = tr.encode_source("1 2 3 4")
    tgt_in = [BOS, *VOCAB.encode(att.translation.tokens, add_eos=False)]
    raw = teacher_forced_maps(bundle.model, src_ids.tolist(), tgt_in)
    perm = [3, 2, 1, 0, 4] if reverse_source else [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(att.maps["decoder_src"].numpy(),
                                  raw["decoder_src"].numpy()[:, :, :, perm])


def test_sentence_attention_refuses_empty_and_long_sources():
    tr = Translator.from_bundle(tiny_bundle())
    with pytest.raises(ValueError, match="nothing to translate"):
        sentence_attention(tr, "   ")
    with pytest.raises(ValueError, match="attention is limited to 3"):
        sentence_attention(tr, "1 2 3 4", max_src_tokens=3)


@pytest.mark.slow
@pytest.mark.parametrize("reverse_source", [False, True])
def test_viz_and_serve_return_the_same_numbers(reverse_source):
    pytest.importorskip("matplotlib")
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit import viz
    from nmtkit.serve.app import create_app

    bundle = tiny_bundle(reverse_source)
    text = "3 1 4 1 5"
    att = viz.attention_for_text(bundle, text, beam=2)
    with TestClient(create_app(bundle)) as c:
        r = c.post("/v1/attention", json={"text": text, "beam": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translation"] == att.translation
    assert body["tokens"]["source"] == att.src_tokens
    assert body["tokens"]["target"] == att.tgt_out_tokens
    assert body["tokens"]["target_in"] == att.tgt_in_tokens
    assert set(body["attention"]) == set(att.maps)
    for kind, arr in att.maps.items():
        served = body["attention"][kind]
        assert (served["layers"], served["heads"]) == arr.shape[:2]
        np.testing.assert_allclose(np.array(served["weights"]), arr, atol=1e-5, rtol=0)


def test_a_model_without_attention_maps_falls_back_to_the_search():
    bundle = tiny_bundle()

    class NoMaps:  # the model without attention_maps
        def __init__(self, model):
            self._model = model

        def __getattr__(self, name):
            if name == "attention_maps":
                raise AttributeError(name)
            return getattr(self._model, name)

    tr = Translator.from_bundle(bundle)
    att = sentence_attention(tr, "1 2 3", model=NoMaps(bundle.model), need_attention=True)
    assert list(att.maps) == ["decoder_src"]
    torch.testing.assert_close(att.maps["decoder_src"][0, 0], torch.from_numpy(att.translation.attention))
    with pytest.raises(ValueError, match="exposes no attention"):
        sentence_attention(tr, "1 2 3", model=NoMaps(bundle.model))


def test_translator_attention_is_in_reading_order():
    rev = tiny_bundle(True)
    h = Translator.from_bundle(rev, beam=1).translate(["1 2 3"], TranslateOptions(need_attention=True))[0][0]
    src_toks, src_ids = Translator.from_bundle(rev).encode_source("1 2 3")
    assert src_ids.tolist() == [*VOCAB.encode(["3", "2", "1"], add_eos=True)]
    tgt_in = [BOS, *VOCAB.encode(h.tokens, add_eos=False)]
    raw = teacher_forced_maps(rev.model, src_ids.tolist(), tgt_in)["decoder_src"][-1].mean(0)
    torch.testing.assert_close(torch.from_numpy(h.attention), raw[:, [2, 1, 0, 3]], atol=1e-5, rtol=0)
