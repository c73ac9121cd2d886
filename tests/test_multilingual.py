"""One model, many directions (issue 16, item 3): ``data.directions`` with a target-language
token per source, temperature sampling over the directions, ``--tgt-lang`` / ``"tgt_lang"``
to pick the direction, BLEU per direction; and Multi30k's other languages and test splits
by name."""

import csv
import json
from collections import Counter

import numpy as np
import pytest
import torch

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import main as cli_main
from nmtkit.config import Config, ConfigError, load
from nmtkit.data import corpora
from nmtkit.data.corpora import MULTI30K_SHA256, MULTI30K_SPLITS, _check_multi30k_name
from nmtkit.data.directions import evaluation_direction
from nmtkit.data.fetch import CorpusError
from nmtkit.data.multilingual import (
    SampledIds,
    epoch_indices,
    join,
    load_directed,
    temperature_counts,
)
from nmtkit.data.prepare import build_vocabularies, encode_training, load_training, pairs_of
from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.text_translator import TextTranslator
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, load_benchmark, severe_browser_errors, step_by_step
from .helpers import write_xyz_corpus as write_corpus
from .helpers import xyz_cfg as tiny_cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(corpus directory, run directory) of a model trained on x-y (copy) and x-z (reverse).

    1000 steps: both tasks learned exactly (val BLEU 100) for every seed tried, with
    ``train.fast`` on and off; after 400-600 steps some seeds or float paths were not there.
    """
    root = write_corpus(tmp_path_factory.mktemp("corpus"))
    run = tmp_path_factory.mktemp("multilingual") / "run"
    Trainer(tiny_cfg(root, steps=1000), run).run()
    return root, run


def val_lines(root, lang):
    return (root / f"val.{lang}").read_text().splitlines()


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("data,message", [
    ({"directions": ["de-en", "en"]}, "SRC-TGT"),
    ({"directions": ["de-de"]}, "two different language codes"),
    ({"directions": ["de-en", "de-en"]}, "twice"),
    ({"directions": ["de-en"], "tokenizer": "word"}, "one shared SentencePiece model"),
    ({"directions": ["de-en"], "joint_vocab": False}, "data.joint_vocab: true"),
    ({"directions": ["de-en"], "corpus": "tsv"}, "multi30k|iwslt14|wmt14|parallel"),
    ({"directions": ["de-en"], "mmap": True}, "data.mmap: false"),
    ({"directions": ["de-en"], "reverse_source": True}, "reverse_source"),
    ({"directions": ["de-en"], "extra": [{"path": "bt"}]}, "data.extra"),
    ({"directions": ["de-en", "en-de"], "direction_temperature": 0}, "direction_temperature"),
])
def test_config_rejects_what_a_multilingual_run_cannot_do(data, message):
    with pytest.raises(ConfigError, match=message.replace("|", r"\|")):
        Config.from_dict({"data": data, "model": {"tie_all": data.get("joint_vocab", True)}})


def test_a_config_without_directions_is_one_untagged_direction():
    cfg = Config.from_dict({"data": {"directions": ["de-en", "en-de"]}})
    assert cfg.data.directions == ("de-en", "en-de") and cfg.data.direction_temperature == 1.0
    assert Config().data.directions == ()


def test_forgetting_splits_of_a_multilingual_run_name_their_direction():
    def cfg(splits):
        return Config.from_dict({"data": {"directions": ["de-en", "en-de"]},
                                 "train": {"forgetting_splits": splits}})

    with pytest.raises(ConfigError, match=r"must name each split's direction as SRC-TGT:SPLIT "
                       r"\(e.g. de-en:val\), got \['val'\]"):
        cfg(["de-en:val", "val"])
    with pytest.raises(ConfigError, match=r"must translate into one of its target languages, got "
                       r"\['de-fr:val'\] \(targets: de, en\)"):
        cfg(["de-fr:val"])
    assert cfg(["de-en:val", "en-de:val", "fr-en:val"]).train.forgetting_splits[2] == "fr-en:val"


@pytest.mark.slow
def test_forgetting_scores_each_named_direction_of_a_multilingual_model(trained):
    from nmtkit.train.finetune import score_splits

    root, run = trained
    bundle = load_bundle(run / "last.pt")
    val = str(root / "val")
    out = score_splits(bundle, bundle.cfg.data, (f"x-y:{val}", f"x-z:{val}", f"y-z:{val}"))
    assert out[f"x-y:{val}"]["bleu"] == out[f"x-z:{val}"]["bleu"] == 100.0  # asked for y, z
    assert out[f"y-z:{val}"]["n"] == 20  # zero-shot (y -> z): scored as asked


def test_the_bidirectional_recipe_differs_from_the_small_one_in_its_data_only():
    bi = load(ROOT / "configs" / "multi30k_transformer_bidirectional.yaml").to_dict()
    small = load(ROOT / "configs" / "multi30k_transformer_small.yaml").to_dict()
    assert bi["data"]["directions"] == ("de-en", "en-de")
    assert {k for k in bi if bi[k] != small[k]} == {"name", "data"}


# --- sampling the directions -----------------------------------------------------------------


def test_temperature_counts_follow_size_to_the_power_one_over_t():
    assert temperature_counts([900, 100], 1.0) == [900, 100]  # the plain union
    assert temperature_counts([900, 100], 2.0) == [750, 250]  # 30 : 10
    assert temperature_counts([900, 100], 1e9) == [500, 500]  # uniform
    assert temperature_counts([900, 100], 0.5) == [988, 12]  # 810000 : 10000
    assert temperature_counts([29000, 29000], 5.0) == [29000, 29000]
    assert temperature_counts([10**6, 10], 0.01)[1] == 0  # no overflow for a small T
    with pytest.raises(ValueError):
        temperature_counts([1, 2], 0.0)


def test_epoch_indices_repeat_the_small_direction_and_sample_the_large_one():
    sizes, counts = [900, 100], [500, 500]
    rows = epoch_indices(sizes, counts, seed=1, epoch=0)
    first, second = rows[rows < 900], rows[rows >= 900]
    assert len(first) == 500 and len(set(first.tolist())) == 500  # a sample without replacement
    assert Counter(second.tolist()) == {i: 5 for i in range(900, 1000)}  # every pair 5 times
    assert np.array_equal(rows, epoch_indices(sizes, counts, 1, 0))  # seeded: resume repeats it
    assert not np.array_equal(rows, epoch_indices(sizes, counts, 1, 1))  # a new sample per epoch
    assert np.array_equal(epoch_indices(sizes, sizes, 1, 3), np.arange(1000))  # T = 1: all, once


@pytest.mark.parametrize("temperature,expected", [(1.0, {"<2y>": 40, "<2z>": 10}),
                                                  (1000.0, {"<2y>": 25, "<2z>": 25})])
def test_the_training_set_holds_both_directions_in_the_temperature_ratio(tmp_path, temperature,
                                                                         expected):
    root = write_corpus(tmp_path, n_train=40, blank_z=30)  # x-y: 40 pairs, x-z: 10
    cfg = tiny_cfg(root, extra=[f"data.direction_temperature={temperature}"]).data
    par = load_training(cfg)
    assert par.parts == (40, 10) and par.src[0].startswith("<2y> ") and par.src[-1].startswith("<2z> ")
    v = build_vocabularies(cfg, pairs_of(par))
    ids = encode_training(cfg, par, v)
    assert isinstance(ids, SampledIds) and ids.sizes == [40, 10]
    for epoch in range(2):
        rows = np.concatenate(ids.batches(400, seed=1, epoch=epoch))
        tags = Counter(v.src_vocab.itos[int(ids.source(int(i))[0])] for i in rows)
        assert tags == expected
    # a direction's target follows its tag: x-z rows hold the reversed sources
    z_row = 40
    src = v.src_vocab.decode(ids.source(z_row).tolist())
    tgt = v.tgt_vocab.decode(ids.target(z_row).tolist())
    assert src[0] == "<2z>" and src[1:] == tgt[::-1]


@pytest.mark.slow
def test_a_resumed_run_samples_the_same_directions(tmp_path):
    root = write_corpus(tmp_path, n_train=60, blank_z=40)  # 60 : 20 pairs, sampled at T = 3
    sets = ["data.direction_temperature=3", "train.max_tokens=60", "train.valid_every=7",
            "train.valid_bleu=false", "train.sample_every=0"]
    straight = Trainer(tiny_cfg(root, steps=14, extra=sets), tmp_path / "a")
    straight.run()
    assert straight.progress.epoch >= 1  # the resumed half crosses into a new epoch's sample
    Trainer(tiny_cfg(root, steps=7, extra=sets), tmp_path / "b").run()
    resumed = Trainer(tiny_cfg(root, steps=14, extra=sets), tmp_path / "b", Start.resume())
    resumed.run()
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


def test_the_target_language_token_is_one_vocabulary_token_never_segmented(tmp_path):
    root = write_corpus(tmp_path, n_train=60)
    cfg = tiny_cfg(root).data
    par = load_training(cfg)
    v = build_vocabularies(cfg, pairs_of(par))
    assert {"<2y>", "<2z>"} <= set(v.src_vocab.itos)
    assert v.src_vocab is v.tgt_vocab  # one joint vocabulary over one SentencePiece model
    pieces = v.src_tok.pieces()  # type: ignore[attr-defined]
    assert not any("<2" in p or "2y" in p for p in pieces)  # tokenizer training never saw it
    ids = encode_training(cfg, par, v)
    assert int(ids.source(0)[0]) == v.src_vocab.stoi["<2y>"]
    assert int(ids.source(len(ids) - 1)[0]) == v.src_vocab.stoi["<2z>"]


# --- the translator picks the direction ------------------------------------------------------


def test_target_tag_of_one_direction_and_of_many():
    one = TextTranslator(WhitespaceTokenizer(), WhitespaceTokenizer(), Config().decode,
                         target_tags={"en": ""})
    assert one.target_tag(None) == one.target_tag("en") == ""
    with pytest.raises(ValueError, match="'fr': this model translates into en only"):
        one.target_tag("fr")
    many = TextTranslator(WhitespaceTokenizer(), WhitespaceTokenizer(), Config().decode,
                          target_tags={"de": "<2de>", "en": "<2en>"})
    assert many.target_tag("de") == "<2de>"
    with pytest.raises(ValueError, match="translates into de, en: name the target language"):
        many.target_tag(None)
    assert many.source_tokens("a b", "<2de>") == (["<2de>", "a", "b"], ["<2de>", "a", "b"])
    assert many.source_tokens("   ", "<2de>") == ([], [])  # an empty line stays empty
    capped = TextTranslator(WhitespaceTokenizer(), WhitespaceTokenizer(), Config().decode,
                            max_positions=3, target_tags={"de": "<2de>"})
    assert capped.source_tokens("a b c d", "<2de>")[0] == ["<2de>", "a"]  # tag + 1 + </s> = 3


@pytest.mark.slow
def test_one_model_learns_both_directions_and_reports_bleu_per_direction(trained):
    root, run = trained
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert list(rows[0])[6:9] == ["valid_bleu", "bleu_x-y", "bleu_x-z"]
    last = rows[-1]
    assert float(last["valid_bleu"]) == pytest.approx(
        (float(last["bleu_x-y"]) + float(last["bleu_x-z"])) / 2, abs=0.01)
    assert float(last["bleu_x-y"]) > 90 and float(last["bleu_x-z"]) > 90
    from nmtkit.viz.curves import read_metrics  # `nmtkit plot curves` reads the new columns

    assert set(read_metrics(run)) >= {"valid_bleu", "bleu_x-y", "bleu_x-z"}
    samples = (run / "samples.txt").read_text()
    assert "[1] x-y src:" in samples and "[3] x-z hyp:" in samples
    bundle = load_bundle(run / "last.pt")
    assert bundle.cfg.data.directions == ("x-y", "x-z")  # the checkpoint records the directions
    tr = Translator.from_bundle(bundle)
    sources = val_lines(root, "x")
    assert tr.translate_lines(sources, tgt_lang="y") == val_lines(root, "y")
    assert tr.translate_lines(sources, tgt_lang="z") == val_lines(root, "z")
    (hyp,) = tr.translate(["a b c"], TranslateOptions(tgt_lang="z", alignments=True))[0]
    assert hyp.src_tokens[0] == "<2z>" and len(hyp.alignment or []) == len(hyp.tokens)
    with pytest.raises(ValueError, match="translates into y, z"):
        tr.translate_lines(sources)


@pytest.mark.slow
def test_cli_translate_needs_tgt_lang_and_evaluate_scores_one_direction(trained, tmp_path, capsys):
    root, run = trained
    model = str(run / "last.pt")
    src = str(root / "val.x")
    for lang in ("y", "z"):
        out = tmp_path / f"out.{lang}"
        assert cli_main(["translate", "--model", model, "-i", src, "-o", str(out),
                         "--tgt-lang", lang]) == 0
        assert out.read_text().splitlines() == val_lines(root, lang)
    capsys.readouterr()
    assert cli_main(["translate", "--model", model, "-i", src]) == 2
    err = capsys.readouterr().err
    assert "this model translates into y, z: name the target language" in err and "--tgt-lang" in err
    assert cli_main(["translate", "--model", model, "-i", src, "--tgt-lang", "q"]) == 2
    assert "'q': this model translates into y, z only" in capsys.readouterr().err
    assert cli_main(["evaluate", "--model", model, "--split", str(root / "val"),
                     "--tgt-lang", "z", "--beam", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["src_lang"], result["tgt_lang"], result["bleu"]) == ("x", "z", 100.0)
    assert cli_main(["evaluate", "--model", model, "--split", str(root / "val")]) == 2
    assert "name the target language (--tgt-lang)" in capsys.readouterr().err


def test_evaluation_direction_resolves_and_checks_the_languages():
    multi = Config.from_dict({"data": {"directions": ["de-en", "fr-en", "en-de"]}}).data
    data, d = evaluation_direction(multi, None, "de")
    assert (d.name, data.src_lang, data.tgt_lang, data.directions) == ("en-de", "en", "de", ())
    with pytest.raises(ValueError, match="into en from de, fr: name the source language"):
        evaluation_direction(multi, None, "en")
    assert evaluation_direction(multi, "fr", "de")[1].name == "fr-de"  # zero-shot: as asked
    single = Config().data
    assert evaluation_direction(single, None, "en")[1].name == "de-en"
    with pytest.raises(ValueError, match="translates de -> en only"):
        evaluation_direction(single, "en", "de")


@pytest.mark.slow
def test_the_server_takes_tgt_lang(trained):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app

    root, run = trained
    sources = val_lines(root, "x")[:4]
    with TestClient(create_app(load_bundle(run / "last.pt"))) as client:
        health = client.get("/health").json()
        assert health["tgt_langs"] == ["y", "z"] and health["directions"] == ["x-y", "x-z"]
        for lang in ("y", "z"):
            r = client.post("/v1/translate", json={"texts": sources, "beam": 1, "tgt_lang": lang})
            assert r.status_code == 200 and r.json()["translations"] == val_lines(root, lang)[:4]
        r = client.post("/v1/translate", json={"texts": sources, "scores": True, "tgt_lang": "z"})
        assert r.status_code == 200 and r.json()["translations"] == val_lines(root, "z")[:4]
        missing = client.post("/v1/translate", json={"texts": sources})
        assert missing.status_code == 422 and "translates into y, z" in missing.json()["detail"]
        unknown = client.post("/v1/translate", json={"texts": sources, "tgt_lang": "de"})
        assert unknown.status_code == 422 and "tgt_lang: target language 'de'" in unknown.json()["detail"]
        att = client.post("/v1/attention", json={"text": "a b c", "tgt_lang": "z", "beam": 1})
        assert att.status_code == 200
        assert att.json()["tokens"]["source"][0] == "<2z>" and att.json()["translation"] == "c b a"
        assert client.post("/v1/attention", json={"text": "a b c"}).status_code == 422


@pytest.mark.slow
def test_a_ctranslate2_export_asks_for_the_language_too(trained, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2 import export_ctranslate2
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator

    root, run = trained
    tr = CTranslate2Translator(export_ctranslate2(run / "last.pt", tmp_path / "ct2"))
    sources = val_lines(root, "x")
    assert tr.translate_lines(sources, beam=1, tgt_lang="z") == val_lines(root, "z")
    assert tr.translate_lines(sources, beam=1, tgt_lang="y") == val_lines(root, "y")
    with pytest.raises(ValueError, match="translates into y, z"):
        tr.translate_lines(sources)


# --- reranking with the model's own other direction -----------------------------------------


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    """(corpus directory, run directory) of one model trained x -> z and z -> x (z is x
    reversed): a model that is its own reverse model."""
    root = write_corpus(tmp_path_factory.mktemp("corpus_both_ways"))
    run = tmp_path_factory.mktemp("both_ways") / "run"
    Trainer(tiny_cfg(root, steps=1000, extra=["data.directions=[x-z, z-x]"]), run).run()
    return root, run


@pytest.mark.slow
def test_a_model_of_both_directions_reranks_its_own_translations(both_ways, trained, tmp_path,
                                                                 capsys):
    from nmtkit.data.directions import Direction
    from nmtkit.decode.reverse_models import reverse_scorer

    root, run = both_ways
    model = str(run / "last.pt")
    bundle = load_bundle(model)
    scorer = reverse_scorer([bundle], Direction("x", "z"))
    assert scorer.tgt_langs == ["x"]  # read back into the forward source language
    pairs = [("c b a", "a b c"), ("a b c", "a b c"), ("f e d a", "a d e f")]
    got = scorer.score(*zip(*pairs, strict=True))
    assert got == pytest.approx([step_by_step(bundle, y, x, tag="<2x>") for y, x in pairs],
                                abs=1e-4)
    assert got[0] > got[1] + 1  # the right translation reads back better than a copy

    sources, refs = val_lines(root, "x"), val_lines(root, "z")
    src = tmp_path / "in.x"
    src.write_text("\n".join(sources) + "\n")
    rerank = ["--beam", "4", "--rerank", "4", "--reverse-model", model, "--reverse-weight", "3"]
    assert cli_main(["translate", "--model", model, "-i", str(src), "--tgt-lang", "z",
                     *rerank]) == 0
    tr = Translator.from_bundle(bundle, beam=4, rerank=4, reverse_weight=3.0)
    tr.reverse = scorer
    assert capsys.readouterr().out.splitlines() == tr.translate_lines(sources, tgt_lang="z")
    assert cli_main(["evaluate", "--model", model, "--split", str(root / "val"),
                     "--tgt-lang", "x", *rerank]) == 0  # z -> x, read back as x -> z
    result = json.loads(capsys.readouterr().out)
    assert (result["src_lang"], result["tgt_lang"], result["bleu"]) == ("z", "x", 100.0)
    assert cli_main(["tune", "--model", model, "--split", str(root / "val"), "--tgt-lang", "z",
                     "--beam", "4", "--length-penalty", "0.6", "--rerank", "0", "4",
                     "--reverse-model", model, "--reverse-weight", "0", "3"]) == 0
    trials = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(t["rerank"], t["bleu"]) for t in trials[:3]] == [(0, 100.0), (4, 100.0), (4, 100.0)]
    assert refs == tr.translate_lines(sources, tgt_lang="z")

    bench = load_benchmark("mbr").compare(  # experiments/mbr.py: the direction asked for
        [model], ["", "rerank=4,reverse_weight=3"], "bleu", valid=str(root / "val"),
        test=str(root / "val"), reverse_models=[model], tgt_lang="z")
    assert bench["direction"] == "x-z"
    assert [r["val"]["bleu"] for r in bench["rows"]] == [100.0, 100.0]

    other = str(trained[1] / "last.pt")  # x-y and x-z: no z -> x to read back with
    assert cli_main(["translate", "--model", model, "-i", str(src), "--tgt-lang", "z",
                     *rerank[:4], "--reverse-model", other]) == 2
    assert (f"{other} translates x-y, x-z: a reverse model for a x->z model must translate "
            "z->x") in capsys.readouterr().err
    assert cli_main(["translate", "--model", model, "-i", str(src), "--tgt-lang", "z",
                     "--src-lang", "q"]) == 2
    assert "source language 'q': this model knows x, z only" in capsys.readouterr().err


# --- back-translation, attention figures, TensorBoard ----------------------------------------


@pytest.mark.slow
def test_backtranslate_asks_for_the_target_language(trained, tmp_path, capsys):
    root, run = trained
    model, mono, prefix = str(run / "last.pt"), str(root / "val.x"), tmp_path / "synth"
    assert cli_main(["backtranslate", "--model", model, "-i", mono, "-o", str(prefix),
                     "--tgt-lang", "z", "--beam", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == 20
    # x -> z asked for: the translations (z) are the forward sources, the input (x) the targets
    assert (tmp_path / "synth.z").read_text().splitlines() == val_lines(root, "z")
    assert (tmp_path / "synth.x").read_text().splitlines() == val_lines(root, "x")
    assert cli_main(["backtranslate", "--model", model, "-i", mono, "-o", str(prefix)]) == 2
    assert "name the target language (--tgt-lang)" in capsys.readouterr().err
    assert cli_main(["backtranslate", "--model", model, "-i", mono, "-o", str(prefix),
                     "--tgt-lang", "z", "--src-lang", "y", "--beam", "1"]) == 0  # zero-shot
    assert (tmp_path / "synth.y").read_text().splitlines() == val_lines(root, "x")


@pytest.mark.slow
def test_plot_attention_asks_for_the_target_language(trained, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from nmtkit.viz.attention import attention_for_text

    root, run = trained
    att = attention_for_text(load_bundle(run / "last.pt"), "a b c", beam=1, tgt_lang="z")
    assert att.translation == "c b a" and att.src_tokens[0] == "<2z>"
    base = ["plot", "attention", "--model", str(run / "last.pt"), "--text", "a b c", "--beam", "1"]
    for lang, translation in (("y", "a b c"), ("z", "c b a")):
        stem = tmp_path / f"att_{lang}"
        assert cli_main([*base, "--tgt-lang", lang, "-o", str(stem), "--html"]) == 0
        written = json.loads(capsys.readouterr().out)["written"]
        assert str(stem) + "_decoder_src.png" in written
        page = (tmp_path / f"att_{lang}.html").read_text()
        data = json.loads(page.split('id="attention-data">')[1].split("</script>")[0])
        assert data["translation"] == translation
        assert data["kinds"]["decoder_src"]["cols"][0] == f"<2{lang}>"  # the source, tag first
    assert cli_main([*base, "-o", str(tmp_path / "none")]) == 2
    assert "name the target language" in capsys.readouterr().err


@pytest.mark.slow
def test_tensorboard_draws_the_first_directions_attention(tmp_path, caplog):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from nmtkit.viz.attention import attention_image

    (tmp_path / "corpus").mkdir()
    root = write_corpus(tmp_path / "corpus", n_train=60)
    asked = []

    def recording(bundle, text, tgt_lang=None):
        asked.append(tgt_lang)
        return attention_image(bundle, text, tgt_lang)

    Trainer(tiny_cfg(root, steps=4, extra=["train.valid_every=2", "train.tensorboard=true"]),
            tmp_path / "run", attention_image=recording).run()
    assert asked == ["y", "y"]  # x-y, the first of data.directions
    assert "attention image not written" not in caplog.text
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Images("valid/attention")] == [2, 4]


# --- the web page in Chromium: a target-language selector ---------------------------------------


@pytest.fixture
def live_server(trained):
    """uvicorn serving the two-direction model on a free loopback port, in a thread."""
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    import socket
    import threading
    import time

    from nmtkit.serve.app import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(load_bundle(trained[1] / "last.pt")),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.mark.slow
def test_the_page_translates_into_the_language_picked(browser, live_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(live_server + "/")
    wait.until(lambda d: d.find_element(By.ID, "tgt-lang-wrap").is_displayed())
    assert browser.find_element(By.ID, "pair").text == "x → y · x → z"
    picker = Select(browser.find_element(By.ID, "tgt-lang"))
    assert [o.get_attribute("value") for o in picker.options] == ["y", "z"]
    Select(browser.find_element(By.ID, "beam")).select_by_value("1")
    src = browser.find_element(By.ID, "source")
    src.clear()
    src.send_keys("a b c d")

    def shown(d):
        """(translation panel, confidence view's source tokens, attention loads, state)."""
        return d.execute_script("""
            const c = document.getElementById('heatmap');
            return [document.getElementById('translation').textContent,
                    [...document.querySelectorAll('#conf-source .tok .w')].map((e) => e.textContent),
                    c.dataset.loads, c.dataset.state];""")

    picker.select_by_value("y")  # the first: no change event, so translate by the button
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: shown(d)[0] == "a b c d" and shown(d)[3] == "ready")
    assert shown(browser)[1][0] == "<2y>"  # the attention request asked for y too
    assert browser.find_element(By.ID, "tgt-label").text.lower().startswith("y")
    loads = shown(browser)[2]
    picker.select_by_value("z")  # picking a language translates again into it
    wait.until(lambda d: shown(d)[0] == "d c b a" and shown(d)[2] != loads and shown(d)[3] == "ready")
    assert shown(browser)[1][0] == "<2z>"
    # Keep the first output token, re-decode the rest: still into z.
    browser.find_elements(By.CSS_SELECTOR, "#conf-target .tok")[0].click()
    assert browser.find_element(By.ID, "prefix").get_attribute("value") == "d "
    loads = shown(browser)[2]
    browser.find_element(By.ID, "redecode").click()
    wait.until(lambda d: shown(d)[2] != loads and shown(d)[3] == "ready")
    assert shown(browser)[0] == "d c b a" and shown(browser)[1][0] == "<2z>"
    assert "Re-decoded" in browser.find_element(By.ID, "status").text
    assert not severe_browser_errors(browser)


