"""Right-to-left models (data.reverse_target) and reranking with them (--r2l-model): the
training targets, the translator's output back in reading order, the score against a
step-by-step computation, the choice, the command line, `nmtkit tune` and the refusals."""

import json

import numpy as np
import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import main as cli_main
from nmtkit.config import DecodeConfig
from nmtkit.data.directions import Direction
from nmtkit.data.prepare import build_vocabularies, encode_pairs, pairs_of
from nmtkit.decode import rerank
from nmtkit.decode.ensemble import ensemble_translator
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.reverse_models import ReverseScorer, reverse_scorer
from nmtkit.decode.sentence_attention import sentence_attention
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import PAR, make_cfg, step_by_step, whitespace_cfg

LINES = ["1 2 3 4 5", "7 7 8", "", "3 9 1 4 4 2", "5"]
WEIGHT = 20.0  # large enough for the right-to-left score to change choices of these tiny models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(a left-to-right de->en copy model, a right-to-left one), briefly trained."""
    run = tmp_path_factory.mktemp("r2l")
    Trainer(make_cfg(20), run / "l2r").run()
    Trainer(make_cfg(20, ["data.reverse_target=true", "train.seed=9"]), run / "r2l").run()
    return run / "l2r" / "last.pt", run / "r2l" / "last.pt"


def test_reverse_target_reverses_the_training_targets_only():
    cfg = whitespace_cfg(joint_vocab=False, min_freq=1, reverse_target=True)
    v = build_vocabularies(cfg, pairs_of(PAR))
    (s, t), = encode_pairs(cfg, [("a b c", "x y z")], v, False, "t")
    assert v.src_vocab.decode(s, strip_special=False) == ["a", "b", "c", "</s>"]
    assert v.tgt_vocab.decode(t) == ["z", "y", "x"]


@pytest.mark.slow
def test_the_translator_puts_a_right_to_left_output_back_in_reading_order(models):
    bundle = load_bundle(models[1])
    tr = Translator.from_bundle(bundle)
    assert tr.reverse_target
    raw = Translator.from_bundle(bundle)
    raw.reverse_target = False  # the same search, its output in the order the model wrote it
    got = tr.translate(LINES, TranslateOptions(beam=3, n_best=2, token_scores=True, need_attention=True))
    written = raw.translate(LINES, TranslateOptions(beam=3, n_best=2, token_scores=True, need_attention=True))
    for hs, ws in zip(got, written, strict=True):
        for h, w in zip(hs, ws, strict=True):
            n = len(w.tokens)
            assert h.tokens == w.tokens[::-1] and h.text == " ".join(w.tokens[::-1])
            assert h.score == w.score
            if not n:
                continue
            assert h.token_log_probs == [*w.token_log_probs[:n][::-1], *w.token_log_probs[n:]]
            rows = [*range(n - 1, -1, -1), *range(n, len(w.attention))]  # tokens', then </s>
            assert np.array_equal(h.attention, w.attention[rows])


def step_by_step_r2l(bundle, candidate: str, source: str) -> float:
    """(1 / (|y| + 1)) log P(reversed(y) </s> | x) by the model's incremental decoder
    (:func:`tests.test_rerank.step_by_step` with the model reading the source and scoring the
    candidate's words last first: the copy task's tokens are its words)."""
    return step_by_step(bundle, source, " ".join(candidate.split()[::-1]))


@pytest.mark.slow
def test_the_r2l_score_is_the_mean_log_probability_of_the_reversed_candidate(models):
    r2l = load_bundle(models[1])
    pairs = [("1 2 3", "1 2 3"), ("4 4 9", "9 4"), ("1", "9 8 7 6 5 4 3 2 1"), ("", "3")]
    cands, srcs = zip(*pairs, strict=True)
    scorer = ReverseScorer([], r2l=[Translator.from_bundle(r2l)], batch_size=3)
    got = scorer.score_r2l(cands, srcs)
    assert got == pytest.approx([step_by_step_r2l(r2l, y, x) for y, x in pairs], abs=1e-4)
    assert got[0] != pytest.approx(step_by_step_r2l(r2l, "3 2 1", "1 2 3"), abs=1e-3)  # order counts
    with pytest.raises(ValueError, match="no model of this kind"):
        scorer.score(cands, srcs)
    with pytest.raises(ValueError, match="at least one reverse or right-to-left model"):
        ReverseScorer([], r2l=[])


