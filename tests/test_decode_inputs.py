"""What users hand the search, checked where they hand it (hostile-input probe III, failures 4,
8, 9, 11, 12, 16): constraint phrases (a cap per line, words the model knows, phrases that
do not fit), forced prefixes, the Python API's arguments, and the languages of a model of
several directions."""

import copy
import importlib
import logging
from types import SimpleNamespace

import pytest
import torch

from nmtkit.checkpoint import load_bundle
from nmtkit.cli import main as cli_main
from nmtkit.cli.translate import answer
from nmtkit.config import Config, ConfigError, DecodeConfig
from nmtkit.data.directions import evaluation_direction
from nmtkit.data.tokenizers import SentencePieceTokenizer
from nmtkit.data.vocab import SPECIALS, Vocab
from nmtkit.decode.limits import MAX_PHRASES
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.search import search
from nmtkit.decode.text_translator import TargetTextError
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import contains, make_cfg, mixed_batch, tiny_model

CAP = 15
"""The output cap of the fixture's model (model.max_positions=16: </s> takes one)."""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    run = tmp_path_factory.mktemp("decode_inputs")
    Trainer(make_cfg(2, [f"model.max_positions={CAP + 1}"]), run).run()
    return run / "last.pt"


@pytest.fixture(scope="module")
def bundle(model_path):
    return load_bundle(model_path)


@pytest.fixture(scope="module")
def tr(bundle):
    return Translator.from_bundle(bundle, beam=2, n_best=1)


def write(path, text):
    path.write_text(text)
    return str(path)


# --- 4: a cap on constraint phrases, the same everywhere ------------------------------------------

@pytest.mark.slow
def test_a_constraints_file_line_over_the_phrase_cap_is_refused_naming_file_and_line(
        model_path, tr, tmp_path, capsys):
    src = write(tmp_path / "in.txt", "1 2 3\n4 5\n")
    cons = write(tmp_path / "cons.txt", "7\n" + "\t".join(["5"] * 1000) + "\n")
    out = tmp_path / "out.txt"
    assert cli_main(["translate", "--model", str(model_path), "-i", src, "-o", str(out),
                     "--beam", "64", "--constraints-file", cons]) == 2
    assert f"{cons}:2: 1000 phrases, more than {MAX_PHRASES} a line" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(TargetTextError, match=rf"constraints\[1\]: {MAX_PHRASES + 1} phrases"):
        tr.translate(["1", "2"], TranslateOptions(constraints=[[], ["1"] * (MAX_PHRASES + 1)]))
    (h,), = tr.translate(["1 2"], TranslateOptions(constraints=[["1"] * MAX_PHRASES]))  # at the cap: searched
    assert h.tokens.count("1") >= MAX_PHRASES
    schemas = pytest.importorskip("nmtkit.serve.schemas")
    assert schemas.MAX_PHRASES is MAX_PHRASES  # the server's cap is this one


# --- 8: words the model cannot write --------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("flag, what", [("--constraints-file", "constraint"),
                                        ("--prefix-file", "prefix")])
def test_an_unknown_word_in_a_constraint_or_prefix_is_refused_naming_file_line_and_phrase(
        model_path, tmp_path, capsys, flag, what):
    src = write(tmp_path / "in.txt", "1 2 3\n3 1 4\n")
    given = write(tmp_path / "given.txt", "2\nzebra\n")
    out = tmp_path / "out.txt"
    assert cli_main(["translate", "--model", str(model_path), "-i", src, "-o", str(out),
                     "--beam", "2", flag, given]) == 2
    err = capsys.readouterr().err
    assert f"{given}:2: {what} 'zebra': the model's target vocabulary has no 'zebra'" in err
    assert "<unk>" in err and not out.exists()


@pytest.mark.slow
def test_the_library_and_the_server_refuse_unknown_words_too(tr, bundle):
    with pytest.raises(TargetTextError, match=r"constraints\[0\]: constraint 'qqq'"):
        tr.translate(["1 2"], TranslateOptions(constraints=[["1", "qqq"]]))
    with pytest.raises(ValueError, match=r"prefixes\[1\]: prefix '1 <pad>'.* no '<pad>'"):
        # a control token is no word either
        tr.translate(["1", "2"], TranslateOptions(prefixes=["", "1 <pad>"]))
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app

    client = TestClient(create_app(bundle))
    r = client.post("/v1/translate", json={"texts": ["1 2", "3"], "constraints": [[], ["☃"]]})
    assert r.status_code == 422 and r.json()["detail"].startswith("constraints.1: constraint '☃'")
    r = client.post("/v1/translate", json={"texts": ["1 2"], "prefixes": ["zebra"]})
    assert r.status_code == 422 and r.json()["detail"].startswith("prefixes.0: prefix 'zebra'")
    r = client.post("/v1/attention", json={"text": "1 2", "prefix": "1 zebra"})
    assert r.status_code == 422 and r.json()["detail"].startswith("prefix: prefix '1 zebra'")
    assert client.post("/v1/translate", json={"texts": ["1 2"], "constraints": [["7"]]}
                       ).status_code == 200


