"""Streaming corpora and memory-mapped token-id stores (data.mmap)."""

import gzip
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from nmtkit.config import DataConfig
from nmtkit.data import mmap_ids
from nmtkit.data.batching import ParallelIds, pad_batch
from nmtkit.data.corpora import CorpusError, iter_lines, iter_parallel, load_parallel, read_lines
from nmtkit.data.prepare import build_vocabularies, encode_parallel, pairs_of, sample_pairs
from nmtkit.data.vocab import BOS, EOS
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import make_cfg
from .helpers import parallel_data_cfg as parallel_cfg
from .helpers import write_word_corpus as write_corpus

# --- flat ids and batches ------------------------------------------------------------------


def test_collate_gathers_the_same_batch_as_padding_each_row():
    rng = np.random.default_rng(3)
    src = [np.append(rng.integers(4, 50, size=rng.integers(0, 9)), EOS) for _ in range(40)]
    tgt = [rng.integers(4, 50, size=rng.integers(0, 9)) for _ in range(40)]
    data = ParallelIds(src, tgt)
    index = rng.permutation(40)[:13]
    b = data.collate(index)
    assert torch.equal(b.src, pad_batch([src[i] for i in index]))
    assert torch.equal(b.tgt_in, pad_batch([np.concatenate(([BOS], tgt[i])) for i in index]))
    assert torch.equal(b.tgt_out, pad_batch([np.concatenate((tgt[i], [EOS])) for i in index]))
    assert b.n_tokens == sum(len(tgt[i]) + 1 for i in index)
    assert b.src.dtype == torch.int64
    assert np.array_equal(data.source(5), src[5]) and np.array_equal(data.target(5), tgt[5])


# --- streaming text ------------------------------------------------------------------------


def test_iter_lines_reads_what_read_lines_reads(tmp_path):
    raw = "\ufefferste Zeile\r\nzweite\u2028 bleibt\n\ndritte".encode()
    for name, opener in (("a.txt", open), ("a.txt.gz", gzip.open)):
        with opener(tmp_path / name, "wb") as f:
            f.write(raw)
        assert list(iter_lines(tmp_path / name)) == read_lines(tmp_path / name)
        assert read_lines(tmp_path / name)[1] == "zweite\u2028 bleibt"


def test_iter_lines_names_the_line_of_a_bad_byte_and_empty_files(tmp_path):
    (tmp_path / "bad.de").write_bytes(b"gut\nauch gut\nschlecht \xff\n")
    with pytest.raises(CorpusError, match=r"bad\.de:3: invalid UTF-8 \(byte 0xff"):
        list(iter_lines(tmp_path / "bad.de"))
    (tmp_path / "empty.de").write_bytes(b"")
    with pytest.raises(CorpusError, match="empty file"):
        list(iter_lines(tmp_path / "empty.de"))
    with pytest.raises(CorpusError, match="file not found"):
        list(iter_lines(tmp_path / "missing.de"))


@pytest.mark.parametrize("longer", ["de", "en"])
def test_iter_parallel_reports_files_of_different_lengths(tmp_path, longer):
    for lang in ("de", "en"):
        n = 4 if lang == longer else 3
        (tmp_path / f"c.{lang}").write_text("x\n" * n, encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"c\.{'en' if longer == 'de' else 'de'} ends after 3 "
                                          rf"lines, .*c\.{longer} goes on"):
        list(iter_parallel(parallel_cfg(tmp_path / "c"), str(tmp_path / "c")))


def test_iter_parallel_gives_load_parallels_pairs(tmp_path):
    (tmp_path / "c.de").write_text(" a \n\nb\nc\n", encoding="utf-8")
    (tmp_path / "c.en").write_text("A\nB\n\nC \n", encoding="utf-8")
    cfg = parallel_cfg(tmp_path / "c")
    par = load_parallel(cfg, cfg.train)  # training split: pairs with an empty side dropped
    expected = [("a", "A"), ("c", "C")]
    assert list(iter_parallel(cfg, cfg.train)) == list(pairs_of(par)()) == expected
    other = str(tmp_path / "c")  # the same files under another role keep every line
    cfg2 = parallel_cfg(tmp_path / "c", tokenizer_sample=0)
    cfg2.train = "elsewhere"
    assert len(list(iter_parallel(cfg2, other))) == 4


