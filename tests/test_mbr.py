"""Minimum Bayes risk decoding (nmtkit.decode.mbr): the utilities against sacreBLEU's own
sentence scores, the expectation and its weights, and MBR inside both translators and the
command line."""

import json
import math

import pytest
from sacrebleu.metrics import BLEU, CHRF

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import main as cli_main
from nmtkit.config import Config, ConfigError, DecodeConfig
from nmtkit.decode import mbr
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.text_translator import decode_options
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator
from nmtkit.evaluate import word_punct_tokens
from nmtkit.train.loop import Trainer

from .helpers import copy_sentences as sentences
from .helpers import exported_copy_model, make_cfg, nmtkit_log_prob

PAIRS = [
    ("ein mann fährt mit dem fahrrad .", "ein mann fährt fahrrad auf der straße ."),
    ("Zwei Kinder spielen im Sand.", "zwei kleine Kinder spielen am Strand im Sand ."),
    ("a b c d e f", "a b c d e f"),
    ("der hund läuft", "eine katze schläft auf dem sofa"),
    ("Ein Mann, der singt.", "Ein Mann singt laut."),
    ("x", "x y z w v u t s"),
]


def grams(text, utility):
    return mbr._grams(text, utility)


@pytest.mark.parametrize("hyp,ref", PAIRS)
def test_bleu_plus_one_is_sacrebleus_sentence_bleu_with_add_one_smoothing(hyp, ref):
    """BLEU+1 (Lin & Och 2004) is sacreBLEU's add-k smoothing with k = 1 (2- to 4-grams)
    on the same word/punctuation tokens."""
    theirs = BLEU(tokenize="none", smooth_method="add-k", smooth_value=1).sentence_score(
        " ".join(word_punct_tokens(hyp)), [" ".join(word_punct_tokens(ref))]).score
    assert mbr.bleu_plus_one(grams(hyp, "bleu"), grams(ref, "bleu")) * 100 == pytest.approx(theirs, abs=1e-9)


@pytest.mark.parametrize("hyp,ref", PAIRS)
def test_chrf_is_sacrebleus_sentence_chrf(hyp, ref):
    theirs = CHRF().sentence_score(hyp, [ref]).score
    assert mbr.chrf(grams(hyp, "chrf"), grams(ref, "chrf")) * 100 == pytest.approx(theirs, abs=1e-9)


def test_an_unknown_utility_is_named():
    with pytest.raises(ValueError, match="choose one of bleu, chrf"):
        mbr.utility_matrix(["a"], "ter")


def test_utilities_of_empty_texts():
    for utility in mbr.UTILITIES:
        u = mbr.utility_matrix(["", "a b", ""], utility)
        assert u[0][2] == 1.0 and u[0][1] == 0.0 and u[1][0] == 0.0 and u[1][1] == 1.0


def test_weights_are_the_renormalised_powers_of_the_probabilities():
    lps = [-1.0, -2.0, -4.0]
    w = mbr.weights(lps, 3, 1.0)
    z = sum(math.exp(x) for x in lps)
    assert w == pytest.approx([math.exp(x) / z for x in lps])
    assert mbr.weights(lps, 3, 0.0) == pytest.approx([1 / 3] * 3)
    assert mbr.weights(None, 4, 1.0) == pytest.approx([0.25] * 4)
    sharp = mbr.weights([-1.0, -2.0], 2, 2.0)
    assert sharp[0] == pytest.approx(1 / (1 + math.exp(-2.0)))
    # far below each other: no underflow to a zero sum
    assert mbr.weights([-5000.0, -9000.0], 2, 1.0) == pytest.approx([1.0, 0.0])


def test_the_consensus_candidate_wins_over_the_most_probable_outlier():
    """Three candidates that share most words, and a more probable one unlike them: with
    equal weights MBR picks one of the three; the expectation is a weighted row sum."""
    texts = ["a man rides a red bike", "a man rides a bike", "a man is riding a bike",
             "the dog sleeps"]
    w = mbr.weights(None, 4, 1.0)
    eu = mbr.expected_utilities(texts, w, "bleu")
    u = mbr.utility_matrix(texts, "bleu")
    assert eu == pytest.approx([sum(w[j] * u[i][j] for j in range(4)) for i in range(4)])
    assert max(range(4), key=eu.__getitem__) == 1
    assert eu[3] == min(eu)


