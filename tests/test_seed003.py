"""Seed 003 reproducible (issue 14, item 5): configs/homework_rnn_ru_en.yaml on a small file
in the homework's format (`english<TAB>russian`, one file cut into train/valid/test), then
`nmtkit evaluate --split test` with the tokenized lowercased BLEU beside sacreBLEU."""

import json
import random

import pytest

from nmtkit.cli import main
from nmtkit.config import load

from .helpers import ROOT

RECIPE = ROOT / "configs" / "homework_rnn_ru_en.yaml"
PLACES = [("station", "вокзала"), ("beach", "пляжа"), ("airport", "аэропорта"), ("museum", "музея")]
KINDS = [("Hotel", "Отель"), ("Apartment", "Апартаменты"), ("Guest house", "Гостевой дом")]


def homework_file(path, n: int = 120) -> list[str]:
    """Lines like the homework's data.txt: English, a tab, Russian (hotel descriptions)."""
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        (en_kind, ru_kind), (en_place, ru_place) = rng.choice(KINDS), rng.choice(PLACES)
        minutes = rng.randint(2, 9)
        lines.append(f"{en_kind} is {minutes} minutes from the {en_place}.\t"
                     f"{ru_kind} в {minutes} минутах от {ru_place}.")
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines


def test_the_recipe_is_the_homeworks_setup():
    cfg = load(RECIPE)
    d, m, t = cfg.data, cfg.model, cfg.train
    assert (d.corpus, d.tsv_columns, d.tsv_split) == ("tsv", ("tgt", "src"), (0.8, 0.05, 0.15))
    assert (d.src_lang, d.tgt_lang, d.tokenizer, d.lowercase, d.reverse_source) == (
        "ru", "en", "word", True, True)
    assert (m.arch, m.attention, m.layers, m.emb_dim, m.rnn_hidden, m.dropout) == (
        "rnn", "concat", 2, 256, 512, 0.5)
    assert (m.teacher_forcing, t.clip_norm, t.label_smoothing, cfg.decode.beam) == (0.5, 5.0, 0.0, 1)
    text = RECIPE.read_text(encoding="utf-8")
    for line in text.splitlines():  # every key is commented, as in the other recipes
        if line.startswith("  ") and ":" in line and not line.strip().startswith("#"):
            assert " # " in line, f"uncommented key: {line}"


@pytest.mark.slow
def test_seed003_trains_and_evaluates_on_a_homework_file(tmp_path, capsys):
    pytest.importorskip("spacy")
    data = tmp_path / "data.txt"
    homework_file(data)
    run = tmp_path / "run"
    sets = [f"data.tsv_file={data}", "model.layers=1", "model.emb_dim=16", "model.rnn_hidden=32",
            "train.max_steps=12", "train.valid_every=6", "train.max_tokens=400", "train.threads=1",
            "train.log_every=3", "data.min_freq=1"]
    assert main(["train", str(RECIPE), "--run-dir", str(run), *[x for s in sets for x in ("--set", s)]]) == 0
    capsys.readouterr()
    samples = (run / "samples.txt").read_text(encoding="utf-8")
    assert "[1] src: " in samples and "минутах" in samples  # Russian source, English reference
    assert main(["evaluate", "--model", str(run / "best.pt"), "--split", "test"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["split"] == "test" and out["n"] == 120 - 96 - 6  # 0.8 / 0.05 / the rest
    assert 0.0 <= out["bleu_lc_tok"] <= 100.0
    assert out["signature"]["bleu_lc_tok"].startswith("nrefs:1|case:lc|eff:no|tok:none")
    assert main(["evaluate", "--model", str(run / "best.pt"), "--split", "val"]) == 2
    assert "there is no split 'val'" in capsys.readouterr().err