def test_sample_pairs_is_uniform_seeded_and_in_corpus_order():
    pairs = [(str(i), str(i)) for i in range(20000)]
    assert sample_pairs(pairs, 0) == sample_pairs(pairs, 20000) == ([p[0] for p in pairs],) * 2
    src, tgt = sample_pairs(iter(pairs), 2000)
    assert src == tgt and len(src) == 2000
    idx = [int(s) for s in src]
    assert idx == sorted(idx) and len(set(idx)) == 2000
    assert 9000 < np.mean(idx) < 11000  # uniform over the whole stream, not its head
    assert sum(i >= 10000 for i in idx) > 900
    assert sample_pairs(iter(pairs), 2000) == (src, tgt)


# --- one store -----------------------------------------------------------------------------


def test_store_round_trip_is_memory_mapped_and_equal_to_in_memory_ids(tmp_path):
    write_corpus(tmp_path / "c")
    cfg = parallel_cfg(tmp_path / "c")
    par = load_parallel(cfg, cfg.train)
    v = build_vocabularies(cfg, pairs_of(par))
    ids = encode_parallel(cfg, par, v, drop_long=True)
    pairs = [(ids.source(i), ids.target(i)) for i in range(len(ids))]
    n = mmap_ids.write_ids(tmp_path / "store", iter(pairs), len(v.src_vocab), len(v.tgt_vocab))
    assert n == len(ids)
    stored = mmap_ids.open_ids(tmp_path / "store")
    assert isinstance(stored.src_tokens, np.memmap) and stored.src_tokens.dtype == np.uint16
    assert np.array_equal(stored.src_lens, ids.src_lens)
    assert np.array_equal(stored.tgt_lens, ids.tgt_lens)
    for index in ids.batches(64, seed=1):
        a, b = ids.collate(index), stored.collate(index)
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_in, b.tgt_in)
        assert torch.equal(a.tgt_out, b.tgt_out) and a.n_tokens == b.n_tokens


def test_a_store_larger_than_a_chunk_and_a_wide_vocabulary(tmp_path, monkeypatch):
    monkeypatch.setattr(mmap_ids, "CHUNK_PAIRS", 7)
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(0, 100_000, size=rng.integers(1, 6)), rng.integers(0, 9, size=2))
             for _ in range(30)]
    mmap_ids.write_ids(tmp_path / "s", iter(pairs), 100_000, 9)
    stored = mmap_ids.open_ids(tmp_path / "s")
    assert stored.src_tokens.dtype == np.int32 and stored.tgt_tokens.dtype == np.uint16
    for i, (s, t) in enumerate(pairs):
        assert np.array_equal(stored.source(i), s) and np.array_equal(stored.target(i), t)


def test_an_interrupted_build_leaves_nothing_behind(tmp_path):
    def pairs():
        for i in range(10):
            if i == 6:
                raise KeyboardInterrupt
            yield np.array([4, EOS]), np.array([5])

    with pytest.raises(KeyboardInterrupt):
        mmap_ids.write_ids(tmp_path / "s", pairs(), 10, 10)
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_store_is_an_error_naming_the_file(tmp_path):
    mmap_ids.write_ids(tmp_path / "s", iter([(np.array([4, 5, EOS]), np.array([6]))] * 5), 9, 9)
    path = tmp_path / "s" / "src.tokens"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(CorpusError, match=r"src\.tokens: 28 bytes, expected 30"):
        mmap_ids.open_ids(tmp_path / "s")
    (tmp_path / "s" / "meta.json").write_text("{", encoding="utf-8")
    with pytest.raises(CorpusError, match="meta.json: not a token-id store"):
        mmap_ids.open_ids(tmp_path / "s")