def test_repeated_samples_count_as_often_as_they_were_drawn():
    texts = ["b c d", "a b c", "b c d", "b c d", "a b c e"]
    eu = mbr.expected_utilities(texts, [0.2] * 5, "chrf")
    assert eu[0] == eu[2] == eu[3] == max(eu)
    unique = ["b c d", "a b c", "a b c e"]
    u = mbr.utility_matrix(unique, "chrf")
    assert eu[1] == pytest.approx(0.6 * u[1][0] + 0.2 * u[1][1] + 0.2 * u[1][2])


def translation(text, log_prob, met=True):
    return Translation(text, text.split(), [], log_prob, log_prob=log_prob, constraints_met=met)


def test_choose_orders_by_expected_utility_and_keeps_constraint_keepers_first():
    cands = [translation("the dog sleeps", -0.5), translation("a man rides a bike", -1.0),
             translation("a man rides a red bike", -1.1, met=False),
             translation("a man is riding a bike", -1.2)]
    cfg = DecodeConfig(beam=4, n_best=4, mbr=4, mbr_scale=0.0)
    out = mbr.choose(cands, cfg)
    eu = mbr.expected_utilities([c.text for c in cands], [0.25] * 4, "bleu")
    assert [t.text for t in out] == ["a man rides a bike", "a man is riding a bike",
                                     "the dog sleeps", "a man rides a red bike"]
    assert [t.mbr_utility for t in out] == pytest.approx([eu[1], eu[3], eu[0], eu[2]])
    # with a large scale the weights follow the model, and its most probable one wins
    sharp = DecodeConfig(beam=4, n_best=1, mbr=4, mbr_scale=50.0)
    assert mbr.choose(cands, sharp)[0].text == "the dog sleeps"
    assert len(mbr.choose(cands, DecodeConfig(beam=4, n_best=2, mbr=4))) == 2
    empty = [Translation("", [], [], 0.0)] * 4
    assert mbr.choose(empty, DecodeConfig(mbr=4)) == empty[:1]


def test_decode_options_and_configs_check_mbr():
    with pytest.raises(ConfigError, match=r"decode\.mbr must be 0 \(off\) or at least decode\.n_best"):
        Config.from_dict({"decode": {"mbr": 2, "beam": 4, "n_best": 3}}, "r.yaml")
    with pytest.raises(ConfigError, match=r"decode\.mbr_utility must be bleu\|chrf"):
        Config.from_dict({"decode": {"mbr_utility": "ter"}}, "r.yaml")
    with pytest.raises(ValueError, match="mbr"):
        decode_options(DecodeConfig(), mbr=-3)
    assert decode_options(DecodeConfig(), mbr=8, mbr_utility="chrf").mbr_utility == "chrf"


# --- inside the translators -------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    run = tmp_path_factory.mktemp("mbr")
    Trainer(make_cfg(20), run).run()
    return run / "last.pt"


LINES = ["1 2 3 4 5", "7 7 8", "", "3 9 1 4 4 2", "5"]


@pytest.mark.slow
@pytest.mark.parametrize("utility,scale", [("bleu", 1.0), ("chrf", 0.0), ("bleu", 0.3)])
def test_the_translator_chooses_among_the_beams_n_best_as_mbr_says(model_path, utility, scale):
    """decode.mbr = 6: the output is the n-best list of a beam of 6, reordered by the
    expected utility computed here from that list (the log-probabilities the search gives)."""
    bundle = load_bundle(model_path)
    cands = Translator.from_bundle(bundle).translate(LINES, TranslateOptions(beam=6, n_best=6))
    got = Translator.from_bundle(bundle, mbr=6, mbr_utility=utility, mbr_scale=scale).translate(
        LINES, TranslateOptions(n_best=2))
    for line, cs, out in zip(LINES, cands, got, strict=True):
        if not line:
            assert [t.text for t in out] == ["", ""]
            continue
        assert all(c.log_prob is not None for c in cs)
        w = mbr.weights([c.log_prob for c in cs], len(cs), scale)
        eu = mbr.expected_utilities([c.text for c in cs], w, utility)
        order = sorted(range(len(cs)), key=lambda i: (-eu[i], i))[:2]
        assert [t.tokens for t in out] == [cs[i].tokens for i in order]
        assert [t.mbr_utility for t in out] == pytest.approx([eu[i] for i in order])


@pytest.mark.slow
def test_mbr_over_samples_weighs_each_draw_the_same(model_path):
    bundle = load_bundle(model_path)
    opts = {"sampling": True, "sampling_seed": 3, "sampling_temperature": 2.0}
    draws = Translator.from_bundle(bundle, **opts).translate(LINES[:2], TranslateOptions(n_best=10))
    got = Translator.from_bundle(bundle, mbr=10, **opts).translate(LINES[:2])
    for cs, out in zip(draws, got, strict=True):
        eu = mbr.expected_utilities([c.text for c in cs], [0.1] * 10, "bleu")
        assert len(out) == 1 and out[0].text == cs[max(range(10), key=lambda i: (eu[i], -i))].text


