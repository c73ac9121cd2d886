"""Back-translation (issue 16, item 2): ``nmtkit backtranslate`` writes aligned synthetic pairs,
and ``data.extra`` mixes them into training, weighted and tagged."""

import json
from pathlib import Path

import pytest

from nmtkit.cli import main as cli_main
from nmtkit.config import Config, ConfigError, load
from nmtkit.data.prepare import (
    build_vocabularies,
    check_tags,
    encode_parallel,
    load_training,
    pairs_of,
    weighted_indices,
)
from nmtkit.data.vocab import Vocab
from nmtkit.train.loop import Trainer

from .helpers import ROOT, tiny_copy_overrides

COPY = ROOT / "configs" / "copy_task.yaml"


@pytest.fixture(scope="module")
def reverse_model(tmp_path_factory):
    """A tiny copy-task model (data.src_lang de, tgt_lang en): the "reverse" direction, so its
    back-translations are the en side of an en -> de forward corpus."""
    run = tmp_path_factory.mktemp("reverse") / "run"
    Trainer(load(COPY, tiny_copy_overrides(20)), run).run()
    return run / "last.pt"


MONO = ["1 2 3 4", "", "5 6 7", "   ", "8 9 10 1 2"]


def backtranslate(tmp_path, model, *flags):
    mono = tmp_path / "mono.de"
    mono.write_text("".join(line + "\n" for line in MONO))
    prefix = tmp_path / "synth"
    assert cli_main(["backtranslate", "--model", str(model), "-i", str(mono), "-o", str(prefix),
                     *flags]) == 0
    return prefix


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--beam", "2"], ["--sampling", "--seed", "3", "--batch-size", "2"]])
def test_backtranslate_writes_aligned_pairs_without_blank_lines(tmp_path, reverse_model, flags, capsys):
    prefix = backtranslate(tmp_path, reverse_model, *flags)
    report = json.loads(capsys.readouterr().out)
    # The reverse model reads de and writes en: en is the forward source, de its target.
    src, tgt = lines(prefix.with_suffix(".en")), lines(prefix.with_suffix(".de"))
    assert tgt == ["1 2 3 4", "5 6 7", "8 9 10 1 2"]  # the monolingual lines, blanks dropped
    assert len(src) == 3 and all("\n" not in s for s in src)
    assert report["pairs"] == 3 and report["dropped_empty"] == 2
    assert report["sampling"] == ("--sampling" in flags)
    assert report["src"] == str(prefix) + ".en" and report["tgt"] == str(prefix) + ".de"
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary file left


