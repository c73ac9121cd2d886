"""decode/ensemble.py: several models decoding as one (issue 15)."""

import dataclasses
import math

import pytest
import torch

from nmtkit.config import DecodeConfig
from nmtkit.data.vocab import Vocab
from nmtkit.decode.ensemble import Ensemble, ensemble_translator
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.search import search
from nmtkit.decode.translator import Translator

from .helpers import PREFIXES, make_cfg, mixed_batch, tiny_model


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize("cfg", [DecodeConfig(beam=1), DecodeConfig(beam=3, n_best=2),
                                 DecodeConfig(sampling=True, n_best=2, sampling_seed=4)],
                         ids=["greedy", "beam", "sampling"])
def test_an_ensemble_of_a_model_with_itself_equals_the_model(arch, cfg):
    model = tiny_model(arch, seed=2)
    src, mask = mixed_batch()
    for prefixes in (None, PREFIXES):
        alone = search(model, src, mask, cfg, need_attention=True, prefixes=prefixes,
                       token_scores=True)
        twice = search(Ensemble([model, model]), src, mask, cfg, need_attention=True,
                       prefixes=prefixes, token_scores=True)
        for hs, es in zip(alone, twice, strict=True):
            assert [h.tokens for h in hs] == [e.tokens for e in es]
            for h, e in zip(hs, es, strict=True):
                assert e.score == pytest.approx(h.score, abs=1e-5)
                assert e.log_prob == pytest.approx(h.log_prob, abs=1e-5)
                assert e.token_log_probs == pytest.approx(h.token_log_probs, abs=1e-5)
                torch.testing.assert_close(e.attention, h.attention, atol=1e-6, rtol=0)


@pytest.mark.parametrize("archs", [("transformer", "transformer"), ("transformer", "rnn")])
def test_a_step_is_the_log_of_the_models_mean_probability(archs):
    models = [tiny_model(a, seed=i) for i, a in enumerate(archs)]
    ens = Ensemble(models)
    src, mask = mixed_batch()
    prev = torch.tensor([1, 5, 6, 7])
    with torch.no_grad():
        got, _, attn = ens.step(ens.start(ens.encode(src, mask), mask, need_attention=True), prev)
        singles = [m.step(m.start(m.encode(src, mask), mask, need_attention=True), prev)
                   for m in models]
    mean_p = sum(lp.exp() for lp, _, _ in singles) / len(models)
    torch.testing.assert_close(got, mean_p.log(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(4), atol=1e-5, rtol=0)  # a distribution
    torch.testing.assert_close(attn, (singles[0][2] + singles[1][2]) / 2)
    assert ens.log_n == pytest.approx(math.log(2))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.train.loop import Trainer

    run = tmp_path_factory.mktemp("ensemble")
    Trainer(make_cfg(20), run).run()
    return load_bundle(run / "last.pt")


@pytest.mark.slow
def test_ensemble_translator_checks_vocabularies_and_names_the_files(bundle):
    lines = ["1 2 3", "4 5 6 7"]
    scores = TranslateOptions(token_scores=True)
    one = Translator.from_bundle(bundle, beam=2).translate(lines, scores)
    two = ensemble_translator([bundle, bundle], ["a.pt", "b.pt"], beam=2).translate(lines, scores)
    assert [h[0].text for h in one] == [h[0].text for h in two]
    assert [h[0].score for h in two] == pytest.approx([h[0].score for h in one], abs=1e-5)
    other = Vocab([*bundle.tgt_vocab.itos, "extra"])
    with pytest.raises(ValueError, match=r"cannot ensemble a\.pt and b\.pt: their target vocabulary"):
        ensemble_translator([bundle, dataclasses.replace(bundle, tgt_vocab=other)], ["a.pt", "b.pt"])
    with pytest.raises(ValueError, match=r"a\.pt and c\.pt: their source vocabulary"):
        ensemble_translator([bundle, bundle, dataclasses.replace(bundle, src_vocab=other)],
                            ["a.pt", "b.pt", "c.pt"])
