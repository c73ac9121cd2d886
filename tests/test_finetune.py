"""Fine-tuning (issue 16, item 1): ``nmtkit train --init-from`` starts from the parent's
weights, tokenizers and vocabularies with a fresh optimizer; ``train.freeze`` keeps groups
fixed; ``train.forgetting_splits`` writes the before/after report."""

import json
import logging
import random

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.cli import main as cli_main
from nmtkit.config import FREEZE_GROUPS, ConfigError, ModelConfig, load
from nmtkit.models import build_model
from nmtkit.train.finetune import parameter_groups
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, run_until_ctrl_c, tiny_copy_overrides

COPY = ROOT / "configs" / "copy_task.yaml"


def make_cfg(steps=20, extra=()):
    return load(COPY, tiny_copy_overrides(steps) + list(extra))


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A copy-task model trained for 20 steps: (its run directory, the Trainer)."""
    run = tmp_path_factory.mktemp("parent")
    trainer = Trainer(make_cfg(20), run)
    trainer.run()
    return run, trainer


@pytest.mark.slow
def test_init_from_starts_from_the_parent_weights_with_a_fresh_optimizer(parent, tmp_path):
    run, trainer = parent
    parent_valid = trainer.validate()
    child = Trainer(make_cfg(5, ["train.lr=0.5", "train.warmup=3", "train.seed=9"]), tmp_path,
                    Start.fine_tune(run / "last.pt"))
    # Step 0 of the child is the parent: the same validation loss on the same data.
    assert child.validate()["valid_loss"] == parent_valid["valid_loss"]
    assert child.data.vocabs.src_vocab == trainer.data.vocabs.src_vocab
    assert child.progress.step == 0 and child.progress.parent == str(run / "last.pt")
    assert not child.updater.optimizer.state  # fresh: no Adam moments carried over
    child.run()
    saved = load_checkpoint(tmp_path / "last.pt")
    assert saved["progress"]["parent"] == str(run / "last.pt")
    assert saved["progress"]["step"] == 5


@pytest.mark.slow
def test_the_new_corpus_is_encoded_with_the_parents_vocabulary(parent, tmp_path, caplog):
    run, trainer = parent
    # Symbols 11..15 never occurred in the parent's data: they become <unk>.
    cfg = make_cfg(2, ["data.copy_vocab=16"])
    with caplog.at_level(logging.INFO, logger="nmtkit.train"):
        child = Trainer(cfg, tmp_path, Start.fine_tune(run / "last.pt"))
    assert child.data.vocabs.tgt_vocab == trainer.data.vocabs.tgt_vocab
    rate = next(r.getMessage() for r in caplog.records if "are <unk>" in r.getMessage())
    # 5 of 15 symbols are unknown: about a third of the tokens on both sides.
    src_pct, tgt_pct = (float(w.rstrip("%")) for w in rate.split() if w.endswith("%"))
    assert 25 < src_pct < 42 and 25 < tgt_pct < 42


@pytest.mark.slow
def test_the_model_section_must_match_the_parents(parent, tmp_path):
    run, _ = parent
    with pytest.raises(ConfigError, match=r"model\.d_ff = 64 in the parent, 128 here"):
        Trainer(make_cfg(2, ["model.d_ff=128"]), tmp_path, Start.fine_tune(run / "last.pt"))
    assert not (tmp_path / "last.pt").exists()


@pytest.mark.slow
def test_vocab_from_takes_the_vocabularies_only_and_the_two_runs_ensemble(parent, tmp_path, caplog):
    """--vocab-from: the other checkpoint's tokenizers and vocabularies with fresh weights of
    any size, so that the runs can decode as one ensemble; without it, a corpus with more
    symbols builds another vocabulary, which the ensemble refuses."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.decode.ensemble import ensemble_translator

    run, trainer = parent
    cfg = make_cfg(3, ["data.copy_vocab=16", "model.d_ff=128", "train.seed=5"])
    with caplog.at_level(logging.INFO, logger="nmtkit.train"):
        child = Trainer(cfg, tmp_path / "shared", Start.vocabulary_from(run / "last.pt"))
    assert child.data.vocabs.src_vocab == trainer.data.vocabs.src_vocab
    assert child.data.vocabs.tgt_vocab == trainer.data.vocabs.tgt_vocab
    assert any("are <unk>" in r.getMessage() for r in caplog.records)  # symbols 11..15
    assert child.model.cfg.d_ff == 128  # a model of another size than the checkpoint's
    emb = "tgt_embed.lut.weight"
    assert not torch.equal(child.model.state_dict()[emb], trainer.model.state_dict()[emb])  # fresh
    assert child.progress.parent is None
    child.run()
    own = Trainer(make_cfg(3, ["data.copy_vocab=16", "train.seed=5"]), tmp_path / "own")
    own.run()
    assert own.data.vocabs.tgt_vocab != trainer.data.vocabs.tgt_vocab
    bundles = [load_bundle(run / "last.pt"), load_bundle(tmp_path / "shared" / "last.pt")]
    tr = ensemble_translator(bundles)
    assert len(tr.translate_lines(["1 2 3"], beam=2)) == 1
    with pytest.raises(ValueError, match="vocabulary differs"):
        ensemble_translator([bundles[0], load_bundle(tmp_path / "own" / "last.pt")])


