"""Sentence splitting (nmtkit.data.sentences) and the translator's line <-> sentence
bookkeeping (nmtkit.decode.lines): one output line per input line, every sentence kept, and
what n-best lists, scores and alignments of a line of several sentences are."""

import json
import logging
import os

import numpy as np
import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import build_parser
from nmtkit.cli.decode_options import decode_config_from_args
from nmtkit.config import DataConfig, DecodeConfig
from nmtkit.data import sentences
from nmtkit.data.sentences import sentence_separator, split_sentences, text_languages
from nmtkit.decode.lines import join_translations
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.targets import holds, least_cost, prefix_pieces
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator

from .helpers import nmtkit

TWO = "Ein Mann fährt mit dem Fahrrad die Straße entlang. Zwei Kinder spielen im Sand."
FIRST, SECOND = "Ein Mann fährt mit dem Fahrrad die Straße entlang.", "Zwei Kinder spielen im Sand."


# --- the splitter ------------------------------------------------------------------------------

def test_two_sentences_are_cut_and_german_abbreviations_and_ordinals_are_not():
    assert split_sentences(TWO, "de") == [FIRST, SECOND]
    assert split_sentences("Dr. Müller kam am 3. Mai.", "de") == ["Dr. Müller kam am 3. Mai."]
    assert split_sentences("Wir sahen z.B. Hunde usw. im Park.", "de") == [
        "Wir sahen z.B. Hunde usw. im Park."]
    assert split_sentences("Er kommt! Sie geht? Ja.", "de") == ["Er kommt!", "Sie geht?", "Ja."]


def test_blank_and_one_sentence_lines():
    assert split_sentences("", "de") == []
    assert split_sentences("   ", "de") == []
    assert split_sentences("  Ein Hund läuft.  ", "de") == ["Ein Hund läuft."]
    assert split_sentences("Ein Hund läuft", "de") == ["Ein Hund läuft"]


def test_no_sentence_ends_inside_a_span_kept_whole():
    line = "Siehe https://example.com/a.b?x=1. Danach gehen wir."
    assert split_sentences(line, "de")[0] == "Siehe https://example.com/a.b?"  # pysbd alone
    url = line.index("https"), line.index("x=1") + 3
    assert split_sentences(line, "de", [url]) == ["Siehe https://example.com/a.b?x=1.",
                                                  "Danach gehen wir."]