# --- Multi30k by name ------------------------------------------------------------------------


@pytest.mark.slow
def test_every_multi30k_language_and_test_split_has_a_pinned_name(monkeypatch):
    asked = []
    monkeypatch.setattr(corpora, "fetch_file", lambda *a: asked.append(a) or (a[1], a[3]))
    for split, lang in [("train", "fr"), ("val", "cs"), ("test_2017_flickr", "fr"),
                        ("test_2017_mscoco", "de"), ("test_2018_flickr", "cs")]:
        corpora.multi30k_file(split, lang)  # fetched by name, checked against its sha256
        collection, name, url, sha, _ = asked[-1]
        assert (collection, name) == ("multi30k", f"{split}.{lang}.gz")
        assert url.endswith(f"/task1/raw/{split}.{lang}.gz") and sha == MULTI30K_SHA256[name]
    names = {split: langs for split, langs in MULTI30K_SPLITS.items()}
    assert {"test_2017_flickr", "test_2017_mscoco", "test_2018_flickr"} <= set(names)
    for split, langs in names.items():
        for lang in langs:
            name = _check_multi30k_name(split, lang)
            assert len(MULTI30K_SHA256[name]) == 64
            assert len(MULTI30K_SHA256[f"tok/{split}.lc.norm.tok.{lang}"]) == 64
    assert set(names["train"]) == {"de", "en", "fr", "cs"}
    with pytest.raises(CorpusError, match="does not exist in language 'cs'"):
        _check_multi30k_name("test_2017_mscoco", "cs")
    with pytest.raises(CorpusError, match="no language 'ja'"):
        _check_multi30k_name("train", "ja")


def test_multi30k_both_directions_read_the_same_pairs(multi30k_mirror):
    cfg = Config.from_dict({"data": {"directions": ["de-en", "en-de"]}}).data
    de_en, en_de = load_directed(cfg, "val")
    assert len(de_en.text) == len(en_de.text) == 1014
    assert de_en.text.src == en_de.text.tgt and de_en.text.tgt == en_de.text.src
    joined = join([de_en, en_de])
    assert joined.parts == (1014, 1014) and joined.src[1014] == "<2de> " + en_de.text.src[0]
