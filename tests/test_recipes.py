"""IWSLT14 / WMT14 recipes on tiny synthetic archives in the real formats (no network)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nmtkit.config import DataConfig, load
from nmtkit.data import corpora, fetch, recipes
from nmtkit.data.corpora import CorpusError, iter_parallel, load_parallel, split_files

from .helpers import IWSLT_SETS, ROOT, TRAIN_DE, TRAIN_EN, iwslt_members, make_tgz, seg_text, sha, train_tags

# --- building synthetic archives ------------------------------------------------


def expected_iwslt_train() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    pairs = [("Titel de", "Titel en"),
             ("TED Talk Subtitles and Transcript: about de",
              "TED Talk Subtitles and Transcript: about en")]
    pairs += [(d, e) for d, e in zip(TRAIN_DE, TRAIN_EN, strict=True) if d.strip() and e.strip()]
    train = [p for i, p in enumerate(pairs, start=1) if i % 23]
    valid = [p for i, p in enumerate(pairs, start=1) if i % 23 == 0]
    return train, valid


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """No test may see the user's cache or mirror, nor reach the network."""
    monkeypatch.delenv("NMTKIT_DATA", raising=False)
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))

    def refuse(url, *args, **kwargs):  # a URLError, as a download with no network gives
        raise urllib.error.URLError(f"tests must not touch the network ({url})")

    for corpus, urls in recipes.URLS.items():
        for name in urls:
            monkeypatch.setitem(urls, name, f"http://invalid.test/{corpus}/{name}")
    monkeypatch.setattr(fetch.urllib.request, "urlopen", refuse)


def read(path: Path) -> list[str]:
    return corpora.read_lines(path)


def split_pairs(split: str, src: str = "de", tgt: str = "en", corpus: str = "iwslt14"):
    s, t, _ = recipes.split_files(corpus, split, src, tgt)
    return list(zip(read(s), read(t), strict=True))


# --- IWSLT14 ---------------------------------------------------------------------


def test_iwslt14_prepared_splits(iwslt_mirror, tmp_path):
    train, valid = expected_iwslt_train()
    assert split_pairs("train") == train
    assert split_pairs("valid") == valid and len(valid) == 2  # pairs 23 and 46 of 51
    order = []
    for split, stem in recipes.IWSLT14_SETS.items():
        n = IWSLT_SETS[stem]
        expected = [(seg_text(stem, "de", i), seg_text(stem, "en", i)) for i in range(1, n + 1)]
        expected = [(d.replace("&amp;", "&").replace("&lt;", "<").replace("&#228;", "ä"),
                     e.replace("&amp;", "&").replace("&lt;", "<").replace("&#228;", "ä"))
                    for d, e in expected]
        assert split_pairs(split) == expected
        order += expected
    assert split_pairs("test") == order
    assert order[0] == ("IWSLT14.TED.dev2010 de 1 Tom & Jerry <3 ä",
                        "IWSLT14.TED.dev2010 en 1 Tom & Jerry <3 ä")
    prepared = tmp_path / "cache" / "iwslt14" / "prepared"
    assert (prepared / "train.de.gz").is_file() and (prepared / "tst2012.en.gz").is_file()
    assert not any(p.name.endswith(".tmp") for p in prepared.iterdir())
    manifest = json.loads((prepared / "iwslt14.manifest.json").read_text())
    assert manifest["archives"]["de-en.tgz"]["sha256"] == sha(iwslt_mirror)
    assert manifest["lines"]["train"] == len(train)
    # no metadata line survives
    assert not any("<" in d or "<" in e for d, e in split_pairs("train"))


@pytest.mark.slow
def test_iwslt14_built_once(iwslt_mirror, monkeypatch):
    recipes.split_files("iwslt14", "train", "de", "en")
    manifest = recipes.prepared_text_dir("iwslt14") / "iwslt14.manifest.json"
    before = manifest.stat().st_mtime_ns

    def no_extract(*args, **kwargs):
        raise AssertionError("prepared files were rebuilt")

    monkeypatch.setattr(recipes, "extract", no_extract)
    monkeypatch.setattr(fetch, "sha256_file", no_extract)  # not even re-hashed
    for split in ("train", "valid", "test", "dev2010"):
        recipes.split_files("iwslt14", split, "de", "en")
    assert manifest.stat().st_mtime_ns == before
    iwslt_mirror.unlink()  # the archive may go once the splits are prepared
    assert split_pairs("valid") == expected_iwslt_train()[1]


