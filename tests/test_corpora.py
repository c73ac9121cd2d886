import gzip
import hashlib
import logging
from pathlib import Path

import pytest

from nmtkit.config import DataConfig
from nmtkit.data import corpora, fetch
from nmtkit.data.corpora import (
    MULTI30K_SHA256,
    CorpusError,
    Parallel,
    load_parallel,
    multi30k_file,
    read_lines,
)

SHARED = Path("/work/shared/data")
needs_mirror = pytest.mark.skipif(
    not (SHARED / "multi30k" / "train.de.gz").is_file(), reason="Multi30k mirror not available"
)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """No test may see the user's cache or mirror (nor download into them)."""
    monkeypatch.delenv("NMTKIT_DATA", raising=False)
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tests must not touch the network")

    monkeypatch.setattr(fetch.urllib.request, "urlopen", refuse)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- read_lines ---------------------------------------------------------------


def test_read_lines_plain_and_gz(tmp_path):
    text = "eins\r\nzwei  \n\n  drei\u2028vier\n"
    (tmp_path / "a.txt").write_bytes(text.encode("utf-8"))
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(text.encode("utf-8"))
    expected = ["eins", "zwei  ", "", "  drei\u2028vier"]
    assert read_lines(tmp_path / "a.txt") == expected
    assert read_lines(tmp_path / "a.txt.gz") == expected
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfohne\nnewline")
    assert read_lines(tmp_path / "b.txt") == ["ohne", "newline"]


def test_read_lines_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes("gut\nauch gut\nschlecht \xff".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"bad\.de:3: invalid UTF-8"):
        read_lines(path)
    gz = tmp_path / "bad.de.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"ok\n\xc3\x28\n")
    with pytest.raises(CorpusError, match=r"bad\.de\.gz:2: invalid UTF-8"):
        read_lines(gz)


def test_read_lines_empty_missing_and_broken_gzip(tmp_path):
    (tmp_path / "empty.en").write_bytes(b"")
    with pytest.raises(CorpusError, match=r"empty\.en: empty file"):
        read_lines(tmp_path / "empty.en")
    with pytest.raises(CorpusError, match=r"nope\.en: file not found"):
        read_lines(tmp_path / "nope.en")
    (tmp_path / "fake.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CorpusError, match=r"fake\.gz: cannot read"):
        read_lines(tmp_path / "fake.gz")


# --- multi30k_file --------------------------------------------------------------


@pytest.mark.slow
def test_multi30k_missing_split_lists_what_exists(no_network):
    with pytest.raises(CorpusError, match=r"test_2017_mscoco.*'cs'.*de/en/fr"):
        multi30k_file("test_2017_mscoco", "cs")
    with pytest.raises(CorpusError, match=r"no split 'dev'.*test_2016_flickr"):
        multi30k_file("dev", "de")
    with pytest.raises(CorpusError, match=r"no language 'es'.*de, en, fr, cs"):
        multi30k_file("train", "es")


@needs_mirror
def test_multi30k_file_from_mirror(monkeypatch, no_network):
    monkeypatch.setenv("NMTKIT_DATA", str(SHARED))
    path = multi30k_file("val", "en")
    assert path == SHARED / "multi30k" / "val.en.gz"


def test_multi30k_mirror_hash_mismatch(monkeypatch, tmp_path, no_network):
    mirror = tmp_path / "mirror"
    (mirror / "multi30k").mkdir(parents=True)
    (mirror / "multi30k" / "val.de.gz").write_bytes(b"not the real file")
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError, match=r"val\.de\.gz: sha256 mismatch"):
        multi30k_file("val", "de")


def _fake_remote(monkeypatch, tmp_path, files: dict[str, bytes]) -> Path:
    remote = tmp_path / "remote"
    remote.mkdir()
    for name, data in files.items():
        (remote / name).write_bytes(data)
    monkeypatch.setattr(corpora, "MULTI30K_URL", remote.as_uri() + "/{split}.{lang}.gz")
    return remote


def test_multi30k_download_pinned(monkeypatch, tmp_path):
    payload = b"fake val.de"
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", sha(payload))
    remote = _fake_remote(monkeypatch, tmp_path, {"val.de.gz": payload})
    path = multi30k_file("val", "de")
    assert path == tmp_path / "cache" / "multi30k" / "val.de.gz"
    assert path.read_bytes() == payload
    # second use comes from the cache
    (remote / "val.de.gz").unlink()
    assert multi30k_file("val", "de") == path
    # a corrupted cache file is fetched again (and fails loudly when it cannot be)
    path.write_bytes(b"corrupt")
    with pytest.raises(CorpusError, match=r"val\.de\.gz.*could not be fetched"):
        multi30k_file("val", "de")
    assert not path.exists() or path.read_bytes() == b"corrupt"