def cand(text, score, reverse=None, r2l=None):
    return Translation(text, text.split(), [], score, reverse_log_prob=reverse, r2l_log_prob=r2l)


def test_choose_adds_each_kind_of_score_with_its_own_weight():
    cands = [cand("a b", -1.0, -3.0, -2.0), cand("a b c", -1.2, -1.0, -4.0), cand("a", -2.0, -0.5, -0.1)]
    cfg = DecodeConfig(rerank=3, n_best=3, reverse_weight=1.0, r2l_weight=0.0)
    assert [c.text for c in rerank.choose(cands, cfg)] == ["a b c", "a", "a b"]  # -2.2 -2.5 -4
    cfg = DecodeConfig(rerank=3, n_best=3, reverse_weight=0.0, r2l_weight=1.0)
    assert [c.text for c in rerank.choose(cands, cfg)] == ["a", "a b", "a b c"]  # -2.1 -3 -5.2
    cfg = DecodeConfig(rerank=3, n_best=3, reverse_weight=1.0, r2l_weight=0.5)
    got = rerank.choose(cands, cfg)
    assert [(c.text, c.rerank_score) for c in got] == [("a", pytest.approx(-2.55)),
        ("a b c", pytest.approx(-4.2)), ("a b", pytest.approx(-5.0))]
    only_r2l = [cand("x", -1.0, r2l=-3.0), cand("y", -2.0, r2l=-0.5)]  # no reverse model
    assert rerank.choose(only_r2l, DecodeConfig(rerank=2, r2l_weight=1.0))[0].text == "y"


@pytest.mark.slow
def test_the_translator_reranks_with_both_kinds(models):
    l2r, r2l = load_bundle(models[0]), load_bundle(models[1])
    scorer = reverse_scorer([], Direction("de", "en"), r2l=[r2l])
    cands = Translator.from_bundle(l2r).translate(LINES, TranslateOptions(beam=6, n_best=6))
    tr = Translator.from_bundle(l2r, rerank=6, r2l_weight=WEIGHT)
    tr.reverse = scorer
    got = tr.translate(LINES)
    for line, cs, out in zip(LINES, cands, got, strict=True):
        if not line:
            assert out[0].text == ""
            continue
        r2l_lp = scorer.score_r2l([c.text for c in cs], [line] * len(cs))
        total = [c.score + WEIGHT * r for c, r in zip(cs, r2l_lp, strict=True)]
        best = max(range(len(cs)), key=lambda i: (total[i], -i))
        assert out[0].tokens == cs[best].tokens
        assert out[0].rerank_score == pytest.approx(total[best], abs=1e-5)
        assert out[0].reverse_log_prob is None and out[0].r2l_log_prob is not None
    assert any(o[0].tokens != cs[0].tokens for cs, o in zip(cands, got, strict=True))  # it matters


@pytest.mark.slow
def test_right_to_left_models_are_checked(models):
    l2r, r2l = load_bundle(models[0]), load_bundle(models[1])
    with pytest.raises(ValueError, match="l2r.pt writes left to right"):
        reverse_scorer([], Direction("de", "en"), r2l=[l2r], r2l_names=["l2r.pt"])
    with pytest.raises(ValueError, match="r2l.pt translates de->en: a right-to-left model for "
                       "a en->de model must translate en->de"):
        reverse_scorer([], Direction("en", "de"), r2l=[r2l], r2l_names=["r2l.pt"])
    with pytest.raises(ValueError, match="one writes its output right to left"):
        ensemble_translator([l2r, r2l])
    with pytest.raises(ValueError, match="cannot continue a forced prefix"):
        Translator.from_bundle(r2l).translate(["1 2 3"], TranslateOptions(prefixes=["1"]))
    with pytest.raises(ValueError, match="inspect the left-to-right model"):
        sentence_attention(Translator.from_bundle(r2l), "1 2 3")


@pytest.mark.slow
def test_constraint_phrases_come_out_in_reading_order(models):
    tr = Translator.from_bundle(load_bundle(models[1]))
    out = tr.translate(["1 2 3 4 5", "7 7 8"], TranslateOptions(beam=4, constraints=[["9 3"], ["5 6 2"]]))
    assert "9 3" in out[0][0].text and "5 6 2" in out[1][0].text
    assert all(h[0].constraints_met for h in out)