def test_iwslt14_changed_archive_is_rebuilt(iwslt_mirror, monkeypatch):
    assert split_pairs("dev2012")[0][0].startswith("IWSLT14.TEDX.dev2012 de 1")
    stem = "IWSLT14.TEDX.dev2012"
    make_tgz(iwslt_mirror, iwslt_members(**{
        f"de-en/{stem}.de-en.de.xml": '<seg id="1">neu</seg>\n',
        f"de-en/{stem}.de-en.en.xml": '<seg id="1">new</seg>\n'}))
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(iwslt_mirror))
    assert split_pairs("dev2012") == [("neu", "new")]


@pytest.mark.slow
def test_iwslt14_unchanged_archive_elsewhere_is_not_rebuilt(iwslt_mirror, monkeypatch, tmp_path):
    recipes.split_files("iwslt14", "train", "de", "en")
    other = tmp_path / "other-mirror"
    (other / "iwslt14").mkdir(parents=True)
    (other / "iwslt14" / "de-en.tgz").write_bytes(iwslt_mirror.read_bytes())
    monkeypatch.setenv("NMTKIT_DATA", str(other))

    def no_extract(*args, **kwargs):
        raise AssertionError("same bytes: no rebuild")

    monkeypatch.setattr(recipes, "extract", no_extract)
    recipes.split_files("iwslt14", "train", "de", "en")  # hashed once, manifest updated
    manifest = json.loads((recipes.prepared_text_dir("iwslt14") / "iwslt14.manifest.json").read_text())
    assert manifest["archives"]["de-en.tgz"]["path"] == str(other / "iwslt14" / "de-en.tgz")


@pytest.mark.slow
def test_mirror_wrong_hash_names_file(iwslt_mirror, monkeypatch):
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", "0" * 64)
    with pytest.raises(CorpusError, match=r"iwslt14/de-en\.tgz: sha256 mismatch"):
        recipes.split_files("iwslt14", "train", "de", "en")
    assert not recipes.prepared_text_dir("iwslt14").exists() or not any(
        p.suffix == ".gz" for p in recipes.prepared_text_dir("iwslt14").iterdir())


def test_download_file_url_lands_in_cache_and_is_verified(monkeypatch, tmp_path):
    archive = make_tgz(tmp_path / "remote" / "de-en.tgz", iwslt_members())
    monkeypatch.setitem(recipes.URLS["iwslt14"], "de-en.tgz", archive.as_uri())
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setattr(fetch.urllib.request, "urlopen", _urlopen)
    cached = tmp_path / "cache" / "iwslt14" / "de-en.tgz"
    assert split_pairs("train") == expected_iwslt_train()[0]
    assert cached.read_bytes() == archive.read_bytes()


def _urlopen(url, *args, **kwargs):
    """The real urlopen, for file:// URLs only (the fixture refuses everything)."""
    assert url.startswith("file://"), url
    return urllib.request.build_opener(urllib.request.FileHandler()).open(url, *args, **kwargs)


@pytest.mark.slow
def test_corrupted_download_leaves_nothing(monkeypatch, tmp_path):
    archive = make_tgz(tmp_path / "remote" / "de-en.tgz", iwslt_members())
    monkeypatch.setitem(recipes.URLS["iwslt14"], "de-en.tgz", archive.as_uri())
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", "f" * 64)
    monkeypatch.setattr(fetch.urllib.request, "urlopen", _urlopen)
    with pytest.raises(CorpusError, match=r"IWSLT14 de-en\.tgz: could not be fetched.*sha256 mismatch"):
        recipes.split_files("iwslt14", "train", "de", "en")
    cache = tmp_path / "cache" / "iwslt14"
    assert [p.name for p in cache.iterdir()] in ([], ["prepared"])
    assert not any((cache / "prepared").glob("*.gz")) if (cache / "prepared").exists() else True