# --- the training split, prepared once -----------------------------------------------------


def test_prepared_once_then_reused_and_rebuilt_when_the_corpus_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))
    write_corpus(tmp_path / "c")
    cfg = parallel_cfg(tmp_path / "c", mmap=True)
    v, ids = mmap_ids.prepare_training_ids(cfg)
    root = mmap_ids.training_ids_dir(cfg)
    assert (root / "vocab.pt").exists() and len(list(root.glob("train-*/meta.json"))) == 1

    def fail(*a, **k):
        raise AssertionError("rebuilt")

    with monkeypatch.context() as m:  # second use: nothing is tokenized or written again
        m.setattr(mmap_ids, "build_vocabularies", fail)
        m.setattr(mmap_ids, "encode_pairs", fail)
        v2, ids2 = mmap_ids.prepare_training_ids(cfg)
        assert v2.src_vocab == v.src_vocab and np.array_equal(ids2.src_tokens, ids.src_tokens)
        cfg_valid = parallel_cfg(tmp_path / "c", mmap=True)
        cfg_valid.valid = "another"  # the validation split does not change the training ids
        assert mmap_ids.training_ids_dir(cfg_valid) == root

    write_corpus(tmp_path / "c", n=200, seed=1)  # a different corpus under the same name
    os.utime(tmp_path / "c.de", ns=(1, 1))
    assert mmap_ids.training_ids_dir(cfg) != root
    _, ids3 = mmap_ids.prepare_training_ids(cfg)
    assert len(ids3) == 200
    assert mmap_ids.training_ids_dir(parallel_cfg(tmp_path / "c", mmap=True, max_len=5)) != \
        mmap_ids.training_ids_dir(cfg)


def test_given_vocabularies_get_their_own_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))
    write_corpus(tmp_path / "c")
    cfg = parallel_cfg(tmp_path / "c", mmap=True)
    v, ids = mmap_ids.prepare_training_ids(cfg)
    other = build_vocabularies(parallel_cfg(tmp_path / "c", min_freq=10**6),
                               pairs_of(load_parallel(cfg, cfg.train)))
    assert len(other.src_vocab) == 4 < len(v.src_vocab)  # the specials only
    v2, ids2 = mmap_ids.prepare_training_ids(cfg, other)
    assert v2 is other
    assert len(list(mmap_ids.training_ids_dir(cfg).glob("train-*/meta.json"))) == 2
    assert int(np.max(ids2.src_tokens)) < len(other.src_vocab)


@pytest.mark.slow
def test_training_on_memory_maps_equals_training_in_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))
    plain = Trainer(make_cfg(12), tmp_path / "plain")
    plain.run()
    mapped = Trainer(make_cfg(12, ["data.mmap=true"]), tmp_path / "mapped")
    assert isinstance(mapped.data.train_ids.src_tokens, np.memmap)
    mapped.run()
    for k, val in plain.model.state_dict().items():
        assert torch.equal(val, mapped.model.state_dict()[k]), k
    drop = {"elapsed_s"}
    assert ([{k: x for k, x in r.items() if k not in drop} for r in plain.progress.history] ==
            [{k: x for k, x in r.items() if k not in drop} for r in mapped.progress.history])
    resumed = Trainer(make_cfg(16, ["data.mmap=true"]), tmp_path / "mapped", Start.resume())
    assert resumed.progress.step == 12 and isinstance(resumed.data.train_ids.src_tokens, np.memmap)
    resumed.run()
    assert resumed.progress.step == 16


def _prepare_in_child(prefix: str, cache: str) -> list[int]:
    os.environ["NMTKIT_CACHE"] = cache
    build = mmap_ids.build_vocabularies

    def counted(*args, **kwargs):  # one line per build, appended by whoever builds
        with open(Path(cache).parent / "builds.txt", "a") as f:
            f.write(f"{os.getpid()}\n")
        return build(*args, **kwargs)

    mmap_ids.build_vocabularies = counted
    _, ids = mmap_ids.prepare_training_ids(parallel_cfg(Path(prefix), mmap=True))
    return np.asarray(ids.src_tokens).tolist()