@pytest.mark.slow
def test_a_subword_spelling_of_an_unseen_word_is_fine_a_piece_the_vocabulary_lacks_is_not(tr):
    """SentencePiece spells a word it never saw in the pieces it has: no <unk>. Only a piece
    the model's target vocabulary lacks (here a character never seen) would be one."""
    sp = SentencePieceTokenizer.train(["lower newer", "wider lowest", "newest wide"] * 20,
                                      vocab_size=30)
    words = copy.copy(tr)
    words.tgt_tok = sp
    words.tgt_vocab = Vocab(SPECIALS + [p for p in sp.pieces() if p != "<unk>"])
    ids = words.known_ids("constraints", 0, "widest lowerer", None)  # never seen whole
    assert len(ids) > 2 and all(i >= len(SPECIALS) for i in ids)
    with pytest.raises(TargetTextError, match="constraint 'wide☃': .*'☃'"):
        words.known_ids("constraints", 0, "wide☃", None)


# --- 9: phrases that do not fit, and n-best lists -------------------------------------------------

@pytest.mark.slow
def test_a_constraint_longer_than_the_output_cap_is_cut_with_the_prefixs_warning(tr, caplog):
    with caplog.at_level(logging.WARNING, logger="nmtkit.decode.translator"):
        (h,), = tr.translate(["1 2"], TranslateOptions(constraints=[[" ".join(["7"] * 20)]]))
    said = [r.getMessage() for r in caplog.records]
    assert f"constraint of 20 tokens truncated to {CAP}" in said
    assert h.tokens == ["7"] * CAP and h.constraints_met
    # A forced prefix is the output's start: past the cap it is refused, as the server does
    # (test_reliability_outputs.py::test_a_prefix_past_the_output_cap_is_refused_by_...).
    with pytest.raises(TargetTextError, match=rf"prefix of 20 target tokens, more than the "
                                              rf"output cap \({CAP}\)"):
        tr.translate(["1 2"], TranslateOptions(prefixes=[" ".join(["7"] * 20)]))


@pytest.mark.slow
def test_a_line_whose_constraints_did_not_fit_is_named_in_a_warning(model_path, tr, tmp_path,
                                                                    caplog, capsys):
    too_much = [" ".join(["7"] * 10), " ".join(["8"] * 10)]  # 20 tokens under a cap of 15
    (h,), = tr.translate(["1 2"], TranslateOptions(constraints=[too_much]))
    assert not h.constraints_met
    (ok,), = tr.translate(["1 2"], TranslateOptions(constraints=[too_much[:1]]))
    assert ok.constraints_met and contains(ok.tokens, ["7"] * 10)
    src = write(tmp_path / "in.txt", "1 2\n3 4\n")
    cons = write(tmp_path / "cons.txt", "7\n" + "\t".join(too_much) + "\n")
    with caplog.at_level(logging.WARNING, logger="nmtkit.cli"):
        assert cli_main(["translate", "--model", str(model_path), "-i", src, "--beam", "2",
                         "--constraints-file", cons]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    warned = [r.getMessage() for r in caplog.records if r.name == "nmtkit.cli"]
    assert warned == [f"{src}:2: the translation lacks some phrases of {cons}:2: they did not "
                      "fit under the output cap"]


def test_the_search_says_which_hypotheses_have_every_phrase():
    model = tiny_model("transformer", seed=6)
    src, mask = mixed_batch()
    cons = [[[4, 5], [11]], [[7]], [], [[9, 9, 10]]]
    cfg = DecodeConfig(beam=4, n_best=4, max_len_a=1.0, max_len_b=2)
    seen = set()
    for hs, cs in zip(search(model, src, mask, cfg, constraints=cons), cons, strict=True):
        for h in hs:
            assert h.constraints_met == all(contains(h.tokens, p) for p in cs), (h.tokens, cs)
            seen.add(h.constraints_met)
    assert seen == {True, False}  # both kinds occur in these n-best lists


def test_n_best_output_leaves_out_translations_that_lack_a_phrase(caplog):
    def t(text, met):
        return Translation(text, text.split(), ["1"], -1.0, constraints_met=met)

    a = SimpleNamespace(scores=False, alignments=False, input="in.txt", constraints_file="c.txt")
    assert answer(0, [t("1 7", True), t("1", False), t("7 1", True)], a, True) == \
        "0\t-1.0000\t1 7\n0\t-1.0000\t7 1\n"
    with caplog.at_level(logging.WARNING, logger="nmtkit.cli"):
        assert answer(4, [t("1", False), t("2", False)], a, True) == "4\t-1.0000\t1\n"
        assert answer(4, [t("1", False)], a, False) == "1\n"
    assert [r.getMessage().split(":")[:2] for r in caplog.records] == [["in.txt", "5"]] * 2


# --- 11, 16: the Python API's arguments -----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("lines, message", [
    ("1 2 3", "lines must be an iterable of str, got str"),
    (b"1 2", "lines must be an iterable of str, got bytes"),
    (None, "lines must be an iterable of str, got NoneType"),
    ([b"1 2"], r"lines\[0\] must be a str, got bytes"),
    (["1", None], r"lines\[1\] must be a str, got NoneType"),
    ([1], r"lines\[0\] must be a str, got int"),
])
def test_translate_lines_takes_a_list_of_str_only(tr, lines, message):
    with pytest.raises(TypeError, match=message):
        tr.translate_lines(lines)