def test_unpinned_download_is_trusted_on_first_use(monkeypatch, tmp_path, caplog):
    archive = make_tgz(tmp_path / "remote" / "de-en.tgz", iwslt_members())
    monkeypatch.setitem(recipes.URLS["iwslt14"], "de-en.tgz", archive.as_uri())
    monkeypatch.setattr(fetch.urllib.request, "urlopen", _urlopen)
    assert "de-en.tgz" not in recipes.SHA256["iwslt14"]
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.fetch"):
        recipes.split_files("iwslt14", "valid", "de", "en")
    assert "trust on first use" in caplog.text
    sidecar = tmp_path / "cache" / "iwslt14" / "de-en.tgz.sha256"
    assert sidecar.read_text().split()[0] == sha(archive)


@pytest.mark.slow
def test_missing_member_is_named(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    archive = make_tgz(mirror / "iwslt14" / "de-en.tgz",
                       iwslt_members(**{"de-en/IWSLT14.TED.tst2011.de-en.en.xml": None}))
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError, match=r"de-en\.tgz: no member "
                       r"de-en/IWSLT14\.TED\.tst2011\.de-en\.en\.xml in the archive"):
        recipes.split_files("iwslt14", "train", "de", "en")
    assert not (recipes.prepared_text_dir("iwslt14") / "iwslt14.manifest.json").exists()
    assert not list(recipes.prepared_text_dir("iwslt14").glob("*.gz"))


@pytest.mark.slow
def test_mismatched_line_counts_are_named(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    archive = make_tgz(mirror / "iwslt14" / "de-en.tgz", iwslt_members(**{
        "de-en/train.tags.de-en.en": train_tags(TRAIN_EN + ["one line too many"], "en")}))
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError) as e:
        recipes.split_files("iwslt14", "train", "de", "en")
    msg = str(e.value)
    assert "line counts differ" in msg
    assert "de-en.tgz:de-en/train.tags.de-en.de has 54" in msg  # with <speaker>, <reviewer>
    assert "de-en.tgz:de-en/train.tags.de-en.en has 55" in msg


def test_malformed_segment_names_member_and_line(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    archive = make_tgz(mirror / "iwslt14" / "de-en.tgz", iwslt_members(**{
        "de-en/IWSLT14.TED.tst2010.de-en.de.xml": '<doc>\n<seg id="1">gut</seg>\n<seg id="2">kaputt\n'}))
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError, match=r"de-en\.tgz:de-en/IWSLT14\.TED\.tst2010\.de-en\.de\.xml:3: "
                       r"malformed segment"):
        recipes.split_files("iwslt14", "tst2010", "de", "en")


@pytest.mark.slow
def test_not_an_archive(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "iwslt14").mkdir(parents=True)
    bad = mirror / "iwslt14" / "de-en.tgz"
    bad.write_bytes(b"<html>login required</html>")
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(bad))
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError, match=r"de-en\.tgz: cannot read the archive"):
        recipes.split_files("iwslt14", "train", "de", "en")


@pytest.mark.slow
def test_load_parallel_iwslt14_both_directions(iwslt_mirror):
    train, _ = expected_iwslt_train()
    cfg = DataConfig(corpus="iwslt14", src_lang="de", tgt_lang="en", train="train",
                     valid="valid", test="test")
    par = load_parallel(cfg, "train")
    assert list(zip(par.src, par.tgt, strict=True)) == train
    assert par.name == "iwslt14/train.de-en"
    assert list(iter_parallel(cfg, "train")) == train
    rev = load_parallel(DataConfig(corpus="iwslt14", src_lang="en", tgt_lang="de"), "test")
    assert rev.src[0].startswith("IWSLT14.TED.dev2010 en 1") and len(rev) == 9
    src, tgt, name = split_files(cfg, "dev2010")
    assert src.name == "dev2010.de.gz" and tgt.name == "dev2010.en.gz"


def test_language_pair_and_split_errors(iwslt_mirror):
    with pytest.raises(CorpusError, match=r"IWSLT14 has the language pair de-en .*not de-fr"):
        load_parallel(DataConfig(corpus="iwslt14", src_lang="de", tgt_lang="fr"), "train")
    with pytest.raises(CorpusError, match=r"WMT14 has the language pair en-de .*not en-en"):
        load_parallel(DataConfig(corpus="wmt14", src_lang="en", tgt_lang="en"), "train")
    with pytest.raises(CorpusError, match=r"IWSLT14 has no split 'tst2014'; splits: train, valid, "
                       r"test, dev2010"):
        load_parallel(DataConfig(corpus="iwslt14"), "tst2014")
    cfg = DataConfig()
    cfg.corpus = "wmt16"
    with pytest.raises(CorpusError, match=r"unknown corpus 'wmt16' \(known: multi30k, iwslt14, wmt14"):
        load_parallel(cfg, "train")