@pytest.mark.slow
def test_processes_preparing_the_same_store_at_once_take_turns(tmp_path, monkeypatch):
    write_corpus(tmp_path / "c", n=2000)
    cache = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(3, mp_context=ctx) as pool:
        results = list(pool.map(_prepare_in_child, [str(tmp_path / "c")] * 3,
                                [str(cache)] * 3))
    assert results[0] == results[1] == results[2]
    assert len((tmp_path / "builds.txt").read_text().split()) == 1  # built once, mapped thrice
    monkeypatch.setenv("NMTKIT_CACHE", str(cache))
    root = mmap_ids.training_ids_dir(parallel_cfg(tmp_path / "c", mmap=True))
    assert len(list(root.glob("train-*/meta.json"))) == 1
    assert not list(root.glob(".*"))  # no temporary left over


def test_stale_temporaries_are_removed_and_a_complete_store_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))
    write_corpus(tmp_path / "c")
    cfg = parallel_cfg(tmp_path / "c", mmap=True)
    root = mmap_ids.training_ids_dir(cfg)
    (root / ".train-x.123.tmp").mkdir(parents=True)  # a build killed half-way
    (root / ".vocab.pt.456.tmp").write_bytes(b"half")
    _, ids = mmap_ids.prepare_training_ids(cfg)
    assert not list(root.glob(".*.tmp"))
    store = next(root.glob("train-*"))
    before = (store / "src.tokens").stat().st_mtime_ns
    pairs = [(ids.source(i), ids.target(i)) for i in range(len(ids))]
    mmap_ids.write_ids(store, iter(pairs[:3]), 100, 100)  # racing a finished build: no-op
    assert (store / "src.tokens").stat().st_mtime_ns == before
    assert len(mmap_ids.open_ids(store)) == len(ids)
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def test_empty_targets_and_the_two_byte_boundary(tmp_path):
    mmap_ids.write_ids(tmp_path / "e", iter([(np.array([4, EOS]), np.array([], dtype=np.int64))]
                                            * 3), 10, 10)
    empty = mmap_ids.open_ids(tmp_path / "e")
    b = empty.collate(np.array([0, 2]))
    assert b.tgt_in.tolist() == [[BOS], [BOS]] and b.tgt_out.tolist() == [[EOS], [EOS]]
    assert mmap_ids.token_dtype(65_536) == np.uint16 and mmap_ids.token_dtype(65_537) == np.int32
    mmap_ids.write_ids(tmp_path / "w", iter([(np.array([65_535, EOS]), np.array([65_536]))]),
                       65_536, 65_537)
    wide = mmap_ids.open_ids(tmp_path / "w")
    assert wide.source(0).tolist() == [65_535, EOS] and wide.target(0).tolist() == [65_536]


def test_a_meta_file_missing_a_field_is_a_clear_error(tmp_path):
    mmap_ids.write_ids(tmp_path / "s", iter([(np.array([4, EOS]), np.array([5]))]), 9, 9)
    meta = tmp_path / "s" / "meta.json"
    meta.write_text(meta.read_text().replace('"dtypes"', '"kinds"'), encoding="utf-8")
    with pytest.raises(CorpusError, match="meta.json: not a token-id store"):
        mmap_ids.open_ids(tmp_path / "s")


@pytest.mark.slow
def test_the_store_of_a_split_tsv_file_depends_on_that_file(tmp_path):
    """``data.tsv_split``: the training split is cut from ``data.tsv_file`` (not a file named
    by ``data.train``), so that file's path, size and time key the prepared store."""
    path = tmp_path / "data.txt"
    path.write_text("a dog\tein Hund\n", encoding="utf-8")
    cfg = DataConfig(corpus="tsv", tsv_file=str(path), tsv_split=(0.5, 0.5), train="train",
                     valid="valid")
    [[name, size, _]] = mmap_ids.training_inputs(cfg)
    assert name == str(path.resolve()) and size == path.stat().st_size
