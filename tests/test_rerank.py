"""Reranking with a reverse model (nmtkit.decode.rerank): the reverse score against a
step-by-step computation, the choice, and reranking inside the translator, the command
line, `nmtkit tune` and validation."""

import json

import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import main as cli_main
from nmtkit.config import DecodeConfig
from nmtkit.data.directions import Direction
from nmtkit.decode import rerank
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.reverse_models import ReverseScorer, reverse_scorer
from nmtkit.decode.text_translator import decode_options
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import copy_sentences as sentences
from .helpers import exported_copy_model, make_cfg, step_by_step

WEIGHT = 20.0  # enough for the reverse score to change some choices of these barely trained models
LINES = ["1 2 3 4 5", "7 7 8", "", "3 9 1 4 4 2", "5"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(a de->en copy model, an en->de one: its reverse), briefly trained, different seeds."""
    run = tmp_path_factory.mktemp("rerank")
    Trainer(make_cfg(20), run / "fwd").run()
    Trainer(make_cfg(20, ["data.src_lang=en", "data.tgt_lang=de", "train.seed=7"]),
            run / "rev").run()
    return run / "fwd" / "last.pt", run / "rev" / "last.pt"


@pytest.mark.slow
def test_the_reverse_score_is_the_mean_log_probability_of_the_source(models):
    rev = load_bundle(models[1])
    pairs = [("1 2 3", "1 2 3"), ("", "4 4"), ("9 8 7 6 5 4 3 2 1", "1"), ("2", "3 3 3 3 3 3")]
    got = ReverseScorer([Translator.from_bundle(rev)], batch_size=3).score(*zip(*pairs, strict=True))
    want = [step_by_step(rev, y, x) for y, x in pairs]
    assert got == pytest.approx(want, abs=1e-4)
    other = load_bundle(models[0])  # a second reverse model: the mean of the two
    both = ReverseScorer([Translator.from_bundle(rev), Translator.from_bundle(other)]).score(
        *zip(*pairs, strict=True))
    want2 = [step_by_step(other, y, x) for y, x in pairs]
    assert both == pytest.approx([(a + b) / 2 for a, b in zip(want, want2, strict=True)], abs=1e-4)
    assert ReverseScorer([Translator.from_bundle(rev)]).score([], []) == []
    with pytest.raises(ValueError, match="2 candidates vs 1 sources"):
        ReverseScorer([Translator.from_bundle(rev)]).score(["1", "2"], ["1"])
    with pytest.raises(ValueError, match="at least one reverse or right-to-left model"):
        ReverseScorer([])


def cand(text, score, reverse, met=True):
    return Translation(text, text.split(), [], score, constraints_met=met, reverse_log_prob=reverse)


def test_choose_adds_the_weighted_reverse_score_to_the_beams():
    cands = [cand("a b", -1.0, -3.0), cand("a b c", -1.2, -1.0), cand("a", -2.0, -0.5)]
    beam_order = rerank.choose(cands, DecodeConfig(rerank=3, n_best=3, reverse_weight=0.0))
    assert [c.text for c in beam_order] == ["a b", "a b c", "a"]  # weight 0: the beam's order
    got = rerank.choose(cands, DecodeConfig(rerank=3, n_best=2, reverse_weight=1.0))
    assert [c.text for c in got] == ["a b c", "a"]  # -2.2, -2.5, -4.0
    assert [c.rerank_score for c in got] == pytest.approx([-2.2, -2.5])
    lacking = [cand("x", 0.0, 0.0, met=False), cand("y", -5.0, -5.0)]
    assert rerank.choose(lacking, DecodeConfig(rerank=2))[0].text == "y"  # constraints first
    empty = [Translation("", [], [], 0.0)] * 3
    assert rerank.choose(empty, DecodeConfig(rerank=3)) == empty[:1]


@pytest.mark.slow
def test_the_translator_reranks_its_n_best_with_the_reverse_model(models):
    fwd, rev = load_bundle(models[0]), load_bundle(models[1])
    scorer = ReverseScorer([Translator.from_bundle(rev)])
    cands = Translator.from_bundle(fwd).translate(LINES, TranslateOptions(beam=6, n_best=6))
    tr = Translator.from_bundle(fwd, rerank=6, reverse_weight=WEIGHT)
    with pytest.raises(ValueError, match="decode.rerank needs a model of the reverse direction"):
        tr.translate(LINES)
    tr.reverse = scorer
    got = tr.translate(LINES, TranslateOptions(n_best=2))
    for line, cs, out in zip(LINES, cands, got, strict=True):
        if not line:
            assert [t.text for t in out] == ["", ""]
            continue
        rev_lp = scorer.score([c.text for c in cs], [line] * len(cs))
        total = [c.score + WEIGHT * r for c, r in zip(cs, rev_lp, strict=True)]
        order = sorted(range(len(cs)), key=lambda i: (-total[i], i))[:2]
        assert [t.tokens for t in out] == [cs[i].tokens for i in order]
        assert [t.rerank_score for t in out] == pytest.approx([total[i] for i in order], abs=1e-5)
    assert any(out[0].tokens != cs[0].tokens for cs, out in zip(cands, got, strict=True) if cs[0].tokens)
    plain = Translator.from_bundle(fwd, rerank=6, reverse_weight=0.0)
    plain.reverse = scorer
    assert [r[0].tokens for r in plain.translate(LINES)] == [
        # weight 0: the beam's
        r[0].tokens for r in Translator.from_bundle(fwd).translate(LINES, TranslateOptions(beam=6))]


@pytest.mark.slow
def test_a_reverse_model_must_translate_the_other_way(models):
    fwd, rev = load_bundle(models[0]), load_bundle(models[1])
    with pytest.raises(ValueError, match="same.pt translates de->en: a reverse model for a "
                       "de->en model must translate en->de"):
        reverse_scorer([fwd], Direction("de", "en"), ["same.pt"])
    # the direction asked for, not the forward checkpoint's own: a multilingual forward model
    # translating into de needs an en <- de model, i.e. a de->en one
    assert reverse_scorer([fwd], Direction("en", "de")).tgt_langs == [None]
    with pytest.raises(ValueError, match="must translate de->en"):
        reverse_scorer([rev], Direction("en", "de"), ["rev.pt"])
    assert reverse_scorer([rev, rev], Direction("de", "en")).tgt_langs == [None, None]
    with pytest.raises(ValueError, match="2 target languages for 1 reverse models"):
        ReverseScorer([Translator.from_bundle(rev)], [None, None])


@pytest.mark.slow
def test_cli_translate_and_evaluate_rerank(models, tmp_path, capsys):
    fwd, rev = map(str, models)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    args = ["translate", "--model", fwd, "-i", str(src), "--beam", "4"]
    assert cli_main([*args, "--rerank", "6", "--reverse-model", rev, "--reverse-weight", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    tr = Translator.from_bundle(load_bundle(models[0]), beam=4, rerank=6, reverse_weight=3.0)
    tr.reverse = ReverseScorer([Translator.from_bundle(load_bundle(models[1]))])
    assert printed == tr.translate_lines(LINES)
    assert cli_main([*args, "--rerank", "6", "--reverse-model", rev, "--reverse-weight", "3",
                     "--n-best", "3"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    nbest = tr.translate(LINES, TranslateOptions(n_best=3))
    ordered_by = [h.score if h.rerank_score is None else h.rerank_score  # an empty line: None
                  for hs in nbest for h in hs]
    assert rows == [[str(i), f"{s:.4f}", h.text] for (i, h), s in zip(
        ((i, h) for i, hs in enumerate(nbest) for h in hs), ordered_by, strict=True)]
    assert any(h.rerank_score not in (None, h.score) for hs in nbest for h in hs)
    assert cli_main([*args, "--reverse-model", rev]) == 2
    assert "--reverse-model scores the candidates of decode.rerank: add --rerank N" in \
        capsys.readouterr().err
    assert cli_main([*args, "--rerank", "6"]) == 2
    assert "decode.rerank needs a model of the reverse direction" in capsys.readouterr().err
    assert cli_main([*args, "--rerank", "6", "--reverse-model", fwd]) == 2
    assert "must translate en->de" in capsys.readouterr().err
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(LINES) + "\n")
    assert cli_main(["evaluate", "--model", fwd, "--src", str(src), "--ref", str(ref), "--beam",
                     "4", "--rerank", "6", "--reverse-model", rev, "--reverse-weight", "3"]) == 0
    from nmtkit.evaluate import score
    result = json.loads(capsys.readouterr().out)
    assert result["bleu"] == score(printed, LINES)["bleu"]
    assert (result["rerank"], result["reverse_weight"], result["reverse_model"]) == (6, 3.0, [rev])


@pytest.mark.slow
def test_cli_tune_tries_reverse_weights_on_one_search_and_its_flags_decode_as_scored(
        models, tmp_path, capsys):
    fwd, rev = map(str, models)
    src, ref = tmp_path / "dev.src", tmp_path / "dev.ref"
    src.write_text("1 2 3 4 5\n7 7 3 9\n10 2 2 5 6 1\n")
    ref.write_text("1 2 3 4 5\n7 7 3\n10 2 5 6 1\n")
    tune = ["tune", "--model", fwd, "--src", str(src), "--ref", str(ref), "--beam", "5",
            "--length-penalty", "0.6"]
    assert cli_main([*tune, "--rerank", "0", "5", "--reverse-model", rev,
                     "--reverse-weight", "0", "4"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["rerank"], p["reverse_weight"]) for p in printed[:3]] == [(0, None), (5, 0.0), (5, 4.0)]
    assert printed[1]["bleu"] == printed[0]["bleu"]  # weight 0: the beam's own best (beam 5 both)
    assert printed[1]["seconds"] == printed[2]["seconds"]  # one search for both weights
    out = tmp_path / "hyp.txt"
    flags = "--beam 5 --length-penalty 0.6 --rerank 5 --reverse-weight 4".split()
    assert cli_main(["translate", "--model", fwd, "-i", str(src), "-o", str(out), *flags,
                     "--reverse-model", rev]) == 0
    from nmtkit.evaluate import score
    assert score(out.read_text().splitlines(), ref.read_text().splitlines())["bleu"] == \
        printed[2]["bleu"]
    # MBR among the reranking's best: the same search, and its flags decode as scored too
    assert cli_main([*tune, "--rerank", "5", "--mbr", "0", "3", "--reverse-model", rev,
                     "--reverse-weight", "4"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    both = [p for p in printed if p.get("rerank") == 5 and p.get("mbr") == 3]
    alone = [p for p in printed if p.get("rerank") == 5 and not p.get("mbr")]
    assert len(both) == 1 and len(alone) == 1 and both[0]["seconds"] == alone[0]["seconds"]
    flags = "--beam 5 --length-penalty 0.6 --rerank 5 --reverse-weight 4 --mbr 3".split()
    assert cli_main(["translate", "--model", fwd, "-i", str(src), "-o", str(out), *flags,
                     "--reverse-model", rev]) == 0
    assert score(out.read_text().splitlines(), ref.read_text().splitlines())["bleu"] == \
        both[0]["bleu"]
    assert cli_main([*tune, "--rerank", "5"]) == 2
    assert "--rerank scores candidates with a model of the reverse direction" in \
        capsys.readouterr().err


@pytest.mark.slow
def test_validation_does_not_rerank_when_the_recipe_does(tmp_path):
    """decode.rerank in a recipe is for translate/evaluate with a reverse model: validation
    (greedy BLEU, sample translations) has none and must not ask for one."""
    trainer = Trainer(make_cfg(4, ["decode.beam=4", "decode.rerank=4",
                                   "train.valid_bleu=true"]), tmp_path)
    assert "valid_bleu" in trainer.validate()
    with pytest.raises(ValueError, match="decode.rerank needs a model"):
        Translator.from_bundle(trainer.bundle()).translate(["1 2 3"])


@pytest.mark.slow
def test_ctranslate2_reranks_as_nmtkit_does(tmp_path):
    """The exported engine's n best, scored by the same reverse model, are reranked by the
    same rule (its scores are CTranslate2's own: log P / (len + 1) ** length_penalty)."""
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator

    ckpt, out = exported_copy_model(tmp_path, "pre-bias-tied")
    scorer = ReverseScorer([Translator.from_bundle(load_bundle(ckpt))])  # the copy model reads both ways
    lines = sentences(8, seed=4)
    tr = CTranslate2Translator(out, intra_threads=1)
    cands = tr.translate(lines, TranslateOptions(beam=4, n_best=4, length_penalty=0.6))
    tr.decode_cfg = decode_options(tr.decode_cfg, rerank=4, reverse_weight=5.0,
                                   length_penalty=0.6, beam=4)
    with pytest.raises(ValueError, match="decode.rerank needs a model of the reverse direction"):
        tr.translate(lines)
    tr.reverse = scorer
    chosen = tr.translate(lines)
    for line, cs, got in zip(lines, cands, chosen, strict=True):
        rev_lp = scorer.score([c.text for c in cs], [line] * 4)
        total = [c.score + 5.0 * r for c, r in zip(cs, rev_lp, strict=True)]
        assert got[0].tokens == cs[max(range(4), key=lambda i: (total[i], -i))].tokens
    assert any(got[0].tokens != cs[0].tokens for cs, got in zip(cands, chosen, strict=True))


@pytest.mark.slow
def test_readers_without_a_reverse_model_answer_with_the_beams_best(tmp_path, caplog):
    """A checkpoint whose recipe reranks (decode.rerank) is still served, plotted and scored
    during fine-tuning: those readers load no reverse model, so they use the beam's best
    (the server says so once) instead of failing on every request."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app
    from nmtkit.train.finetune import score_splits
    from nmtkit.viz.attention import attention_for_text

    trainer = Trainer(make_cfg(10, ["decode.beam=4", "decode.rerank=4"]), tmp_path)
    trainer.run()
    bundle = load_bundle(tmp_path / "last.pt")
    want = Translator.from_bundle(bundle, rerank=0).translate_lines(["1 2 3", "4 5"])
    with caplog.at_level("WARNING"), TestClient(create_app(bundle)) as c:
        r = c.post("/v1/translate", json={"texts": ["1 2 3", "4 5"]})
    assert r.status_code == 200 and r.json()["translations"] == want
    assert "decode.rerank (4) is not used" in caplog.text
    assert attention_for_text(bundle, "1 2 3").translation == want[0]
    assert set(score_splits(bundle, bundle.cfg.data, ("val",))) == {"val"}


@pytest.mark.slow
def test_the_server_reranks_every_answer_with_the_reverse_models_given(models):
    """`nmtkit serve --reverse-model R --rerank N --reverse-weight W`: /v1/translate and
    /v1/attention answer with the translation `nmtkit translate` gives with the same flags,
    /health says how; the flags are refused where they cannot apply."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.cli import build_parser
    from nmtkit.cli.serve import served_bundle
    from nmtkit.serve.app import create_app

    fwd, rev = map(str, models)

    def serve(*flags):
        return served_bundle(build_parser().parse_args(["serve", "--model", fwd, *flags]))

    bundle, tr = serve("--reverse-model", rev, "--rerank", "6", "--reverse-weight", str(WEIGHT))
    fwd_tr = Translator.from_bundle(load_bundle(fwd), rerank=6, reverse_weight=WEIGHT)
    fwd_tr.reverse = ReverseScorer([Translator.from_bundle(load_bundle(rev))])
    want = fwd_tr.translate_lines(LINES)
    assert want != Translator.from_bundle(load_bundle(fwd), beam=6).translate_lines(LINES)  # it matters here
    with TestClient(create_app(bundle, translator=tr)) as c:
        got = c.post("/v1/translate", json={"texts": LINES}).json()["translations"]
        att = c.post("/v1/attention", json={"text": LINES[3]}).json()
        health = c.get("/health").json()
        both = c.post("/v1/translate", json={"texts": LINES[:2], "mbr": 3})  # MBR among its 3 best
        too_many = c.post("/v1/translate", json={"texts": LINES[:2], "mbr": 6})
    assert got == want
    assert att["translation"] == want[3]  # the maps of the reranked choice
    assert health["rerank"] == {"candidates": 6, "reverse_weight": WEIGHT, "reverse_models": 1,
                                "r2l_weight": None, "r2l_models": 0}
    assert both.status_code == 200
    assert both.json()["translations"] == [r[0].text for r in fwd_tr.translate(LINES[:2],
                                                                                TranslateOptions(mbr=3))]
    assert too_many.status_code == 422 and "ask for fewer than 6" in too_many.text
    with TestClient(create_app(load_bundle(fwd))) as c:
        assert c.get("/health").json()["rerank"] is None
    with pytest.raises(ValueError, match="--rerank needs the model"):
        serve("--rerank", "6")
    with pytest.raises(ValueError, match="add --rerank N"):
        serve("--reverse-model", rev)
    with pytest.raises(ValueError, match="must translate en->de"):
        serve("--reverse-model", fwd, "--rerank", "6")
    with pytest.raises(ValueError, match="with --engine torch"):
        serve("--engine", "ctranslate2", "--reverse-model", rev, "--rerank", "6")