@pytest.mark.slow
def test_vocab_from_on_the_command_line(parent, tmp_path):
    run, _ = parent
    args = ["train", str(COPY), "--run-dir", str(tmp_path / "student"), "--vocab-from",
            str(run / "last.pt")]
    for s in [*tiny_copy_overrides(2), "data.copy_vocab=16"]:
        args += ["--set", s]
    assert cli_main(args) == 0
    mine, theirs = load_checkpoint(tmp_path / "student" / "last.pt"), load_checkpoint(run / "last.pt")
    assert mine["progress"]["step"] == 2
    assert mine["tokenizers"] == theirs["tokenizers"] and mine["vocab"] == theirs["vocab"]


@pytest.mark.slow
def test_init_from_and_vocab_from_are_refused_together(parent, tmp_path, capsys):
    run, _ = parent
    args = ["train", str(COPY), "--run-dir", str(tmp_path / "x"), "--init-from",
            str(run / "last.pt"), "--vocab-from", str(run / "last.pt")]
    assert cli_main(args) == 2
    assert capsys.readouterr().err.startswith(
        "nmtkit: error: --init-from and --vocab-from cannot be combined")
    assert not (tmp_path / "x").exists()


def changed(before, after):
    return {k for k in before if not torch.equal(before[k], after[k])}


def weight_names(model):
    """Every name of a parameter (a tied matrix under each of its names; no buffers)."""
    return {n for n, _ in model.named_parameters(remove_duplicate=False)}


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [("encoder",), ("embeddings",), ("decoder",),
                                    ("encoder", "embeddings")])
def test_frozen_parameters_do_not_change(parent, tmp_path, frozen):
    run, trainer = parent
    names = weight_names(trainer.model)
    start = {k: v.clone() for k, v in trainer.model.state_dict().items() if k in names}
    child = Trainer(make_cfg(4, [f"train.freeze={list(frozen)}"]), tmp_path,
                    Start.fine_tune(run / "last.pt"))
    child.run()
    moved = changed(start, child.model.state_dict())
    enc = {k for k in start if k.startswith("encoder")}
    # The copy recipe ties all three embeddings (tie_all): one matrix, in "embeddings".
    emb = {"src_embed.lut.weight", "tgt_embed.lut.weight", "generator.weight"}
    dec = set(start) - enc - emb
    expect_fixed = set().union(*({"encoder": enc, "embeddings": emb, "decoder": dec}[g]
                                 for g in frozen))
    assert not moved & expect_fixed
    assert moved == set(start) - expect_fixed  # everything else trained
    assert all(not p.requires_grad for g in frozen for p in parameter_groups(child.model)[g])


@pytest.mark.slow
def test_freezing_the_decoder_leaves_a_tied_output_projection_trainable(parent, tmp_path):
    """The tied pre-softmax matrix is the target embedding: it trains unless ``embeddings``
    is frozen (the output bias belongs to the decoder)."""
    run, trainer = parent
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    child = Trainer(make_cfg(4, ["train.freeze=[decoder]"]), tmp_path,
                    Start.fine_tune(run / "last.pt"))
    child.run()
    after = child.model.state_dict()
    assert not torch.equal(start["generator.weight"], after["generator.weight"])
    assert torch.equal(start["generator.bias"], after["generator.bias"])


TINY = dict(layers=1, d_model=16, d_ff=32, heads=2, emb_dim=8, rnn_hidden=16, max_positions=32)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize("tie", [(False, False), (True, False), (True, True)])
def test_every_parameter_is_in_exactly_one_group(arch, tie):
    model = build_model(ModelConfig(arch=arch, tie_output=tie[0], tie_all=tie[1], **TINY), 20, 20)
    groups = parameter_groups(model)
    ids = [id(p) for g in FREEZE_GROUPS for p in groups[g]]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})
    assert all(groups[g] for g in FREEZE_GROUPS)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    assert {id(p) for p in groups["embeddings"]} == embeddings