@pytest.mark.slow
def test_a_full_disk_keeps_the_back_translations_and_names_where(tmp_path, reverse_model,
                                                                   monkeypatch, capsys):
    """Hours of back-translation are never lost to the last step: a file that cannot be
    written (here a full disk) is kept in a temporary file, and the error says where."""
    import errno

    import nmtkit.io

    def full(fd):  # the data does not reach the disk: ENOSPC, naming no file, as fsync says it
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(nmtkit.io.os, "fsync", full)
    mono = tmp_path / "mono.de"
    mono.write_text("".join(line + "\n" for line in MONO))
    assert cli_main(["backtranslate", "--model", str(reverse_model), "-i", str(mono),
                     "-o", str(tmp_path / "synth")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'synth'}.en: cannot write the back-translations (No space left" in err
    kept = err.rsplit("kept in ", 1)[1].strip()
    assert len(lines(Path(kept))) == 3  # the three non-blank lines' translations


@pytest.mark.slow
def test_sampling_with_a_seed_is_reproducible(tmp_path, reverse_model):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = backtranslate(tmp_path / "a", reverse_model, "--sampling", "--seed", "7")
    b = backtranslate(tmp_path / "b", reverse_model, "--sampling", "--seed", "7")
    assert lines(a.with_suffix(".en")) == lines(b.with_suffix(".en"))


@pytest.mark.slow
def test_a_model_of_one_direction_takes_its_own_target_language_only(tmp_path, reverse_model,
                                                                     capsys):
    """``--tgt-lang`` picks the direction of a model of several (test_multilingual.py); a model
    of one takes its own target language and refuses another before writing anything."""
    prefix = backtranslate(tmp_path, reverse_model, "--tgt-lang", "en")
    assert json.loads(capsys.readouterr().out)["src"] == str(prefix) + ".en"
    other = tmp_path / "other"
    assert cli_main(["backtranslate", "--model", str(reverse_model), "-i", str(tmp_path / "mono.de"),
                     "-o", str(other), "--tgt-lang", "de"]) == 2
    assert "this model translates de -> en only, not de -> de" in capsys.readouterr().err
    assert not list(tmp_path.glob("other*"))


@pytest.mark.slow
def test_backtranslate_needs_input_and_prefix(reverse_model, capsys):
    with pytest.raises(SystemExit):
        cli_main(["backtranslate", "--model", str(reverse_model), "-i", "x"])
    assert "-o/--output" in capsys.readouterr().err


# --- data.extra ------------------------------------------------------------------------------

REAL = (["a b c", "d e", "f g h i"], ["A B C", "D E", "F G H I"])
SYNTH = ([f"s{i} t{i}" for i in range(10)] + ["", "x"], [f"S{i}" for i in range(10)] + ["Y", ""])
"""Ten usable synthetic pairs, and two with an empty side (dropped)."""


def write_pair(prefix, src, tgt):
    for lang, text in (("de", src), ("en", tgt)):
        prefix.with_name(f"{prefix.name}.{lang}").write_text("".join(x + "\n" for x in text))


def extra_cfg(tmp_path, *entries, sets=()):
    write_pair(tmp_path / "train", *REAL)
    write_pair(tmp_path / "val", ["a b"], ["A B"])
    write_pair(tmp_path / "synth", *SYNTH)
    extra = json.dumps([{"path": str(tmp_path / "synth"), **e} for e in entries])
    return load(COPY, tiny_copy_overrides(5) + [
        "data.corpus=parallel", f"data.train={tmp_path / 'train'}", f"data.valid={tmp_path / 'val'}",
        "data.src_lang=de", "data.tgt_lang=en", "data.min_freq=2", "data.joint_vocab=false",
        "model.tie_all=false", "model.tie_output=false", f"data.extra={extra}", *sets])


def encoded(cfg):
    """(the training pairs, the vocabularies, each pair's source ids)."""
    par = load_training(cfg.data)
    v = build_vocabularies(cfg.data, pairs_of(par))
    ids = encode_parallel(cfg.data, par, v, drop_long=True)
    return par, v, [list(ids.source(i)) for i in range(len(ids))]


def test_extra_pairs_follow_the_real_ones_tagged(tmp_path):
    cfg = extra_cfg(tmp_path, {"weight": 1, "tag": "<bt>"})
    par, v, ids = encoded(cfg)
    assert len(par) == len(ids) == 3 + 10
    tag = v.src_vocab.stoi["<bt>"]  # one token (min_freq 2 does not drop it; it is no text)
    assert [row[0] for row in ids[3:]] == [tag] * 10
    assert all(tag not in row for row in ids[:3])  # real pairs are untagged
    assert v.src_vocab.decode(ids[3]) == ["<bt>", "<unk>", "<unk>"]  # s0, t0: below min_freq
    assert par.tgt[3:] == SYNTH[1][:10]
    assert "<bt>" not in v.tgt_vocab


def test_tag_stays_first_with_a_reversed_source_and_untagged_entries_have_none(tmp_path):
    cfg = extra_cfg(tmp_path, {"tag": "<bt>"}, {"tag": ""}, sets=["data.reverse_source=true"])
    par, v, ids = encoded(cfg)
    assert len(par) == 3 + 10 + 10
    tag = v.src_vocab.stoi["<bt>"]
    assert [row[0] for row in ids[3:13]] == [tag] * 10
    assert all(tag not in row for row in [*ids[:3], *ids[13:]])


def test_weight_two_doubles_and_a_half_keeps_a_seeded_half(tmp_path):
    par2, _, ids2 = encoded(extra_cfg(tmp_path, {"weight": 2}))
    assert len(ids2) == 3 + 20
    assert sorted(par2.tgt[3:]) == sorted(SYNTH[1][:10] * 2)
    half = load_training(extra_cfg(tmp_path, {"weight": 0.5}).data)
    again = load_training(extra_cfg(tmp_path, {"weight": 0.5}).data)
    assert len(half) == 3 + 5 and half.tgt == again.tgt  # seeded: the same half each time
    assert set(half.tgt[3:]) < set(SYNTH[1][:10])
    _, v, ids = encoded(extra_cfg(tmp_path, {"weight": 0.1}))
    assert len(ids) == 3 + 1 and ids[3][0] == v.src_vocab.stoi["<bt>"]  # kept below min_freq
    assert weighted_indices(10, 1.5)[:10] == list(range(10)) and len(weighted_indices(10, 1.5)) == 15


@pytest.mark.slow
def test_trainer_reads_the_extra_pairs(tmp_path):
    trainer = Trainer(extra_cfg(tmp_path, {"weight": 2, "tag": "<bt>"}), tmp_path / "run")
    assert len(trainer.data.train_ids) == 3 + 20
    assert len(trainer.data.valid_ids) == 1  # validation is the corpus's own split only


def test_a_tag_missing_from_a_given_vocabulary_is_refused(tmp_path):
    cfg = extra_cfg(tmp_path, {"tag": "<bt>"})
    _, v, _ = encoded(cfg)
    check_tags(cfg.data, v)  # built with the tag: fine
    v.src_vocab = Vocab([t for t in v.src_vocab.itos if t != "<bt>"])  # a parent's, without it
    with pytest.raises(ConfigError, match=r"data\.extra\.tag <bt> is not in the source vocabulary"):
        check_tags(cfg.data, v)


def test_extra_survives_a_checkpoint_round_trip():
    raw = {"data": {"extra": [{"path": "synth", "weight": 0.5, "tag": "<bt>"}]}}
    cfg = Config.from_dict(raw)
    assert cfg.data.extra[0].weight == 0.5
    assert Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("entry,key", [
    ({"path": ""}, "data.extra.path"),
    ({"path": "s", "weight": 0}, "data.extra.weight"),
    ({"path": "s", "weight": float("inf")}, "data.extra.weight"),
    ({"path": "s", "tag": "<b t>"}, "data.extra.tag"),
    ({"path": "s", "tag": "</s>"}, "data.extra.tag"),
    ({"path": "s", "ratio": 2}, "data.extra[0].ratio"),
    ({"path": "s", "weight": "lots"}, "data.extra[0].weight"),
    ("synth", "data.extra[0]."),
])
def test_bad_entries_name_their_key(entry, key):
    with pytest.raises(ConfigError) as e:
        Config.from_dict({"data": {"extra": [entry]}}, "recipe.yaml")
    assert key in str(e.value) and str(e.value).startswith("recipe.yaml: ")


def test_extra_with_mmap_is_refused():
    with pytest.raises(ConfigError, match=r"recipe\.yaml: data\.extra is read in memory"):
        Config.from_dict({"data": {"mmap": True, "extra": [{"path": "s"}]}}, "recipe.yaml")