@pytest.mark.slow
def test_ctranslate2_export_refuses_a_right_to_left_model(models):
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2 import ExportError, check_exportable

    with pytest.raises(ExportError, match="a right-to-left model"):
        check_exportable(load_bundle(models[1]), "r2l.pt")


@pytest.mark.slow
def test_cli_reranks_tunes_and_evaluates_with_r2l_models(models, tmp_path, capsys):
    l2r, r2l = map(str, models)
    src, ref = tmp_path / "in.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(LINES) + "\n")
    ref.write_text("\n".join(LINES) + "\n")
    assert cli_main(["translate", "--model", l2r, "-i", str(src), "--beam", "4", "--rerank", "6",
                     "--r2l-model", r2l, "--r2l-weight", str(WEIGHT)]) == 0
    printed = capsys.readouterr().out.splitlines()
    tr = Translator.from_bundle(load_bundle(l2r), beam=4, rerank=6, r2l_weight=WEIGHT)
    tr.reverse = reverse_scorer([], Direction("de", "en"), r2l=[load_bundle(r2l)])
    assert printed == tr.translate_lines(LINES)
    assert cli_main(["translate", "--model", l2r, "-i", str(src), "--r2l-model", r2l]) == 2
    assert "--r2l-model scores the candidates of decode.rerank" in capsys.readouterr().err
    assert cli_main(["translate", "--model", l2r, "-i", str(src), "--rerank", "4",
                     "--r2l-model", l2r]) == 2
    assert "writes left to right" in capsys.readouterr().err

    tune = ["tune", "--model", l2r, "--src", str(src), "--ref", str(ref), "--beam", "5",
            "--length-penalty", "0.6", "--rerank", "0", "5", "--r2l-model", r2l,
            "--r2l-weight", "0", "1", "3"]
    assert cli_main(tune) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    trials, summary = printed[:-1], printed[-1]
    assert [(t["rerank"], t["reverse_weight"], t["r2l_weight"]) for t in trials] == [
        (0, None, None), (5, 0.0, 0.0), (5, 0.0, 1.0), (5, 0.0, 3.0)]
    assert trials[1]["bleu"] == pytest.approx(trials[0]["bleu"])  # weight 0: the beam's order
    evaluate = ["evaluate", "--model", l2r, "--src", str(src), "--ref", str(ref)]
    flags = summary["flags"].split()  # the best setting decodes as it scored
    assert cli_main([*evaluate, *flags, *(["--r2l-model", r2l] if "--rerank" in flags else [])]) == 0
    assert json.loads(capsys.readouterr().out)["bleu"] == pytest.approx(summary["best"]["bleu"])
    assert cli_main([*evaluate, "--beam", "5", "--length-penalty", "0.6", "--rerank", "5",
                     "--r2l-model", r2l, "--r2l-weight", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["r2l_weight"] == 3.0 and result["r2l_model"] == [r2l]
    assert result["bleu"] == pytest.approx(trials[3]["bleu"])


@pytest.mark.slow
def test_the_server_reranks_with_r2l_models_and_says_so(models):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.cli import build_parser
    from nmtkit.cli.serve import served_bundle
    from nmtkit.serve.app import create_app

    l2r, r2l = map(str, models)
    bundle, tr = served_bundle(build_parser().parse_args(
        ["serve", "--model", l2r, "--r2l-model", r2l, "--rerank", "6", "--r2l-weight", str(WEIGHT)]))
    want = Translator.from_bundle(load_bundle(l2r), rerank=6, r2l_weight=WEIGHT)
    want.reverse = reverse_scorer([], Direction("de", "en"), r2l=[load_bundle(r2l)])
    with TestClient(create_app(bundle, translator=tr)) as c:
        got = c.post("/v1/translate", json={"texts": LINES}).json()["translations"]
        health = c.get("/health").json()
    assert got == want.translate_lines(LINES)
    assert health["rerank"] == {"candidates": 6, "reverse_models": 0, "r2l_weight": WEIGHT,
                                "r2l_models": 1, "reverse_weight": want.decode_cfg.reverse_weight}