@pytest.mark.slow
def test_forgetting_report_before_and_after(parent, tmp_path, capsys):
    run, _ = parent
    args = ["train", str(COPY), "--run-dir", str(tmp_path / "child"), "--init-from",
            str(run / "last.pt"), "--report-splits", "val", "other"]
    for s in tiny_copy_overrides(10):
        args += ["--set", s]
    assert cli_main(args) == 0
    report = json.loads((tmp_path / "child" / "forgetting.json").read_text())
    assert report["parent"] == str(run / "last.pt") and report["step"] == 10
    assert set(report["splits"]) == {"val", "other"}
    capsys.readouterr()
    # "before" is the parent as ``nmtkit evaluate`` scores it; "after" the child's last.pt.
    for split, entry in report["splits"].items():
        for model, when in ((run / "last.pt", "before"), (tmp_path / "child" / "last.pt", "after")):
            assert cli_main(["evaluate", "--model", str(model), "--split", split]) == 0
            scored = json.loads(capsys.readouterr().out)
            assert entry[when] == {"bleu": scored["bleu"], "chrf": scored["chrf"], "n": scored["n"]}
        assert entry["delta"] == {k: round(entry["after"][k] - entry["before"][k], 2)
                                  for k in ("bleu", "chrf")}


@pytest.mark.slow
def test_forgetting_before_survives_a_resume(parent, tmp_path, monkeypatch):
    run, _ = parent
    cfg = make_cfg(10, ["train.forgetting_splits=[val]"])
    first = Trainer(cfg, tmp_path, Start.fine_tune(run / "last.pt"))
    before = first.progress.forgetting_before
    assert set(before) == {"val"}
    run_until_ctrl_c(monkeypatch, first, 7)
    assert not (tmp_path / "forgetting.json").exists()  # written when training ends
    resumed = Trainer(cfg, tmp_path, Start.resume())
    assert resumed.progress.forgetting_before == before
    resumed.run()
    report = json.loads((tmp_path / "forgetting.json").read_text())
    assert report["splits"]["val"]["before"] == before["val"]


@pytest.mark.slow
def test_the_command_line_reports_a_bad_parent_in_one_line(parent, tmp_path, capsys):
    run, _ = parent
    base = ["train", str(COPY), "--run-dir", str(tmp_path / "child")]
    for s in tiny_copy_overrides(2):
        base += ["--set", s]
    assert cli_main([*base, "--init-from", str(tmp_path / "nope.pt")]) == 2
    assert "nope.pt: checkpoint not found" in capsys.readouterr().err
    assert cli_main([*base, "--set", "model.heads=4", "--init-from", str(run / "last.pt")]) == 2
    err = capsys.readouterr().err
    assert "the model section must match the parent's: model.heads = 2 in the parent, 4 here" in err
    assert "Traceback" not in err and not (tmp_path / "child").exists()


def test_split_direction_reads_a_split_in_the_named_direction():
    from nmtkit.config import DataConfig
    from nmtkit.train.finetune import split_direction

    data = DataConfig(corpus="multi30k", src_lang="en", tgt_lang="de")
    other, split, lang = split_direction("de-en:test_2016_flickr", data)
    assert (other.src_lang, other.tgt_lang, split) == ("de", "en", "test_2016_flickr")
    assert other.corpus == "multi30k" and data.src_lang == "en"  # a copy; the run's unchanged
    assert lang is None  # a model of one direction has one output language: nothing to ask for
    assert split_direction("val", data) == (data, "val", None)
    assert split_direction("/data/a-b:c", data) == (data, "/data/a-b:c", None)  # a path prefix
    multi = DataConfig(corpus="multi30k", directions=("de-en", "en-de"))
    other, split, lang = split_direction("en-de:val", multi)
    assert (other.src_lang, other.tgt_lang, other.directions, split, lang) == ("en", "de", (), "val", "de")


@pytest.mark.parametrize("entry", ["de-de:val", "de-:val", "-en:val", "de-en:", "de-en-fr:val",
                                   "d e-en:val", "de-e.n:val"])
def test_a_malformed_direction_is_refused(entry):
    with pytest.raises(ConfigError, match=r"must write a direction as SRC-TGT:SPLIT with two "
                       rf"different language codes .*, got \['{entry}'\]"):
        make_cfg(5, [f"train.forgetting_splits={json.dumps(['val', entry])}"])


@pytest.mark.parametrize("entry", ["val", "de-en:test_2016_flickr", "pt_br-en:val", "/a-b/c:d",
                                   "runs/x-y:z"])
def test_plain_names_path_prefixes_and_directions_are_accepted(entry):
    assert make_cfg(5, [f"train.forgetting_splits={json.dumps([entry])}"]).train.forgetting_splits == (entry,)