@pytest.mark.slow
def test_translate_takes_mbr_flags(model_path, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    assert cli_main(["translate", "--model", str(model_path), "-i", str(src),
                     "--mbr", "6", "--mbr-utility", "chrf", "--mbr-scale", "0"]) == 0
    printed = capsys.readouterr().out.splitlines()
    want = Translator.from_bundle(load_bundle(model_path), mbr=6, mbr_utility="chrf",
                                  mbr_scale=0.0).translate_lines(LINES)
    assert printed == want
    assert cli_main(["translate", "--model", str(model_path), "-i", str(src), "--mbr", "6",
                     "--n-best", "2"]) == 0  # the score column: the utility that ordered them
    nbest = Translator.from_bundle(load_bundle(model_path), mbr=6).translate(LINES,
                                                                            TranslateOptions(n_best=2))
    assert [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()] == [
        f"{h.score if h.mbr_utility is None else h.mbr_utility:.4f}" for hs in nbest for h in hs]
    assert sum(h.mbr_utility is not None for hs in nbest for h in hs) > len(LINES)  # the empty line has none
    ev = ["evaluate", "--model", str(model_path), "--src", str(src), "--ref", str(src)]
    assert cli_main([*ev, "--mbr", "6", "--mbr-utility", "chrf"]) == 0  # the JSON says how it chose
    said = json.loads(capsys.readouterr().out)
    assert (said["mbr"], said["mbr_utility"], said["mbr_scale"]) == (6, "chrf", 0.0)
    assert cli_main(ev) == 0 and "mbr" not in json.loads(capsys.readouterr().out)
    assert cli_main(["translate", "--model", str(model_path), "-i", str(src), "--mbr", "1",
                     "--n-best", "2"]) == 2
    assert "decode.mbr must be 0 (off) or at least decode.n_best" in capsys.readouterr().err


@pytest.mark.slow
def test_ctranslate2_gives_log_probabilities_and_the_same_mbr_choice(tmp_path):
    """The exported engine recovers each candidate's log-probability from its
    length-normalised score (what MBR weighs), and chooses as nmtkit.decode.mbr does."""
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator

    ckpt, out = exported_copy_model(tmp_path, "pre-bias-tied")
    bundle = load_bundle(ckpt)
    lines = sentences(8, seed=4)
    tr = CTranslate2Translator(out, intra_threads=1)
    cands = tr.translate(lines, TranslateOptions(beam=4, n_best=4, length_penalty=0.6))
    for line, cs in zip(lines, cands, strict=True):
        for c in cs:
            per_token = nmtkit_log_prob(bundle, line, c.tokens)
            assert c.log_prob == pytest.approx(float(per_token.sum()), abs=1e-3) or \
                c.log_prob == pytest.approx(float(per_token[:-1].sum()), abs=1e-3)
    tr.decode_cfg = decode_options(tr.decode_cfg, mbr=4, mbr_scale=1.0, length_penalty=0.6, beam=4)
    chosen = tr.translate(lines)
    for cs, got in zip(cands, chosen, strict=True):
        w = mbr.weights([c.log_prob for c in cs], 4, 1.0)
        eu = mbr.expected_utilities([c.text for c in cs], w, "bleu")
        assert got[0].tokens == cs[max(range(4), key=lambda i: (eu[i], -i))].tokens


@pytest.mark.slow
def test_validation_stays_greedy_when_the_recipe_decodes_with_mbr(tmp_path, monkeypatch):
    """decode.mbr in a recipe is for translate/evaluate: the greedy BLEU of validation (and
    its sample translations) must not become a beam of decode.mbr."""
    from nmtkit.decode import translator as translator_module

    trainer = Trainer(make_cfg(4, ["decode.beam=4", "decode.mbr=4", "train.valid_bleu=true"]),
                      tmp_path)
    searched = []
    real = translator_module.search

    def spy(model, src, src_mask, cfg, **kw):
        searched.append((cfg.beam, cfg.n_best, cfg.mbr))
        return real(model, src, src_mask, cfg, **kw)

    monkeypatch.setattr(translator_module, "search", spy)
    assert "valid_bleu" in trainer.validate()
    assert searched and set(searched) == {(1, 1, 0)}
    searched.clear()
    Translator.from_bundle(trainer.bundle()).translate(["1 2 3"])  # the recipe's own decoding: MBR
    assert searched == [(4, 4, 4)]
