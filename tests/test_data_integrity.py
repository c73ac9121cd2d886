"""Hostile-input probe III, the data side: the NMTKIT_DATA mirror, the caches nmtkit builds
(prepared IWSLT14/WMT14 text, memory-mapped token stores), a full disk while writing them,
and the optional official reference of ``nmtkit evaluate``."""

from __future__ import annotations

import errno
import gzip
import io
import json
import logging
import os
import re
import urllib.error
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nmtkit import cli
from nmtkit.config import ConfigError, DataConfig, DecodeConfig, ExtraCorpus, load
from nmtkit.data import fetch, mmap_ids, prepare, recipes
from nmtkit.data.corpora import CorpusError, load_parallel
from nmtkit.data.fetch import fetch_file
from nmtkit.io import atomic_save

from .helpers import ROOT
from .helpers import parallel_data_cfg as parallel_cfg
from .helpers import write_word_corpus as write_corpus


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """A cache of the test's own; no mirror unless a test sets one; no network."""
    monkeypatch.delenv("NMTKIT_DATA", raising=False)
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))

    def refuse(url, *args, **kwargs):
        raise urllib.error.URLError(f"tests must not touch the network ({url})")

    monkeypatch.setattr(fetch.urllib.request, "urlopen", refuse)


class FullDisk(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if self.room < len(b):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return self.f.write(b)


# --- 2: evaluate without the official tokenized reference ---------------------------------


def _mirror_without(tmp_path: Path, shared: Path, damage: str) -> Path:
    """A Multi30k mirror with the raw files of ``shared``, and of its ``tok/`` files none
    (``damage == "missing"``), or the one of val in English, altered (``"corrupt"``) or not
    (``"none"``)."""
    mirror = tmp_path / "mirror" / "multi30k"
    (mirror / "tok").mkdir(parents=True)
    for f in (shared / "multi30k").glob("*.gz"):
        (mirror / f.name).symlink_to(f)
    if damage != "missing":
        ref = (shared / "multi30k" / "tok" / "val.lc.norm.tok.en").read_text(encoding="utf-8")
        more = "one line more\n" if damage == "corrupt" else ""
        (mirror / "tok" / "val.lc.norm.tok.en").write_text(ref + more, encoding="utf-8")
    return mirror.parent


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "corrupt", "none"])
def test_evaluate_without_the_official_reference_keeps_every_other_score(
        multi30k_mirror, tmp_path, monkeypatch, caplog, capsys, damage):
    """Warned before translating, naming the file (and the sha256 mismatch); the scores that
    need only the raw split are printed, ``bleu_official_tok`` is left out, exit 0 (was: exit
    2 after the whole translation, every score lost)."""
    monkeypatch.setenv("NMTKIT_DATA", str(_mirror_without(tmp_path, multi30k_mirror, damage)))
    cfg = load(ROOT / "configs" / "multi30k_transformer_quick.yaml", [])
    warned_first = []

    def translate_lines(src, tgt_lang=None, progress=None):
        warned_first.append(any("bleu_official_tok" in r.message for r in caplog.records))
        return list(refs)

    refs = load_parallel(cfg.data, "val").tgt
    tr = SimpleNamespace(translate_lines=translate_lines,
                         decode_cfg=DecodeConfig(beam=1, length_penalty=0.6))
    monkeypatch.setattr(cli.evaluate, "translator_from_args", lambda a: (SimpleNamespace(cfg=cfg), tr))
    with caplog.at_level(logging.WARNING):
        assert cli.main(["evaluate", "--model", str(tmp_path / "m.pt"), "--split", "val"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bleu"] == 100.0 and result["chrf"] == 100.0 and result["n"] == len(refs)
    if damage == "none":  # there and whole: scored, no warning
        assert result["bleu_official_tok"] == 100.0 and warned_first == [False]
        return
    assert "bleu_official_tok" not in result and "bleu_official_tok" not in result["signature"]
    assert warned_first == [True]
    warning = next(r.message for r in caplog.records if "bleu_official_tok" in r.message)
    assert "tok/val.lc.norm.tok.en" in warning
    if damage == "corrupt":
        assert "sha256 mismatch" in warning


# --- 3: a data.extra weight that would fill memory ------------------------------------------


@pytest.fixture
def two_pairs(tmp_path) -> tuple[DataConfig, str]:
    (tmp_path / "bt.de").write_text("Ein Hund.\nZwei Katzen.\n", encoding="utf-8")
    (tmp_path / "bt.en").write_text("A dog.\nTwo cats.\n", encoding="utf-8")
    return parallel_cfg(tmp_path / "train"), str(tmp_path / "bt")


def test_an_extra_weight_of_1e9_is_refused_before_any_copy(two_pairs, monkeypatch):
    cfg, bt = two_pairs

    def copies(*args, **kwargs):  # the old code made 2 x 10^9 copies here: fail at once
        raise AssertionError("the pairs were copied")

    monkeypatch.setattr(prepare, "weighted_indices", copies)
    with pytest.raises(ConfigError, match=rf"data\.extra\[1\]\.weight 1e\+09 x 2 pairs of {bt} "
                                          r"is 2e\+09 pairs, more than the 100,000,000"):
        prepare.load_extra(cfg, ExtraCorpus(path=bt, weight=1e9), 1)


def test_the_extra_weight_bound_is_on_weight_times_pairs(two_pairs, monkeypatch):
    cfg, bt = two_pairs
    monkeypatch.setattr(prepare, "MAX_WEIGHTED_EXTRA_PAIRS", 10, raising=False)
    assert len(prepare.load_extra(cfg, ExtraCorpus(path=bt, weight=5))) == 10
    with pytest.raises(ConfigError, match=r"data\.extra\[0\]\.weight 6 x 2 pairs"):
        prepare.load_extra(cfg, ExtraCorpus(path=bt, weight=6))


# --- 7, 15, 23: a damaged memory-mapped token store -----------------------------------------


def _reverse_some_offsets(d: Path) -> None:
    a = np.memmap(d / "src.offsets", dtype="<i8", mode="r+")
    a[10:20] = a[10:20][::-1].copy()
    a.flush()


def _ids_out_of_range(d: Path) -> None:
    a = np.memmap(d / "tgt.tokens", dtype="<u2", mode="r+")
    a[5] = 65000
    a.flush()


def _meta(d: Path, text: str | None = None, **changes) -> None:
    path = d / "meta.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(text if text is not None else json.dumps({**meta, **changes}), encoding="utf-8")


DAMAGE = {
    "offsets running backwards": (_reverse_some_offsets, r"src\.offsets: the offsets do not run"),
    "ids out of range": (_ids_out_of_range, r"tgt\.tokens: id 65000 is out of range for the "
                                            r"vocabulary of \d+"),
    "unreadable meta.json": (lambda d: _meta(d, "{garbage"), r"meta\.json: not a token-id store"),
    "old-format meta.json": (lambda d: _meta(d, format=0), r"meta\.json: format 0, expected 1"),
    "a last offset past the ids": (lambda d: _meta(d, tokens={"src": 3, "tgt": 3}), r"bytes, expected"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_token_store_is_named_and_built_again(tmp_path, monkeypatch, caplog, damage):
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))
    write_corpus(tmp_path / "c", n=60)
    cfg = parallel_cfg(tmp_path / "c", mmap=True)
    vocabs, good = mmap_ids.prepare_training_ids(cfg)
    store = next(mmap_ids.training_ids_dir(cfg).glob("train-*"))
    sizes = (len(vocabs.src_vocab), len(vocabs.tgt_vocab))
    expected = [(good.source(i).tolist(), good.target(i).tolist()) for i in range(len(good))]
    tamper, problem = DAMAGE[damage]
    tamper(store)

    with pytest.raises(CorpusError) as err:  # opened directly: named, and how to rebuild it
        mmap_ids.open_ids(store, sizes)
    message = str(err.value)
    assert re.search(problem, message), message
    assert message.endswith(f"; delete {store} to rebuild it")
    assert message.count(str(store / "meta.json")) <= 1  # (was: the path twice)

    with caplog.at_level(logging.WARNING):  # prepared for training: built again
        _, ids = mmap_ids.prepare_training_ids(cfg, vocabs)
    assert [(ids.source(i).tolist(), ids.target(i).tolist()) for i in range(len(ids))] == expected
    assert any("building the store again" in r.message for r in caplog.records)


# --- 10: a damaged prepared corpus ------------------------------------------------------------


def _flip_a_byte(path: Path, at: int = 40) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x55
    path.write_bytes(bytes(data))


@pytest.mark.usefixtures("iwslt_mirror")
def test_prepare_finds_a_corrupted_prepared_file_and_builds_it_again(caplog):
    recipes.prepare("iwslt14")
    train = recipes.prepared_text_dir("iwslt14") / "train.en.gz"
    good = train.read_bytes()
    _flip_a_byte(train)  # the same size: the old manifest (sizes only) took it
    with caplog.at_level(logging.WARNING):
        recipes.prepare("iwslt14")
    assert train.read_bytes() == good
    assert any(f"{train}: sha256 mismatch" in r.message for r in caplog.records)


@pytest.mark.slow
@pytest.mark.usefixtures("iwslt_mirror")
def test_reading_a_corrupted_prepared_file_says_it_is_the_cache_and_how_to_rebuild():
    cfg = DataConfig(corpus="iwslt14", src_lang="de", tgt_lang="en", train="train",
                     valid="valid", test="test")
    load_parallel(cfg, "train")  # prepares
    prepared = recipes.prepared_text_dir("iwslt14")
    _flip_a_byte(prepared / "train.en.gz", at=len(gzip.compress(b"")) + 20)
    with pytest.raises(CorpusError, match=r"train\.en\.gz.*\(prepared by nmtkit in its cache: "
                                          rf"`nmtkit prepare iwslt14` checks .* or delete {prepared}\)"):
        load_parallel(cfg, "train")


@pytest.mark.usefixtures("iwslt_mirror")
def test_a_manifest_of_sizes_only_is_still_used(monkeypatch):
    """Manifests written before the sha256s (sizes only) are taken as they are: an upgrade
    does not rebuild a corpus that took an hour to prepare (WMT14)."""
    recipes.prepare("iwslt14")
    path = recipes.prepared_text_dir("iwslt14") / "iwslt14.manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["outputs"] = {f: rec["size"] for f, rec in manifest["outputs"].items()}
    path.write_text(json.dumps(manifest), encoding="utf-8")
    monkeypatch.setattr(recipes, "_build", lambda *a: pytest.fail("built again"))
    assert recipes.prepare("iwslt14")["train"] == manifest["lines"]["train"]


# --- 14, 17: a full disk while writing ------------------------------------------------------


def test_torch_save_on_a_full_disk_is_an_error_naming_the_file(tmp_path):
    target = tmp_path / "vocab.pt"
    with pytest.raises(OSError) as err:  # torch raises RuntimeError("... unexpected pos ...")
        atomic_save(target, lambda f: torch.save({"a": torch.zeros(1000)}, FullDisk(f, 100)))
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def _full_torch_save(monkeypatch):
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: real(obj, FullDisk(f, 100)))


@pytest.mark.parametrize("where", ["vocab.pt", "the store"])
def test_a_full_cache_while_preparing_a_token_store_names_the_file_and_the_cache(
        tmp_path, monkeypatch, where):
    cache = tmp_path / "cache"
    write_corpus(tmp_path / "c", n=30)
    cfg = parallel_cfg(tmp_path / "c", mmap=True)
    root = mmap_ids.training_ids_dir(cfg)
    if where == "vocab.pt":
        _full_torch_save(monkeypatch)
        named = f"{root / 'vocab.pt'}: "
    else:
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(mmap_ids, "write_ids", full)
        named = f"{root}/train-"
    with pytest.raises(CorpusError) as err:
        mmap_ids.prepare_training_ids(cfg)
    message = str(err.value)
    assert message.startswith(named), message
    assert f"No space left on device (in nmtkit's cache {cache}; NMTKIT_CACHE" in message


@pytest.mark.usefixtures("iwslt_mirror")
def test_a_full_cache_while_preparing_a_corpus_names_the_file_and_the_cache(monkeypatch, tmp_path):
    real_write = gzip.GzipFile.write

    def full_outside_scratch(self, data):  # the prepared files; the scratch files fit
        if "scratch" not in str(getattr(self.fileobj, "name", "")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", full_outside_scratch)
    prepared = recipes.prepared_text_dir("iwslt14")
    with pytest.raises(CorpusError, match=rf"^{prepared}/train\.(de|en)\.gz: No space left on "
                                          rf"device \(in nmtkit's cache {tmp_path}/cache;"):
        recipes.prepare("iwslt14")
    assert not list(prepared.glob("*.gz")) and not list(prepared.glob(".*.tmp"))


@pytest.mark.usefixtures("iwslt_mirror")
def test_a_full_scratch_disk_is_not_blamed_on_the_archive(monkeypatch):
    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gzip.GzipFile, "write", full)
    with pytest.raises(CorpusError) as err:
        recipes.prepare("iwslt14")
    message = str(err.value)
    assert "cannot read the archive" not in message, message
    assert "scratch/member0.gz: No space left on device (in nmtkit's cache" in message


def test_a_full_disk_in_export_names_the_export_directory(tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    from nmtkit.export import ctranslate2 as ct2

    def full(checkpoint):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ct2, "load_exportable_bundle", full)
    out = tmp_path / "ct2"
    with pytest.raises(OSError) as err:
        ct2.export_ctranslate2(tmp_path / "best.pt", out)
    assert err.value.filename == str(out) and not out.exists()


# --- 21: a mirror that is there but is not what it should be --------------------------------


def test_a_mirror_path_that_is_a_directory_or_a_mirror_that_is_a_file(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "col" / "file.gz").mkdir(parents=True)
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError, match=rf"^{mirror}/col/file\.gz: is a directory, not a file"):
        fetch_file("col", "file.gz", "http://invalid.test/file.gz", None)
    afile = tmp_path / "afile"
    afile.write_text("not a mirror\n")
    monkeypatch.setenv("NMTKIT_DATA", str(afile))
    with pytest.raises(CorpusError, match=rf"^NMTKIT_DATA={afile}: is not a directory"):
        fetch_file("col", "file.gz", "http://invalid.test/file.gz", None)
