"""experiments/rerank_seeds.py: each arm chooses on val from one search, its choice decodes as
the translator's own reranking would, and the seeds' gains are their arms minus the reverse
model's."""

import json
import statistics

import pytest

from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import load_benchmark, make_cfg
from .helpers import write_xyz_corpus as write_corpus
from .helpers import xyz_cfg as tiny_cfg

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

seeds_bench = load_benchmark("rerank_seeds")
mbr_bench = load_benchmark("mbr")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank_seeds")
    Trainer(make_cfg(20), root / "fwd").run()
    Trainer(make_cfg(20, ["data.src_lang=en", "data.tgt_lang=de"]), root / "rev").run()
    for seed in (5, 6):
        Trainer(make_cfg(20, ["data.reverse_target=true", f"train.seed={seed}"]),
                root / f"r2l{seed}").run()
    return {k: str(root / k / "last.pt") for k in ("fwd", "rev", "r2l5", "r2l6")}


def test_each_arm_chooses_on_val_and_only_then_test_is_searched(runs, tmp_path, capsys,
                                                                 monkeypatch):
    searched = []
    real = seeds_bench.candidate_lists

    def spy(tr, base, sources, alpha, tgt_lang):
        searched.append((len(sources), alpha))
        return real(tr, base, sources, alpha, tgt_lang)

    monkeypatch.setattr(seeds_bench, "candidate_lists", spy)
    out = tmp_path / "r.json"
    seeds_bench.main(["--model", runs["fwd"], "--reverse-model", runs["rev"],
                      "--r2l-model", runs["r2l5"], "--r2l-model", runs["r2l6"],
                      "--length-penalty", "0.6", "1.0", "--reverse-weight", "1", "3",
                      "--r2l-weight", "1", "4", "--rerank", "4", "--threads", "1",
                      "--out", str(out)])
    r = json.loads(out.read_text())
    assert r == json.loads(capsys.readouterr().out) and r["benchmark"] == "rerank_seeds"
    names = [a["name"] for a in r["arms"]]
    assert names == ["beam 4 alone", "reverse model", f"reverse + right-to-left {runs['r2l5']}",
                     f"reverse + right-to-left {runs['r2l6']}",
                     "reverse + all right-to-left seeds (mean)"]
    # the grids: the beam alone tries each length penalty, the reverse arm each weight too,
    # the right-to-left arms each right-to-left weight as well
    assert [len(a["trials"]) for a in r["arms"]] == [2, 4, 8, 8, 8]
    for arm in r["arms"]:
        vals = [t["bleu"] for t in arm["trials"]]
        best = max(range(len(vals)), key=lambda i: (vals[i], -i))
        assert arm["val"] == arm["trials"][best]
        assert arm["chosen"] == {k: arm["trials"][best][k]
                                 for k in ("length_penalty", "reverse_weight", "r2l_weight")}
        assert "test" in arm
    # val once per length penalty, then test only at the penalties chosen
    n_val = len(searched) - len({a["chosen"]["length_penalty"] for a in r["arms"]})
    assert searched[:n_val] == [(searched[0][0], 0.6), (searched[0][0], 1.0)]
    assert sorted(a for _, a in searched[n_val:]) == sorted(
        {a["chosen"]["length_penalty"] for a in r["arms"]})
    rev = r["arms"][1]
    assert [g["r2l_model"] for g in r["gains"]] == [runs["r2l5"], runs["r2l6"]]
    for g, arm in zip(r["gains"], r["arms"][2:4], strict=True):
        assert g["val"] == round(arm["val"]["bleu"] - rev["val"]["bleu"], 2)
        assert g["test"] == round(arm["test"]["bleu"] - rev["test"]["bleu"], 2)
    assert r["gain_mean"]["val"] == round(statistics.mean(g["val"] for g in r["gains"]), 2)
    assert r["gain_sd"]["test"] == round(statistics.stdev(g["test"] for g in r["gains"]), 2)