# --- WMT14 -------------------------------------------------------------------------


def sgm(kind: str, lang: str, segs: list[str]) -> str:
    body = "\n".join(f'<seg id="{i}">{s}</seg>' for i, s in enumerate(segs, start=1))
    return (f'<{kind}set setid="newstest" srclang="any">\n<doc sysid="ref" docid="d1" '
            f'genre="news" origlang="en">\n<p>\n{body}\n</p>\n</doc>\n</{kind}set>\n')


def lines(*items: str) -> str:
    return "".join(f"{x}\n" for x in items)


@pytest.fixture
def wmt_mirror(monkeypatch, tmp_path) -> Path:
    root = tmp_path / "mirror" / "wmt14"
    archives = {
        "training-parallel-europarl-v7.tgz": {
            "training/europarl-v7.de-en.de": lines("Europarl eins", "", "Europarl drei"),
            "training/europarl-v7.de-en.en": lines("Europarl one", "Europarl two", "Europarl three"),
            "training/europarl-v7.fr-en.en": lines("not this one"),
        },
        "training-parallel-commoncrawl.tgz": {
            "commoncrawl.de-en.de": lines("Crawl eins", "Crawl zwei"),
            "commoncrawl.de-en.en": lines("Crawl one", "  "),
            "commoncrawl.fr-en.fr": lines("pas celui-ci"),
        },
        "training-parallel-nc-v9.tgz": {
            "training/news-commentary-v9.de-en.de": lines("News eins\r"),
            "training/news-commentary-v9.de-en.en": lines("News one\r"),
        },
        "dev.tgz": {
            "dev/newstest2012-src.en.sgm": sgm("src", "en", ["old"]),
            "dev/newstest2013-src.en.sgm": sgm("src", "en", ["AT&amp;T&apos;s &quot;deal&quot;",
                                                             "x &lt; y"]),
            "dev/newstest2013-ref.de.sgm": sgm("ref", "de", ["AT&amp;Ts „Deal“", "x &lt; y"]),
        },
        "test-full.tgz": {
            "test-full/newstest2014-deen-src.en.sgm": sgm("src", "en", ["Gutach: one", "two &#38; 3"]),
            "test-full/newstest2014-deen-ref.de.sgm": sgm("ref", "de", ["Gutach: eins", "zwei &amp; 3"]),
            "test-full/newstest2014-deen-src.de.sgm": sgm("src", "de", ["ignored", "ignored"]),
        },
    }
    for name, members in archives.items():
        path = make_tgz(root / name, members)
        monkeypatch.setitem(recipes.SHA256["wmt14"], name, sha(path))
    monkeypatch.setenv("NMTKIT_DATA", str(tmp_path / "mirror"))
    return root


@pytest.mark.slow
def test_wmt14_prepared_splits(wmt_mirror):
    assert split_pairs("train", "en", "de", "wmt14") == [
        ("Europarl one", "Europarl eins"), ("Europarl three", "Europarl drei"),
        ("Crawl one", "Crawl eins"), ("News one", "News eins")]
    dev = [("AT&T's \"deal\"", "AT&Ts „Deal“"), ("x < y", "x < y")]
    assert split_pairs("newstest2013", "en", "de", "wmt14") == dev
    assert split_pairs("valid", "en", "de", "wmt14") == dev
    test = [("Gutach: one", "Gutach: eins"), ("two & 3", "zwei & 3")]
    assert split_pairs("newstest2014", "en", "de", "wmt14") == test
    assert split_pairs("test", "de", "en", "wmt14") == [(d, e) for e, d in test]


@pytest.mark.slow
def test_wmt14_eval_sets_do_not_need_the_training_archives(wmt_mirror):
    (wmt_mirror / "training-parallel-commoncrawl.tgz").unlink()
    assert len(split_pairs("newstest2014", "en", "de", "wmt14")) == 2
    with pytest.raises(CorpusError, match="training-parallel-commoncrawl.tgz"):
        split_pairs("train", "en", "de", "wmt14")