@pytest.mark.slow
def test_lines_are_checked_as_they_are_consumed_and_any_iterable_of_str_is_fine(tr):
    assert tr.translate_lines(iter(["1 2", "3"])) == tr.translate_lines(["1 2", "3"])
    with pytest.raises(TypeError, match=r"constraints\[0\] must be an iterable of str, got str"):
        tr.translate(["1 2"], TranslateOptions(constraints=["7 7"]))  # one list of phrases per line
    with pytest.raises(TypeError, match="prefixes must be an iterable of str, got str"):
        tr.translate(["1 2"], TranslateOptions(prefixes="7"))


@pytest.mark.slow
@pytest.mark.parametrize("options, message", [
    ({"beam": "4"}, "beam: expected int, got '4'"),
    ({"beam": 2.5}, "beam: expected int, got 2.5"),
    ({"beam": True}, "beam: expected int, got True"),
    ({"n_best": "2"}, "n_best: expected int"),
    ({"batch_size": 1.5}, "batch_size: expected int"),
    ({"bogus": 1}, "unknown key.* bogus; known: .*beam"),
])
def test_decoding_options_of_the_python_api_are_checked_by_name(bundle, tr, options, message):
    with pytest.raises(ConfigError, match=message):
        Translator.from_bundle(bundle, **options)
    if "bogus" not in options:
        with pytest.raises(ConfigError, match=message):
            tr.translate_lines(["1 2"], **options) if "n_best" not in options else \
                tr.translate(["1 2"], TranslateOptions(**options))
    with pytest.raises(ValueError, match="max_length must be an int >= 1, got '3'"):
        tr.translate(["1 2"], TranslateOptions(max_length="3"))


@pytest.mark.parametrize("path", [None, 123, ["x.pt"]])
def test_load_bundle_names_a_path_of_the_wrong_type(path):
    with pytest.raises(TypeError, match="load_bundle: path must be a str or os.PathLike"):
        load_bundle(path)


@pytest.mark.slow
def test_load_bundle_checks_the_device_as_the_command_line_does(model_path, capsys):
    with pytest.raises(ValueError, match="load_bundle: device 'tpu' is not a torch device"):
        load_bundle(model_path, device="tpu")
    with pytest.raises(TypeError, match="device must be a str or torch.device, got int"):
        load_bundle(model_path, device=5)
    with pytest.raises(TypeError, match="verify must be a bool"):
        load_bundle(model_path, verify="no")
    assert load_bundle(model_path, device=torch.device("cpu")).model is not None
    with pytest.raises(SystemExit):
        cli_main(["translate", "--model", str(model_path), "--device", "tpu"])
    assert "'tpu' is not a torch device (cpu, cuda, cuda:1, mps ...)" in capsys.readouterr().err


# --- 12: the source language of a model of several directions ------------------------------------

MULTI = Config.from_dict({"data": {"directions": ["de-en", "en-de"]}})


def test_a_source_language_the_model_never_saw_is_refused():
    with pytest.raises(ValueError, match="source language 'xx': this model knows de, en only"):
        evaluation_direction(MULTI.data, "xx", "de")
    assert evaluation_direction(MULTI.data, "en", "de")[1].name == "en-de"


@pytest.mark.parametrize("command", [
    ["backtranslate", "-i", "{mono}", "-o", "{out}"],
    ["evaluate", "--src", "{mono}", "--ref", "{mono}"],
])
def test_backtranslate_and_evaluate_refuse_it_before_any_work(monkeypatch, tmp_path, capsys,
                                                              command):
    def no_translation(*_args, **_kwargs):
        raise AssertionError("translated")

    fake = SimpleNamespace(translate_lines=no_translation, target_tag=lambda lang: "")
    monkeypatch.setattr(importlib.import_module(f"nmtkit.cli.{command[0]}"), "translator_from_args",
                        lambda a: (SimpleNamespace(cfg=MULTI), fake))
    mono, out = write(tmp_path / "mono.en", "a b\n"), tmp_path / "bt"
    argv = [x.format(mono=mono, out=out) for x in command]
    assert cli_main([*argv, "--model", "m.pt", "--src-lang", "xx", "--tgt-lang", "de"]) == 2
    assert "source language 'xx': this model knows de, en only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "mono.en"]  # no bt.xx, bt.de