def test_an_unknown_language_uses_english_rules_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(sentences, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.sentences"):
        assert split_sentences("Hallo Welt. Wie geht es?", "xx") == ["Hallo Welt.", "Wie geht es?"]
        assert split_sentences("Noch einer. Und noch einer.", "xx_YY") == [
            "Noch einer.", "Und noch einer."]
    assert [r.message for r in caplog.records].count(
        "sentence splitting: pysbd has no rules for language 'xx'; its English rules are used") == 1
    assert len(caplog.records) == 1


def test_separator_and_languages():
    assert sentence_separator("en") == " "
    assert sentence_separator("ja") == sentence_separator("zh-Hans") == ""
    assert text_languages(DataConfig(src_lang="de", tgt_lang="en")) == ("de", "en")
    assert text_languages(DataConfig(directions=("de-en", "fr-en"))) == (None, "en")
    assert text_languages(DataConfig(directions=("de-en", "de-fr"))) == ("de", None)


def test_joining_sentences_without_spaces():
    parts = [Translation("一。", ["一", "。"], ["a"], -1.0), Translation("二。", ["二", "。"], ["b"], -2.0)]
    assert join_translations(parts, sentence_separator("zh")).text == "一。二。"
    assert join_translations(parts, sentence_separator("de")).text == "一。 二。"


# --- on a model that translates sentence by sentence --------------------------------------------

@pytest.fixture(scope="module")
def copier(sp_copy_checkpoint):
    return Translator.from_bundle(load_bundle(sp_copy_checkpoint))


@pytest.mark.slow
def test_a_line_of_two_sentences_keeps_both(copier):
    assert copier.translate_lines([TWO]) == [TWO]
    # read whole, the line is longer than anything the model learned: a sentence is lost
    whole = copier.translate([TWO], TranslateOptions(split_sentences=False))[0][0].text
    assert whole != TWO and "Sand" not in whole


@pytest.mark.slow
def test_one_output_line_per_input_line(copier):
    lines = [TWO, "", "Ein Hund läuft.", "   ", f"{FIRST} {SECOND} {FIRST}"]
    out = copier.translate_lines(lines)
    assert out == [TWO, "", "Ein Hund läuft.", "", f"{FIRST} {SECOND} {FIRST}"]
    results = copier.translate(lines, TranslateOptions(n_best=2))
    assert [len(r) for r in results] == [2] * 5


@pytest.mark.slow
def test_n_best_scores_and_alignments_of_a_split_line(copier):
    o = TranslateOptions(n_best=2, token_scores=True, alignments=True, need_attention=True)
    line = copier.translate([TWO], o)[0]
    first, second = copier.translate([FIRST, SECOND], o)
    for k in range(2):  # the k-th of the line joins the k-th of each sentence
        h, a, b = line[k], first[k], second[k]
        assert h.text == f"{a.text} {b.text}"
        assert h.tokens == a.tokens + b.tokens and h.src_tokens == a.src_tokens + b.src_tokens
        assert h.score == pytest.approx(a.score + b.score)
        assert h.log_prob == pytest.approx(a.log_prob + b.log_prob)
        # every token's log-probability, then the sentences' </s> together: the sum is log_prob
        assert h.token_log_probs[:-1] == a.token_log_probs[:-1] + b.token_log_probs[:-1]
        assert h.token_log_probs[-1] == pytest.approx(a.token_log_probs[-1] + b.token_log_probs[-1])
        assert sum(h.token_log_probs) == pytest.approx(h.log_prob)
        # alignments in line positions: the second sentence's shifted by the first's tokens
        shift = [(i + len(a.src_tokens), j + len(a.tokens)) for i, j in b.alignment]
        assert h.alignment == a.alignment + shift
        # attention block-diagonal, (tokens + 1, source tokens + 1), each row a distribution
        assert h.attention.shape == (len(h.tokens) + 1, len(h.src_tokens) + 1)
        assert np.allclose(h.attention.sum(axis=1), np.ones(len(h.tokens) + 1), atol=1e-5)
        assert h.attention[:len(a.tokens), len(a.src_tokens):-1].sum() == 0
        assert h.attention[len(a.tokens):-1, :len(a.src_tokens)].sum() == 0
    assert line[0].score >= line[1].score  # still in the order of the scores


THREE = f"{TWO} Ein Hund läuft über die Wiese."


def test_a_prefix_is_shared_out_by_its_sentences():
    assert prefix_pieces("Ein Mann", 3, "de") == ["Ein Mann"]
    assert prefix_pieces("", 3, "de") == [""]
    assert prefix_pieces(f"{FIRST} Zwei", 1, "de") == [f"{FIRST} Zwei"]
    assert prefix_pieces(f"{FIRST} Zwei", 3, "de") == [f"{FIRST} ", "Zwei"]
    # more prefix sentences than the line has: the last sentence takes all the rest
    assert "".join(prefix_pieces(f"{FIRST} {SECOND} Ein Hund.", 2, "de")) == f"{FIRST} {SECOND} Ein Hund."
    assert prefix_pieces(f"{FIRST} {SECOND} Ein Hund.", 2, "de")[1] == f"{SECOND} Ein Hund."
    assert prefix_pieces("Er zahlte 3.50 Euro. Dann", 2, "de") == ["Er zahlte 3.50 Euro. ", "Dann"]


def test_a_phrase_goes_where_it_costs_the_least():
    assert holds([5, 6, 7], [6, 7]) and not holds([5, 6, 7], [7, 6]) and not holds([5], [])

    def t(log_prob, met=True):
        return Translation("x", ["x"], ["x"], log_prob / 2, log_prob=log_prob, constraints_met=met)

    assert least_cost([t(-1.0), t(-2.0)], [t(-5.0), t(-3.0)]) == 1  # loses 1 there, 4 here
    assert least_cost([t(-1.0), t(-2.0)], [t(-5.0), t(-3.0, met=False)]) == 0  # cap: not met
    assert least_cost([t(-1.0), t(-1.0)], [t(-2.0), t(-2.0)]) == 0  # a tie: the first


@pytest.mark.slow
def test_prefixes_keep_every_sentence(copier):
    # issue 74 item 4: a prefix (even an empty one) read the line whole and lost sentences
    assert copier.translate_lines([THREE]) == [THREE]
    for prefixes in (["Ein Mann"], [""], [f"{FIRST} Zwei"]):
        out = copier.translate([THREE, "Ein Hund läuft."], TranslateOptions(
            prefixes=[*prefixes, "Ein"]))
        assert [r[0].text for r in out] == [THREE, "Ein Hund läuft."], prefixes
    # the prefix starts the line's translation; it is forced, not the model's choice
    out = copier.translate([TWO], TranslateOptions(prefixes=["Zwei Kinder"]))[0][0].text
    assert out.startswith("Zwei Kinder") and out.endswith(SECOND)
    # a prefix of two sentences: each starts its own sentence's translation (a copy model
    # copies the rest of the sentence after it; a translation model ends a complete one)
    out = copier.translate([TWO], TranslateOptions(prefixes=[f"{SECOND} Ein"]))[0][0].text
    assert split_sentences(out, "de")[0] == SECOND and split_sentences(out, "de")[-1].startswith("Ein")
    kept = copier.translate([TWO], TranslateOptions(prefixes=[f"{FIRST} Zwei Kinder"]))[0][0]
    assert kept.text == TWO  # the translation kept up to a word of its second sentence
    # read whole only where asked
    whole = copier.translate([TWO], TranslateOptions(prefixes=["Ein Mann"], split_sentences=False))
    assert "Sand" not in whole[0][0].text


@pytest.mark.slow
def test_constraints_keep_every_sentence_and_every_phrase(copier):
    for constraints in ([[]], [["Kinder"]], [["Frau", "Kinder"]], [["Bank", "Buch", "Frau"]]):
        h = copier.translate([THREE], TranslateOptions(constraints=constraints, n_best=2))[0]
        text = h[0].text
        assert h[0].constraints_met, (constraints, text)
        for phrase in constraints[0]:
            assert phrase in text, (phrase, text)
        assert len(split_sentences(text, "de")) == 3, (constraints, text)  # every sentence
        assert len(h) == 2
    # a phrase the free translation already holds stays where the model put it: no change
    assert copier.translate([THREE], TranslateOptions(constraints=[["Kinder"]]))[0][0].text == THREE
    # several lines, a blank one, a line of one sentence: each as it would be alone
    lines = [THREE, "", "Ein Hund läuft."]
    out = copier.translate(lines, TranslateOptions(constraints=[["Frau"], ["Frau"], ["Bank"]]))
    assert out[1][0].text == "" and "Bank" in out[2][0].text and "Frau" in out[0][0].text
    assert "Wiese" in out[0][0].text


def test_the_flags_reach_the_decode_config():
    parser = build_parser()
    a = parser.parse_args(["translate", "--model", "m.pt", "--no-split-sentences"])
    cfg = decode_config_from_args(a, DecodeConfig())
    assert (cfg.split_sentences, cfg.protect_spans) == (False, True)
    a = parser.parse_args(["evaluate", "--model", "m.pt", "--no-protect-spans"])
    cfg = decode_config_from_args(a, DecodeConfig(split_sentences=False))
    assert (cfg.split_sentences, cfg.protect_spans) == (False, False)
    assert DecodeConfig().split_sentences and DecodeConfig().protect_spans  # on by default


@pytest.mark.slow
def test_translate_and_evaluate_split_lines(sp_copy_checkpoint, tmp_path):
    src, ref = tmp_path / "in.de", tmp_path / "ref.en"
    src.write_text(f"{TWO}\nEin Hund läuft.\n", encoding="utf-8")
    ref.write_text(f"{TWO}\nEin Hund läuft.\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = nmtkit("translate", "--model", sp_copy_checkpoint, "-i", src, env=env).stdout
    assert out == f"{TWO}\nEin Hund läuft.\n"
    ev = nmtkit("evaluate", "--model", sp_copy_checkpoint, "--src", src, "--ref", ref,
                env=env).stdout
    assert json.loads(ev)["bleu"] == pytest.approx(100.0)


@pytest.mark.slow
def test_the_server_splits_unless_asked_not_to(sp_copy_checkpoint):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app

    with TestClient(create_app(load_bundle(sp_copy_checkpoint))) as c:
        r = c.post("/v1/translate", json={"texts": [TWO, ""]})  # what the web page sends
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == [TWO, ""]
        r = c.post("/v1/translate", json={"texts": [TWO], "split_sentences": False})
        assert r.status_code == 200, r.text
        assert r.json()["translations"][0] != TWO
        r = c.post("/v1/translate", json={"texts": [TWO], "split_sentences": True, "scores": True})
        assert r.json()["translations"] == [TWO] and len(r.json()["tokens"][0]) == 16
        r = c.post("/v1/translate", json={"texts": [TWO], "split_sentences": "no"})
        assert r.status_code == 422


@pytest.mark.slow
def test_the_server_splits_lines_with_prefixes_on_both_engines(sp_copy_checkpoint, tmp_path):
    # issue 74 item 4: the server's "prefixes" read the text whole on both engines
    pytest.importorskip("fastapi")
    pytest.importorskip("ctranslate2")
    from fastapi.testclient import TestClient

    from nmtkit.export.ctranslate2 import export_ctranslate2
    from nmtkit.export.ctranslate2_engine import load_export_bundle
    from nmtkit.serve.app import create_app

    export = export_ctranslate2(sp_copy_checkpoint, tmp_path / "ct2")
    bundles = {"torch": load_bundle(sp_copy_checkpoint),
               "ctranslate2": load_export_bundle(export, compute_type="float32", threads=1)}
    for engine, bundle in bundles.items():
        with TestClient(create_app(bundle)) as c:
            for prefixes in (["Ein Mann", ""], ["", ""]):
                r = c.post("/v1/translate", json={"texts": [THREE, "Ein Hund läuft."],
                                                  "prefixes": prefixes})
                assert r.status_code == 200, (engine, r.text)
                assert r.json()["translations"] == [THREE, "Ein Hund läuft."], (engine, prefixes)
            if engine == "torch":
                r = c.post("/v1/translate", json={"texts": [THREE], "constraints": [["Frau"]]})
                assert r.status_code == 200, r.text
                text = r.json()["translations"][0]
                assert "Frau" in text and len(split_sentences(text, "de")) == 3
                assert r.json()["constraints_met"] == [True]


def test_joined_maps_are_block_diagonal_distributions():
    import torch

    from nmtkit.decode.sentence_attention import joined_maps

    def rows(n_rows, n_cols, seed):  # (1 layer, 1 head, rows, cols), each row a distribution
        g = torch.Generator().manual_seed(seed)
        return torch.softmax(torch.randn(1, 1, n_rows, n_cols, generator=g), -1)

    a = {"encoder": rows(3, 3, 0), "decoder_self": rows(2, 2, 1), "decoder_src": rows(2, 3, 2)}
    b = {"encoder": rows(4, 4, 3), "decoder_self": rows(3, 3, 4), "decoder_src": rows(3, 4, 5)}
    m = joined_maps([a, b], [(2, 1), (3, 2)])  # (source tokens, target tokens) per sentence
    assert m["encoder"].shape == (1, 1, 6, 6) and m["decoder_src"].shape == (1, 1, 4, 6)
    assert m["decoder_self"].shape == (1, 1, 4, 4)
    for w in m.values():
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:3]))
    src = m["decoder_src"][0, 0]
    assert torch.equal(src[0, :2], a["decoder_src"][0, 0, 0, :2]) and src[0, 2:5].sum() == 0
    assert src[0, 5] == a["decoder_src"][0, 0, 0, 2]  # its </s> column: the line's one
    assert torch.equal(src[1:, 2:5], b["decoder_src"][0, 0, :, :3])  # the second's block
    dec = m["decoder_self"][0, 0]  # (target, target_in): the second's <s> column is the line's
    assert dec[1, 0] == b["decoder_self"][0, 0, 0, 0]
    assert torch.equal(dec[2, 2:], b["decoder_self"][0, 0, 1, 1:])
    assert joined_maps([a], [(2, 1)]) == a


