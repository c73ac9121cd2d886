"""decode/translator.py: text in, text out; options resolved in one place."""

import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.config import DecodeConfig
from nmtkit.decode.translator import Translator, decode_options
from nmtkit.train.loop import Trainer

from .test_checkpoint import make_cfg


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = tmp_path_factory.mktemp("translator")
    Trainer(make_cfg(30, ["decode.n_best=2", "decode.beam=3"]), run).run()
    return load_bundle(run / "last.pt")


def test_decode_options_keep_defaults_for_none():
    cfg = DecodeConfig()
    assert decode_options(cfg) is cfg
    assert decode_options(cfg, beam=None, batch_size=None) == cfg
    got = decode_options(cfg, beam=2, early_stop=True, length_penalty=None)
    assert (got.beam, got.early_stop, got.length_penalty) == (2, True, cfg.length_penalty)
    assert cfg.beam == DecodeConfig().beam  # the original is not changed


def test_from_bundle_uses_stored_options_and_n_best(bundle):
    tr = Translator.from_bundle(bundle)
    assert tr.decode_cfg == bundle.cfg.decode
    out = tr.translate(["1 2 3", "4 5"])
    assert [len(hs) for hs in out] == [2, 2]  # decode.n_best from the checkpoint
    assert all(hs[0].score >= hs[1].score for hs in out)
    greedy = Translator.from_bundle(bundle, beam=1, n_best=1).translate(["1 2 3"])
    assert len(greedy[0]) == 1
    assert bundle.translator().decode_cfg == tr.decode_cfg  # the shorthand is the same door


def test_order_empty_lines_and_caps(bundle):
    tr = Translator.from_bundle(bundle, beam=1)
    lines = ["1 2 3 4 5 6", "", "7", "   ", "2 3"]
    out = tr.translate_lines(lines, batch_size=2)
    assert len(out) == len(lines) and out[1] == "" and out[3] == ""
    assert out == tr.translate_lines(lines, batch_size=64)  # batching does not change results
    capped = tr.translate(lines, max_length=2)
    assert all(len(hs[0].tokens) <= 2 for hs in capped)
    with pytest.raises(ValueError, match="beam"):
        tr.translate(["1"], beam=0)
    with pytest.raises(ValueError, match="max_length"):
        tr.translate(["1"], max_length=0)


def test_attention_is_returned_per_output_token(bundle):
    hyp = Translator.from_bundle(bundle, beam=1).translate(["1 2 3"], need_attention=True)[0][0]
    assert hyp.attention is not None
    assert tuple(hyp.attention.shape) == (len(hyp.tokens) + 1, len(hyp.src_tokens) + 1)