def test_forgetting_scores_a_split_in_the_parents_direction(tmp_path, monkeypatch):
    """A model that only copies its input: on ``val`` read aa -> bb (the run's direction) it
    scores low, on ``aa-cc:val`` (cc is a copy of aa) it scores 100; the report keeps the
    names as written."""
    from types import SimpleNamespace

    from nmtkit.train import finetune
    from nmtkit.train.finetune import score_splits

    (tmp_path / "val.aa").write_text("one two three four\nfive six seven eight\n")
    (tmp_path / "val.cc").write_text("one two three four\nfive six seven eight\n")
    (tmp_path / "val.bb").write_text("nine ten eleven twelve\nthirteen fourteen fifteen sixteen\n")

    class Copy:
        def translate_lines(self, lines, tgt_lang=None):
            assert tgt_lang is None  # a model of one direction is not asked for a language
            return list(lines)

    model = torch.nn.Linear(1, 1)
    bundle = SimpleNamespace(model=model)
    monkeypatch.setattr(finetune, "Translator",
                        SimpleNamespace(from_bundle=lambda bundle, **decode_overrides: Copy()))
    data = make_cfg(5, ["data.corpus=parallel", "data.src_lang=aa", "data.tgt_lang=bb"]).data
    prefix = str(tmp_path / "val")
    out = score_splits(bundle, data, (prefix, f"aa-cc:{prefix}"))  # type: ignore[arg-type]
    assert set(out) == {prefix, f"aa-cc:{prefix}"}
    assert out[f"aa-cc:{prefix}"]["bleu"] == 100.0
    assert out[prefix]["bleu"] < 5.0


def write_mapped_corpus(root, n_train=400, n_valid=20):
    """Two line-aligned languages: xx (random symbols a..f) and yy, the same sentences
    written in p..u (a -> p, b -> q, ...). A model trained xx -> yy only ever writes p..u, so
    read in the other direction (yy -> xx) it scores about 0: the directions are told apart."""
    rng = random.Random(0)
    for split, n in (("train", n_train), ("val", n_valid)):
        xs = [[rng.choice("abcdef") for _ in range(rng.randint(3, 6))] for _ in range(n)]
        for lang, shift in (("xx", 0), ("yy", 15)):
            (root / f"{split}.{lang}").write_text(
                "".join(" ".join(chr(ord(c) + shift) for c in x) + "\n" for x in xs))
    return root


@pytest.mark.slow
def test_forgetting_report_across_directions(tmp_path, capsys):
    """A parent trained xx -> yy, fine-tuned yy -> xx with ``--report-splits VAL
    xx-yy:VAL``: the plain split is read in the child's direction, the qualified one in the
    parent's, whose "before" is the parent's own score."""
    root = write_mapped_corpus(tmp_path)
    val = str(root / "val")
    data = ["data.corpus=parallel", f"data.train={root / 'train'}", f"data.valid={val}",
            "train.lr_schedule=constant", "train.lr=0.005", "train.valid_every=50"]
    parent_run, child_run = tmp_path / "parent", tmp_path / "child"
    Trainer(make_cfg(150, [*data, "data.src_lang=xx", "data.tgt_lang=yy"]), parent_run).run()
    args = ["train", str(COPY), "--run-dir", str(child_run), "--init-from",
            str(parent_run / "last.pt"), "--report-splits", val, f"xx-yy:{val}"]
    for s in [*tiny_copy_overrides(10), *data, "data.src_lang=yy", "data.tgt_lang=xx"]:
        args += ["--set", s]
    assert cli_main(args) == 0
    report = json.loads((child_run / "forgetting.json").read_text())["splits"]
    assert set(report) == {val, f"xx-yy:{val}"}  # the names as written
    capsys.readouterr()

    def evaluate(run):  # ``nmtkit evaluate`` on VAL in the model's own direction
        assert cli_main(["evaluate", "--model", str(run / "last.pt"), "--split", val]) == 0
        scored = json.loads(capsys.readouterr().out)
        return {"bleu": scored["bleu"], "chrf": scored["chrf"], "n": scored["n"]}

    parent = evaluate(parent_run)
    assert parent["bleu"] > 30  # the parent learned xx -> yy (about 64)
    assert report[f"xx-yy:{val}"]["before"] == parent
    assert report[val]["before"]["bleu"] < 5  # the parent read yy -> xx: only p..u written
    assert report[val]["after"] == evaluate(child_run)  # the child's direction
    for entry in report.values():
        assert entry["delta"] == {k: round(entry["after"][k] - entry["before"][k], 2)
                                  for k in ("bleu", "chrf")}