@pytest.mark.parametrize("arm", [2, 4])
def test_an_arms_choice_scores_as_the_translator_reranking_with_those_models(runs, arm):
    """One seed's arm (its own right-to-left model) and the all-seeds arm (both models, their
    mean) score on val as ``nmtkit evaluate`` would decode the chosen setting."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.data.corpora import load_parallel
    from nmtkit.data.directions import Direction
    from nmtkit.decode.reverse_models import reverse_scorer

    r = seeds_bench.study([runs["fwd"]], [runs["rev"]], [runs["r2l5"], runs["r2l6"]], "bleu",
                          [0.6], [2.0], [3.0], rerank=4)
    chosen = r["arms"][arm]
    bundle = load_bundle(runs["fwd"])
    tr = Translator.from_bundle(bundle)
    tr.reverse = reverse_scorer([load_bundle(runs["rev"])], Direction("de", "en"),
                                r2l=[load_bundle(m) for m in chosen["r2l_models"]])
    par = load_parallel(bundle.cfg.data, r["valid"])
    setting = {**chosen["chosen"], "rerank": 4}
    alone = mbr_bench.run_split(tr, tr.decode_cfg, setting, par.src, par.tgt, None, None)
    assert alone["bleu"] == chosen["val"]["bleu"]
    assert chosen["r2l_models"] == ([runs["r2l5"]] if arm == 2 else [runs["r2l5"], runs["r2l6"]])


def test_the_seeds_arms_differ_only_in_their_right_to_left_scores(runs):
    r = seeds_bench.study([runs["fwd"]], [runs["rev"]], [runs["r2l5"], runs["r2l6"]], "bleu",
                          [0.6], [1.0], [0.0], rerank=4)
    # a right-to-left weight of 0 leaves every seed's arm where the reverse model's is
    assert [a["val"]["bleu"] for a in r["arms"][1:]] == [r["arms"][1]["val"]["bleu"]] * 4
    assert r["gains"] == [{"r2l_model": m, "val": 0.0, "test": 0.0}
                          for m in (runs["r2l5"], runs["r2l6"])]


def test_a_model_of_both_directions_is_studied_in_the_direction_asked_for(tmp_path):
    """--tgt-lang (and --src-lang): a model trained both ways (x-z, z-x) searches x->z, its
    own z->x direction reads the candidates back (the reverse model), and the splits' z side
    is the reference; without a target language the study is refused, as nmtkit evaluate
    refuses."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.data.directions import Direction
    from nmtkit.decode.reverse_models import reverse_scorer

    root = write_corpus(tmp_path)
    both = ["data.directions=[x-z, z-x]", f"data.test={root / 'val'}"]
    Trainer(tiny_cfg(root, steps=40, extra=both), tmp_path / "both").run()
    Trainer(tiny_cfg(root, steps=40, extra=[*both, "data.reverse_target=true"]),
            tmp_path / "r2l").run()
    model, r2l = str(tmp_path / "both" / "last.pt"), str(tmp_path / "r2l" / "last.pt")
    out = tmp_path / "r.json"
    seeds_bench.main(["--model", model, "--reverse-model", model, "--r2l-model", r2l,
                      "--tgt-lang", "z", "--src-lang", "x", "--length-penalty", "1.0",
                      "--reverse-weight", "1", "--r2l-weight", "1", "--rerank", "3",
                      "--threads", "1", "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["direction"] == "x-z" and f"({model}, x->z)" in r["protocol"]
    reverse_arm = r["arms"][1]
    bundle = load_bundle(model)
    tr = Translator.from_bundle(bundle)
    tr.reverse = reverse_scorer([bundle], Direction("x", "z"))
    sources = (root / "val.x").read_text().splitlines()
    references = (root / "val.z").read_text().splitlines()
    alone = mbr_bench.run_split(tr, tr.decode_cfg, {**reverse_arm["chosen"], "rerank": 3},
                                sources, references, None, "z")
    assert alone["bleu"] == reverse_arm["val"]["bleu"]
    with pytest.raises(ValueError, match="name the target language"):
        seeds_bench.study([model], [model], [r2l], "bleu", [1.0], [1.0], [1.0], rerank=3)


def test_refusals(runs):
    with pytest.raises(ValueError, match="at least one right-to-left model"):
        seeds_bench.study([runs["fwd"]], [runs["rev"]], [], "bleu", [0.6], [1.0], [1.0])
    with pytest.raises(ValueError, match="--metric must be one of"):
        seeds_bench.study([runs["fwd"]], [runs["rev"]], [runs["r2l5"]], "nope", [0.6], [1.0],
                          [1.0])
    with pytest.raises(ValueError, match="writes left to right"):
        seeds_bench.study([runs["fwd"]], [runs["rev"]], [runs["fwd"]], "bleu", [0.6], [1.0],
                          [1.0])
    with pytest.raises(ValueError, match="has no official tokenized reference"):
        seeds_bench.study([runs["fwd"]], [runs["rev"]], [runs["r2l5"]], "bleu_official_tok",
                          [0.6], [1.0], [1.0], rerank=4)