@pytest.mark.slow
def test_the_attention_of_every_sentence(sp_copy_checkpoint):
    # issue 74 item 10: /v1/attention showed the first sentence of a two-sentence text only
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app

    with TestClient(create_app(load_bundle(sp_copy_checkpoint))) as c:
        r = c.post("/v1/attention", json={"text": TWO, "confidence": True})
        one = c.post("/v1/attention", json={"text": FIRST}).json()
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translation"] == TWO
    n_first = len(one["tokens"]["source"]) - 1
    assert body["tokens"]["source"][:n_first] == one["tokens"]["source"][:-1]
    assert body["tokens"]["source"][-3:] == ["▁Sand", ".", "</s>"]
    assert len(body["confidence"]["token_probs"]) == len(body["tokens"]["target"])  # </s> too
    for kind, m in body["attention"].items():
        w = np.array(m["weights"])  # (layers, heads, rows, cols)
        assert w.shape[2:] == (len(body["tokens"][m["rows"]]), len(body["tokens"][m["cols"]])), kind
        assert np.allclose(w.sum(-1), 1, atol=1e-3), kind
    src = np.array(body["attention"]["decoder_src"]["weights"])
    first = np.array(one["attention"]["decoder_src"]["weights"])
    t = first.shape[2] - 1  # the first sentence's output tokens: its rows, over its columns
    assert np.allclose(src[:, :, :t, :n_first], first[:, :, :t, :n_first], atol=1e-4)
    assert src[:, :, :t, n_first:-1].sum() == 0


@pytest.mark.slow
def test_translate_with_prefix_and_constraints_files_splits_lines(sp_copy_checkpoint, tmp_path):
    # issue 74 item 4, as reported: a --prefix-file or --constraints-file (an empty entry
    # included) and a three-sentence line came back as one sentence
    src, prefixes, terms = tmp_path / "in.de", tmp_path / "prefix.txt", tmp_path / "terms.txt"
    src.write_text(f"{THREE}\nEin Hund läuft.\n", encoding="utf-8")
    prefixes.write_text("\nEin\n", encoding="utf-8")
    terms.write_text("Kinder\n\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for flag, path in (("--prefix-file", prefixes), ("--constraints-file", terms)):
        out = nmtkit("translate", "--model", sp_copy_checkpoint, "-i", src, flag, path, env=env).stdout
        assert out == f"{THREE}\nEin Hund läuft.\n", flag
