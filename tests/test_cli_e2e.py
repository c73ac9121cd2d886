"""End to end through the command line on real Multi30k data: train, translate, evaluate,
average. A tiny model and a few steps: this checks the plumbing, not the quality."""

import json

import pytest

from .helpers import ROOT, nmtkit

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


def test_train_translate_evaluate_average_on_multi30k(tmp_path, multi30k_mirror):
    run = tmp_path / "run"
    out = nmtkit("train", ROOT / "configs" / "multi30k_transformer_small.yaml", "--run-dir", run,
                 "--set", "train.max_steps=12", "--set", "train.valid_every=6",
                 "--set", "train.valid_max_sents=30", "--set", "data.vocab_size=600",
                 "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.heads=2",
                 "--set", "model.layers=1", "--set", "train.max_tokens=1500",
                 "--set", "train.lr=5", "--set", "train.warmup=10", "--set", "train.keep_last=2")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["step"] == 12
    for name in ("last.pt", "best.pt", "metrics.csv"):
        assert (run / name).exists(), name
    rows = (run / "metrics.csv").read_text().strip().splitlines()
    assert rows[0].startswith("step,epoch,train_loss") and len(rows) == 3

    src = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee."]
    tr = nmtkit("translate", "--model", run / "best.pt", "--beam", 3, input="\n".join(src) + "\n")
    lines = tr.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    plain = nmtkit("translate", "--model", run / "best.pt", "--beam", 3, "--no-fast",
                   input="\n".join(src) + "\n")
    assert plain.stdout == tr.stdout  # nmtkit.fast off: the same translations

    infile, outfile = tmp_path / "in.de", tmp_path / "out.en"
    infile.write_text("\n".join(src) + "\n", encoding="utf-8")
    nmtkit("translate", "--model", run / "last.pt", "--beam", 1, "-i", infile, "-o", outfile)
    assert len(outfile.read_text(encoding="utf-8").splitlines()) == 3

    ref = tmp_path / "ref.en"
    ref.write_text("A man rides a bike.\n\nTwo dogs play in the snow.\n", encoding="utf-8")
    ev = nmtkit("evaluate", "--model", run / "best.pt", "--src", infile, "--ref", ref,
                "--beam", 2)
    result = json.loads(ev.stdout)
    assert result["n"] == 3 and 0.0 <= result["bleu"] <= 100.0
    assert result["signature"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "chrf" in result
    # On a Multi30k split: also BLEU against the official tokenized lowercased reference.
    ev = nmtkit("evaluate", "--model", run / "best.pt", "--split", "test_2016_flickr", "--beam", 1)
    result = json.loads(ev.stdout)
    assert result["n"] == 1000 and 0.0 <= result["bleu_official_tok"] <= 100.0
    assert result["signature"]["bleu_official_tok"].endswith("test_2016_flickr.lc.norm.tok.en")

    steps = sorted(run.glob("step_*.pt"))
    assert len(steps) == 2
    nmtkit("average", "--out", tmp_path / "avg.pt", *steps)
    tr2 = nmtkit("translate", "--model", tmp_path / "avg.pt", input="Ein Hund.\n")
    assert len(tr2.stdout.splitlines()) == 1


def test_cli_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: 30\n  heads: 4\n")
    p = nmtkit("train", bad, check=False)
    assert p.returncode == 2 and "divisible" in p.stderr and "Traceback" not in p.stderr
    p = nmtkit("translate", "--model", tmp_path / "none.pt", input="x\n", check=False)
    assert p.returncode == 2 and "not found" in p.stderr
    p = nmtkit("translate", "--model", tmp_path / "none.pt", "--beam", 0, input="x\n", check=False)
    assert p.returncode == 2 and "beam" in p.stderr