def test_wmt14_newstest2013_from_plain_text(monkeypatch, wmt_mirror):
    dev = make_tgz(wmt_mirror / "dev.tgz", {"dev/newstest2013.en": lines("plain one"),
                                            "dev/newstest2013.de": lines("schlicht eins")})
    monkeypatch.setitem(recipes.SHA256["wmt14"], "dev.tgz", sha(dev))
    assert split_pairs("valid", "en", "de", "wmt14") == [("plain one", "schlicht eins")]


def test_wmt14_missing_sgm_lists_candidates(monkeypatch, wmt_mirror):
    test = make_tgz(wmt_mirror / "test-full.tgz", {
        "test-full/newstest2014-deen-src.en.sgm": sgm("src", "en", ["a"])})
    monkeypatch.setitem(recipes.SHA256["wmt14"], "test-full.tgz", sha(test))
    with pytest.raises(CorpusError, match=r"test-full\.tgz: no member "
                       r"test-full/newstest2014-deen-ref\.de\.sgm \(nor .*src\.de\.sgm\)"):
        split_pairs("test", "en", "de", "wmt14")


# --- configs and an end-to-end run ---------------------------------------------------


@pytest.mark.parametrize("name", ["iwslt14_deen_transformer.yaml",
                                  "wmt14_ende_transformer_base.yaml"])
def test_configs_load(name):
    cfg = load(ROOT / "configs" / name)
    assert cfg.data.corpus in ("iwslt14", "wmt14")
    recipe = recipes.RECIPES[cfg.data.corpus]
    for split in (cfg.data.train, cfg.data.valid, cfg.data.test):
        assert split in recipe.splits
    assert {cfg.data.src_lang, cfg.data.tgt_lang} == set(recipe.langs)


@pytest.mark.slow
def test_training_on_synthetic_iwslt14(iwslt_mirror, tmp_path):
    from nmtkit.train.loop import Trainer

    cfg = load(ROOT / "configs" / "iwslt14_deen_transformer.yaml", [
        "train.max_steps=2", "train.valid_every=2", "train.keep_last=0", "train.device=cpu",
        "train.amp=false", "train.threads=1", "data.vocab_size=60", "model.layers=1",
        "model.d_model=16", "model.d_ff=32", "model.heads=2", "train.max_tokens=400",
        "train.log_every=1", "train.warmup=1"])
    result = Trainer(cfg, tmp_path / "run").run()
    assert result["step"] == 2
    assert (tmp_path / "run" / "last.pt").exists()


@pytest.mark.slow
def test_iwslt14_a_sentence_starting_with_a_bracket_on_one_side_drops_only_its_pair(
        monkeypatch, tmp_path):
    de = list(TRAIN_DE)
    de[5] = "<3 ist ein Herz"  # looks like metadata on the German side only
    archive = make_tgz(tmp_path / "mirror" / "iwslt14" / "de-en.tgz",
                       iwslt_members(**{"de-en/train.tags.de-en.de": train_tags(de, "de")}))
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setenv("NMTKIT_DATA", str(tmp_path / "mirror"))
    pairs = split_pairs("train") + split_pairs("valid")
    assert (TRAIN_DE[5], TRAIN_EN[5]) not in pairs and not any(d == de[5] for d, _ in pairs)
    for d, e in zip(TRAIN_DE, TRAIN_EN, strict=True):  # every other pair still aligned
        if d.strip() and e.strip() and d != TRAIN_DE[5]:
            assert (d, e) in pairs


@pytest.mark.slow
def test_a_build_killed_half_way_leaves_nothing_after_the_next_one(iwslt_mirror):
    prepared = recipes.prepared_text_dir("iwslt14")
    (prepared / ".iwslt14.killed.tmp" / "scratch").mkdir(parents=True)
    (prepared / ".iwslt14.manifest.json.cut.tmp").write_text("{")
    recipes.split_files("iwslt14", "train", "de", "en")
    assert not list(prepared.glob(".*.tmp"))
    assert (prepared / "train.de.gz").is_file()


@pytest.mark.slow
def test_nmtkit_prepare_command(iwslt_mirror, capsys):
    from nmtkit.cli import main as cli_main

    assert cli_main(["prepare", "iwslt14", "train", "valid"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["pairs"] == {"train": len(expected_iwslt_train()[0]), "valid": 2}
    assert cli_main(["prepare", "iwslt14", "nope"]) == 2
