"""experiments/mbr.py: MBR settings scored on val, the best chosen there, test scored after."""

import json

import pytest

from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import load_benchmark, make_cfg

mbr_bench = load_benchmark("mbr")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    run = tmp_path_factory.mktemp("mbr_bench")
    Trainer(make_cfg(20), run).run()
    return run / "last.pt"


def test_settings_are_typed_as_a_decode_section():
    assert mbr_bench.parse_setting("") == {}
    assert mbr_bench.parse_setting("mbr=20, mbr_scale=0,mbr_utility=chrf") == {
        "mbr": 20, "mbr_scale": 0.0, "mbr_utility": "chrf"}
    for bad in ("mbr", "mbr=x", "nope=1"):
        with pytest.raises(ValueError):
            mbr_bench.parse_setting(bad)


@pytest.mark.slow
def test_the_choice_is_made_on_val_and_test_is_scored_for_baseline_and_choice(
        model_path, tmp_path, capsys, monkeypatch):
    seen = []
    real = mbr_bench.run_split

    def spy(tr, base, setting, sources, references, official, tgt_lang, searches=None):
        out = real(tr, base, setting, sources, references, official, tgt_lang, searches)
        seen.append((dict(setting), len(sources)))
        return out

    monkeypatch.setattr(mbr_bench, "run_split", spy)
    out = tmp_path / "r.json"
    mbr_bench.main(["--model", str(model_path), "--setting", "beam=2",
                    "--setting", "beam=2,mbr=4", "--setting", "beam=2,mbr=4,mbr_utility=chrf",
                    "--threads", "1", "--out", str(out)])
    r = json.loads(out.read_text())
    assert r == json.loads(capsys.readouterr().out)
    assert [row["options"] for row in r["rows"]] == [
        {"beam": 2}, {"beam": 2, "mbr": 4}, {"beam": 2, "mbr": 4, "mbr_utility": "chrf"}]
    vals = [row["val"]["bleu"] for row in r["rows"]]
    assert r["chosen"] == max(range(3), key=lambda i: (vals[i], -i))
    tested = {i for i, row in enumerate(r["rows"]) if "test" in row}
    assert tested == {0, r["chosen"]}
    # every val setting ran before the first test translation
    assert [s for s, _ in seen[:3]] == [row["options"] for row in r["rows"]]
    assert len(seen) == 3 + len(tested)
    assert r["benchmark"] == "mbr" and r["valid"] == "val" and r["test"] == "test_2016_flickr"


@pytest.mark.slow
def test_reranking_settings_use_the_reverse_model_given(model_path, tmp_path):
    reverse = tmp_path / "rev"
    Trainer(make_cfg(20, ["data.src_lang=en", "data.tgt_lang=de"]), reverse).run()
    r = mbr_bench.compare([str(model_path)], ["beam=2", "beam=2,rerank=4,reverse_weight=0",
                                              "beam=4"], "bleu",
                          reverse_models=[str(reverse / "last.pt")])
    assert r["reverse_models"] == [str(reverse / "last.pt")] and "Reranking" in r["protocol"]
    # weight 0 keeps the order of the beam of 4 that gave the candidates
    assert r["rows"][1]["val"]["bleu"] == r["rows"][2]["val"]["bleu"]
    with pytest.raises(ValueError, match="decode.rerank needs a model of the reverse direction"):
        mbr_bench.compare([str(model_path)], ["beam=2", "rerank=4"], "bleu")


@pytest.mark.slow
def test_reranked_settings_share_one_search_and_r2l_models_score_too(model_path, tmp_path,
                                                                     monkeypatch):

    Trainer(make_cfg(20, ["data.src_lang=en", "data.tgt_lang=de"]), tmp_path / "rev").run()
    Trainer(make_cfg(20, ["data.reverse_target=true", "train.seed=5"]), tmp_path / "r2l").run()
    rev, r2l = str(tmp_path / "rev" / "last.pt"), str(tmp_path / "r2l" / "last.pt")
    searched = []
    real = Translator.translate

    depth = [0]

    def counting(self, lines, *args, **kwargs):  # a search: the outermost call (a line's
        if depth[0] == 0:                        # sentences are translated by a call within)
            searched.append(self.decode_cfg)
        depth[0] += 1
        try:
            return real(self, lines, *args, **kwargs)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(Translator, "translate", counting)
    settings = ["beam=2", "beam=2,rerank=4,reverse_weight=0", "beam=2,rerank=4,reverse_weight=3",
                "beam=2,rerank=4,reverse_weight=3,r2l_weight=2"]
    r = mbr_bench.compare([str(model_path)], settings, "bleu", reverse_models=[rev],
                          r2l_models=[r2l])
    tested = {i for i, row in enumerate(r["rows"]) if "test" in row}
    assert len(searched) == 2 + len(tested)  # val: the baseline, then one search for the three
    assert r["r2l_models"] == [r2l] and "Right-to-left models" in r["protocol"]
    # a setting chosen from the shared search scores as the same setting decoded on its own
    from nmtkit.checkpoint import load_bundle
    from nmtkit.data.corpora import load_parallel
    from nmtkit.data.directions import Direction
    from nmtkit.decode.reverse_models import reverse_scorer

    bundle = load_bundle(model_path)
    tr = Translator.from_bundle(bundle)
    tr.reverse = reverse_scorer([load_bundle(rev)], Direction("de", "en"),
                                r2l=[load_bundle(r2l)])
    par = load_parallel(bundle.cfg.data, r["valid"])
    alone = mbr_bench.run_split(tr, tr.decode_cfg, r["rows"][3]["options"], par.src, par.tgt,
                                None, None)
    assert alone["bleu"] == r["rows"][3]["val"]["bleu"]