def test_multi30k_download_pinned_mismatch_leaves_nothing(monkeypatch, tmp_path):
    _fake_remote(monkeypatch, tmp_path, {"val.de.gz": b"evil"})
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        multi30k_file("val", "de")
    cache = tmp_path / "cache" / "multi30k"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_multi30k_trust_on_first_use(monkeypatch, tmp_path, caplog):
    payload = b"fake test_2017_flickr.fr"
    remote = _fake_remote(monkeypatch, tmp_path, {"test_2017_flickr.fr.gz": payload})
    monkeypatch.delitem(MULTI30K_SHA256, "test_2017_flickr.fr.gz")  # as if it were not pinned
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.fetch"):
        path = multi30k_file("test_2017_flickr", "fr")
    assert "trust on first use" in caplog.text
    sidecar = path.with_name(path.name + ".sha256")
    assert sidecar.read_text().split()[0] == sha(payload)
    # the cached copy is checked against the recorded hash on later uses
    assert multi30k_file("test_2017_flickr", "fr") == path
    path.write_bytes(b"changed")
    (remote / "test_2017_flickr.fr.gz").write_bytes(b"changed upstream")
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        multi30k_file("test_2017_flickr", "fr")
    assert sidecar.read_text().split()[0] == sha(payload)


@pytest.mark.slow
def test_multi30k_mirror_miss_falls_through(monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    monkeypatch.setattr(
        corpora, "MULTI30K_URL", (tmp_path / "void").as_uri() + "/{split}.{lang}.gz"
    )
    with pytest.raises(CorpusError) as e:
        multi30k_file("train", "cs")
    msg = str(e.value)
    assert str(mirror / "multi30k" / "train.cs.gz") in msg
    assert str(tmp_path / "cache" / "multi30k" / "train.cs.gz") in msg
    # with the file now upstream, the fall-through downloads it into the cache; every Multi30k
    # file is pinned, so a download with other content is refused
    _fake_remote(monkeypatch, tmp_path, {"train.cs.gz": b"czech"})
    with pytest.raises(CorpusError, match="sha256"):
        multi30k_file("train", "cs")
    monkeypatch.setitem(MULTI30K_SHA256, "train.cs.gz", sha(b"czech"))
    assert multi30k_file("train", "cs").read_bytes() == b"czech"


# --- load_parallel --------------------------------------------------------------


@needs_mirror
def test_load_multi30k_sizes(monkeypatch, no_network):
    monkeypatch.setenv("NMTKIT_DATA", str(SHARED))
    cfg = DataConfig(corpus="multi30k", src_lang="de", tgt_lang="en")
    train = load_parallel(cfg, "train")
    assert len(train.src) == len(train.tgt) == 29000
    assert train.src[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert train.tgt[0] == "Two young, White males are outside near many bushes."
    assert len(load_parallel(cfg, "val")) == 1014
    test = load_parallel(cfg, "test_2016_flickr")
    assert len(test) == 1000 and all(s == s.strip() for s in test.src)
    assert isinstance(test, Parallel) and "test_2016_flickr" in test.name


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_load_parallel_files_and_blank_lines(tmp_path, caplog):
    write(tmp_path / "train.de", [" ein Hund ", "", "zwei Katzen", "drei"])
    write(tmp_path / "train.en", ["a dog", "nothing", "two cats\t", "  "])
    with gzip.open(tmp_path / "dev.de.gz", "wt", encoding="utf-8") as f:
        f.write("hallo\n\n")
    write(tmp_path / "dev.en", ["hello", ""])
    prefix = str(tmp_path / "train")
    cfg = DataConfig(corpus="parallel", train=prefix)
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.corpora"):
        train = load_parallel(cfg, prefix)
    assert train.src == ["ein Hund", "zwei Katzen"]
    assert train.tgt == ["a dog", "two cats"]
    assert "skipped 2" in caplog.text
    dev = load_parallel(cfg, str(tmp_path / "dev"))  # not the training split: kept as-is
    assert dev.src == ["hallo", ""] and dev.tgt == ["hello", ""]


def test_load_parallel_mismatched_counts(tmp_path):
    a = write(tmp_path / "x.de", ["1", "2", "3"])
    b = write(tmp_path / "x.en", ["1", "2"])
    with pytest.raises(CorpusError) as e:
        load_parallel(DataConfig(corpus="parallel"), str(tmp_path / "x"))
    msg = str(e.value)
    assert str(a) in msg and str(b) in msg and "3" in msg and "2" in msg


def test_load_parallel_missing_file(tmp_path):
    write(tmp_path / "x.de", ["1"])
    with pytest.raises(CorpusError, match=r"x\.en: file not found"):
        load_parallel(DataConfig(corpus="parallel"), str(tmp_path / "x"))


def test_load_tsv(tmp_path):
    path = write(tmp_path / "pairs.tsv", ["ein Hund\ta dog", " zwei \t two ", "drei\t"])
    cfg = DataConfig(corpus="tsv", train=str(path))
    train = load_parallel(cfg, str(path))
    assert train.src == ["ein Hund", "zwei"] and train.tgt == ["a dog", "two"]
    test = load_parallel(cfg, str(write(tmp_path / "test.tsv", ["a\tb", "c\t"])))
    assert test.src == ["a", "c"] and test.tgt == ["b", ""]


def test_load_tsv_without_tab_names_line(tmp_path):
    path = write(tmp_path / "pairs.tsv", ["a\tb", "c\td", "no tab here"])
    with pytest.raises(CorpusError, match=r"pairs\.tsv:3: .*no tab"):
        load_parallel(DataConfig(corpus="tsv"), str(path))
    path = write(tmp_path / "three.tsv", ["a\tb\tc"])
    with pytest.raises(CorpusError, match=r"three\.tsv:1: .*3 tab-separated fields"):
        load_parallel(DataConfig(corpus="tsv"), str(path))


def test_tsv_columns_name_source_and_target(tmp_path):
    """Seed 003's file is ``en<TAB>ru``, translated ru -> en: ``tsv_columns: [tgt, src]``."""
    path = write(tmp_path / "data.txt", ["a dog\tсобака", "two cats\tдве кошки"])
    par = load_parallel(DataConfig(corpus="tsv", tsv_columns=("tgt", "src")), str(path))
    assert par.src == ["собака", "две кошки"] and par.tgt == ["a dog", "two cats"]
    three = write(tmp_path / "three.tsv", ["17\tein Hund\ta dog"])
    par = load_parallel(DataConfig(corpus="tsv", tsv_columns=("-", "src", "tgt")), str(three))
    assert (par.src, par.tgt) == (["ein Hund"], ["a dog"])
    with pytest.raises(CorpusError, match=r"data\.txt:1: expected 3 columns '-<TAB>src<TAB>tgt'"):
        load_parallel(DataConfig(corpus="tsv", tsv_columns=("-", "src", "tgt")), str(path))


def tsv_split_cfg(path: Path, ratios=(0.8, 0.05, 0.15), seed: int = 1234) -> DataConfig:
    return DataConfig(corpus="tsv", tsv_file=str(path), tsv_columns=("tgt", "src"),
                      tsv_split=ratios, tsv_seed=seed, train="train", valid="valid", test="test")


@pytest.mark.slow
def test_tsv_split_cuts_one_file_by_ratios_with_a_seed(tmp_path):
    path = write(tmp_path / "data.txt", [f"en {i}\tru {i}" for i in range(200)])
    cfg = tsv_split_cfg(path)
    parts = {name: load_parallel(cfg, name) for name in ("train", "valid", "test")}
    assert [len(parts[n]) for n in ("train", "valid", "test")] == [160, 10, 30]
    ids = {n: [int(s.split()[1]) for s in par.src] for n, par in parts.items()}
    assert sorted(ids["train"] + ids["valid"] + ids["test"]) == list(range(200))  # a partition
    for n, par in parts.items():
        assert ids[n] == sorted(ids[n])  # file order kept within a split
        assert par.tgt == [f"en {i}" for i in ids[n]]  # columns [tgt, src]: pairs stay aligned
    assert ids["valid"] != list(range(160, 170))  # shuffled, not cut in file order
    again = load_parallel(tsv_split_cfg(path), "valid")
    assert again.src == parts["valid"].src  # same seed, same split
    other = load_parallel(tsv_split_cfg(path, seed=7), "valid")
    assert other.src != parts["valid"].src
    two = tsv_split_cfg(path, ratios=(0.9, 0.1))
    assert len(load_parallel(two, "train")) == 180 and len(load_parallel(two, "valid")) == 20
    with pytest.raises(CorpusError, match=r"cuts it into train, valid; there is no split 'test'"):
        load_parallel(two, "test")
    assert corpora.tsv_split_indices(50000, (0.8, 0.05, 0.15), 1234)["test"].__len__() == 7500


def test_load_empty_file(tmp_path):
    (tmp_path / "e.tsv").write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"e\.tsv: empty file"):
        load_parallel(DataConfig(corpus="tsv"), str(tmp_path / "e.tsv"))


@pytest.mark.slow
def test_copy_task_is_deterministic():
    cfg = DataConfig(
        corpus="copy", copy_vocab=11, copy_len=10, copy_train_size=50, copy_valid_size=7
    )
    train = load_parallel(cfg, "train")
    assert len(train) == 50 and train.src == train.tgt
    symbols = {tok for line in train.src for tok in line.split()}
    assert symbols <= {str(i) for i in range(1, 11)} and len(symbols) > 5
    assert all(len(line.split()) == 10 for line in train.src)
    assert load_parallel(cfg, "train") == train
    valid = load_parallel(cfg, "valid")
    assert len(valid) == 7 and valid.src != train.src[:7]
    assert corpora.copy_task("train", 1, 10, 11)[0] == [train.src[0]]


@pytest.mark.slow
def test_copy_task_golden_value():
    # random.Random(zlib.crc32(b"train")): the same in every process and Python version
    src, tgt = corpora.copy_task("train", 2, 5, 11)
    assert src == tgt == ["1 10 2 3 8", "10 4 8 1 7"]


def test_unknown_corpus():
    cfg = DataConfig()
    cfg.corpus = "wmt"
    with pytest.raises(CorpusError, match="unknown corpus"):
        load_parallel(cfg, "train")
