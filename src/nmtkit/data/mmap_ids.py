"""Token ids on disk, memory-mapped: training corpora larger than memory (``data.mmap``).

The training split is streamed from its text files once: a sample trains the
tokenizers, one pass counts the vocabulary, one pass writes the ids. The result
lives under ``$NMTKIT_CACHE/prepared/<data key>/``::

    vocab.pt                 tokenizers + vocabularies (the same state a checkpoint holds)
    train-<vocab key>/
        src.tokens src.offsets tgt.tokens tgt.offsets    raw little-endian arrays
        meta.json                                           dtypes and lengths, written last

The data key hashes the ``data`` section of the config and the identity (path,
size, modification time) of the training files, so a changed corpus or setting
gets a new store; the vocab key hashes the tokenizers and vocabularies, so a
resumed run re-uses the ids of the vocabulary its checkpoint holds. Each part
is built in a temporary directory and renamed into place, so a build cut short
leaves nothing that a later run would read; a store found damaged when it is opened
(:func:`open_ids`) is built again, as an unreadable ``vocab.pt`` is. Batches then
gather their rows from the maps (:class:`~nmtkit.data.batching.ParallelIds`): the
corpus is paged in by the operating system, never loaded whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import DataConfig
from ..io import atomic_dir, atomic_save, atomic_write_text, file_lock
from .batching import ParallelIds
from .corpora import iter_parallel, split_files
from .fetch import CorpusError, cache_dir, writing_the_cache
from .prepare import Vocabularies, build_vocabularies, encode_pairs, vocab_from_state, vocab_state

log = logging.getLogger(__name__)

FORMAT = 1
"""Bumped when the layout changes, so old stores are not misread."""
CHUNK_PAIRS = 50_000
"""Pairs encoded between two appends to the array files."""
ARRAYS = ("src.tokens", "src.offsets", "tgt.tokens", "tgt.offsets")


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def training_inputs(cfg: DataConfig) -> list[list[Any]]:
    """Path, size and modification time of the files the training split is read from."""
    files = split_files(cfg, cfg.train)
    if files is not None:
        paths = list(files[:2])
    elif cfg.corpus == "copy":
        paths = []
    else:  # tsv: the file, or the one file its splits are cut from
        paths = [Path(cfg.tsv_file if cfg.tsv_split else cfg.train)]
    out = []
    for path in paths:
        st = Path(path).stat()
        out.append([str(Path(path).resolve()), st.st_size, st.st_mtime_ns])
    return out


def _versions() -> dict[str, str | None]:
    """Versions of the libraries that segment text: a new spaCy may split words differently."""
    out: dict[str, str | None] = {}
    for dist in ("sentencepiece", "spacy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def data_key(cfg: DataConfig) -> str:
    """Hash of what the training ids depend on (not the valid/test split names)."""
    data = {k: v for k, v in asdict(cfg).items() if k not in ("valid", "test")}
    return _digest({"format": FORMAT, "data": data, "inputs": training_inputs(cfg),
                    "versions": _versions()})


def vocab_key(v: Vocabularies) -> str:
    return _digest({"tokenizers": [v.src_tok.state(), v.tgt_tok.state()],
                    "vocab": [v.src_vocab.itos, v.tgt_vocab.itos]})


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest integer type that holds every id: 2 bytes a token up to 65,536 types."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<i4")


# ---------------------------------------------------------------------------
# Writing and opening one store


def write_ids(directory: str | Path, pairs: Iterable[tuple[np.ndarray, np.ndarray]],
              src_vocab_size: int, tgt_vocab_size: int) -> int:
    """Write every (source ids, target ids) pair into the four arrays of a new store.

    The store is built by :func:`nmtkit.io.atomic_dir` (a temporary sibling renamed to
    ``directory`` when complete; ``meta.json`` is its last file). An incomplete store (no
    ``meta.json``) at ``directory`` is replaced; a complete one, there already or written
    meanwhile by a process not holding the lock, is kept as it is. Returns the number of
    pairs in the store.
    """
    directory = Path(directory)
    if directory.is_dir() and not (directory / "meta.json").exists():
        shutil.rmtree(directory)  # an incomplete store: built again
    try:
        with atomic_dir(directory) as tmp:
            n = _write_arrays(tmp, pairs, src_vocab_size, tgt_vocab_size, directory)
    except FileExistsError:
        if not (directory / "meta.json").exists():
            raise
        log.info("%s: already built; kept as it is", directory)
        n = int(json.loads((directory / "meta.json").read_text(encoding="utf-8"))["pairs"])
    return n


def _write_arrays(tmp: Path, pairs: Iterable[tuple[np.ndarray, np.ndarray]], src_vocab_size: int,
                  tgt_vocab_size: int, where: Path) -> int:
    """The arrays and ``meta.json`` of a store, into the empty directory ``tmp``."""
    dtypes = {"src.tokens": token_dtype(src_vocab_size), "tgt.tokens": token_dtype(tgt_vocab_size),
              "src.offsets": np.dtype("<i8"), "tgt.offsets": np.dtype("<i8")}
    files = {name: open(tmp / name, "wb") for name in ARRAYS}  # noqa: SIM115 (closed below)
    try:
        ends = {"src": 0, "tgt": 0}
        for side in ends:
            files[f"{side}.offsets"].write(np.zeros(1, dtype="<i8").tobytes())
        n = 0
        chunk: list[tuple[np.ndarray, np.ndarray]] = []

        def flush() -> None:
            for k, side in enumerate(("src", "tgt")):
                seqs = [pair[k] for pair in chunk]
                lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
                offsets = ends[side] + np.cumsum(lens)
                ends[side] = int(offsets[-1])
                files[f"{side}.tokens"].write(
                    np.concatenate(seqs).astype(dtypes[f"{side}.tokens"]).tobytes())
                files[f"{side}.offsets"].write(offsets.astype("<i8").tobytes())
            chunk.clear()

        for pair in pairs:
            chunk.append(pair)
            n += 1
            if len(chunk) == CHUNK_PAIRS:
                flush()
        if chunk:
            flush()
    finally:
        for f in files.values():
            f.close()
    if n == 0:
        raise CorpusError(f"{where}: no training pairs left to store")
    meta = {"format": FORMAT, "pairs": n, "tokens": ends,
            "dtypes": {name: dtypes[name].str for name in ARRAYS}}
    atomic_write_text(tmp / "meta.json", json.dumps(meta, indent=1) + "\n")
    return n


class DamagedStore(CorpusError):
    """A store that fails a check of :func:`open_ids` (a damaged or hand-edited cache):
    :func:`prepare_training_ids` builds it again; other callers see the message, which says
    to delete the store. ``problem`` is the message without that advice."""

    def __init__(self, directory: Path, problem: str):
        super().__init__(f"{problem}; delete {directory} to rebuild it")
        self.problem = problem


def _shapes(directory: Path) -> dict[str, tuple[np.dtype, int]]:
    """The integer dtype and length of each array, as ``meta.json`` gives them."""
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise DamagedStore(directory, f"{meta_path}: format {meta.get('format')!r}, "
                                          f"expected {FORMAT}")
        n = int(meta["pairs"])
        shapes = {name: (np.dtype(meta["dtypes"][name]),
                         n + 1 if name.endswith("offsets") else int(meta["tokens"][name[:3]]))
                  for name in ARRAYS}
    except DamagedStore:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise DamagedStore(directory, f"{meta_path}: not a token-id store: {e}") from None
    if n < 1 or any(dtype.kind not in "iu" or count < 0 for dtype, count in shapes.values()):
        raise DamagedStore(directory, f"{meta_path}: not a token-id store: {n} pairs, or an "
                                      "array of a negative length or not of integers")
    return shapes


def _check_side(directory: Path, side: str, tokens: np.ndarray, offsets: np.ndarray,
                vocab_size: int | None) -> None:
    """Offsets that start at 0, never decrease and end at the token count (the lengths the
    batcher reads), and ids below ``vocab_size`` (an embedding row each)."""
    if offsets[0] != 0 or offsets[-1] != len(tokens) or bool((np.diff(offsets) < 0).any()):
        raise DamagedStore(directory, f"{directory / f'{side}.offsets'}: the offsets do not run "
                                      f"from 0 up to the {len(tokens)} tokens")
    top = int(tokens.max()) if len(tokens) else -1
    if vocab_size is not None and top >= vocab_size:
        raise DamagedStore(directory, f"{directory / f'{side}.tokens'}: id {top} is out of range "
                                      f"for the vocabulary of {vocab_size}")


def open_ids(directory: str | Path, vocab_sizes: tuple[int, int] | None = None) -> ParallelIds:
    """Memory-map a store written by :func:`write_ids`, after checks that it is whole.

    The checks are cheap next to training on the store: the array sizes that ``meta.json``
    gives; offsets that start at 0, never decrease and end at the token count (8 bytes a
    pair, read for the lengths anyway); and, with ``vocab_sizes`` (source, target), the
    largest id of each side below its vocabulary's size (one pass over the ids: some 20 ms
    per 10^8 tokens in the page cache). A failed check raises :class:`DamagedStore` naming
    the file.
    """
    directory = Path(directory)
    shapes = _shapes(directory)
    arrays = {}
    for name in ARRAYS:
        path = directory / name
        dtype, count = shapes[name]
        size = path.stat().st_size if path.exists() else -1
        if size != count * dtype.itemsize:
            raise DamagedStore(directory, f"{path}: {size} bytes, expected "
                                          f"{count * dtype.itemsize} ({count} x {dtype})")
        arrays[name] = (np.memmap(path, dtype=dtype, mode="r", shape=(count,)) if count
                        else np.zeros(0, dtype=dtype))
    for k, side in enumerate(("src", "tgt")):
        _check_side(directory, side, arrays[f"{side}.tokens"], arrays[f"{side}.offsets"],
                    None if vocab_sizes is None else vocab_sizes[k])
    return ParallelIds.from_flat(arrays["src.tokens"], arrays["src.offsets"],
                                 arrays["tgt.tokens"], arrays["tgt.offsets"])


# ---------------------------------------------------------------------------
# The training split, prepared once


def training_ids_dir(cfg: DataConfig) -> Path:
    """``$NMTKIT_CACHE/prepared/<data key>/``: the tokenizers and vocabularies (``vocab.pt``)
    and the token-id stores (``train-<vocab key>/``) of ``cfg``'s training split."""
    return cache_dir() / "prepared" / data_key(cfg)


def prepare_training_ids(cfg: DataConfig,
                         vocabs: Vocabularies | None = None) -> tuple[Vocabularies, ParallelIds]:
    """Vocabularies and memory-mapped training ids for ``cfg``, built on first use.

    ``vocabs`` (a resumed checkpoint's) are used as given; otherwise the store's
    ``vocab.pt`` is loaded, or built from the streamed training split and saved.
    """
    root = training_ids_dir(cfg)

    def pairs() -> Iterator[tuple[str, str]]:
        return iter_parallel(cfg, cfg.train)

    # Processes preparing the same store (the ranks of a torchrun job, runs of a sweep)
    # take turns: the first builds, the others wait here and then map what it wrote.
    with writing_the_cache(root), file_lock(root.parent / f".{root.name}.lock"):
        for stale in root.glob(".*.tmp"):  # cut short by a kill: no live writer under the lock
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        return _prepare_locked(cfg, root, pairs, vocabs)


def _prepare_locked(cfg: DataConfig, root: Path, pairs: Callable[[], Iterator[tuple[str, str]]],
                    vocabs: Vocabularies | None) -> tuple[Vocabularies, ParallelIds]:
    if vocabs is None:
        vocab_file = root / "vocab.pt"
        if vocab_file.exists():
            try:
                vocabs = vocab_from_state(torch.load(vocab_file, weights_only=True))
                log.info("tokenizers and vocabularies from %s", vocab_file)
            except Exception as e:  # noqa: BLE001 (any unreadable file is rebuilt)
                log.warning("%s: unreadable (%s); building it again", vocab_file, e)
        if vocabs is None:
            vocabs = build_vocabularies(cfg, pairs)
            state = vocab_state(vocabs)
            atomic_save(vocab_file, lambda f: torch.save(state, f))
    ids_dir = root / f"train-{vocab_key(vocabs)}"
    sizes = (len(vocabs.src_vocab), len(vocabs.tgt_vocab))
    if (ids_dir / "meta.json").exists():
        try:
            ids = open_ids(ids_dir, sizes)
            log.info("training token ids from %s", ids_dir)
            return vocabs, _used(root, ids)
        except DamagedStore as e:  # a cache: built again from the corpus, like vocab.pt
            log.warning("%s; building the store again", e.problem)
            shutil.rmtree(ids_dir)
    log.info("writing training token ids to %s", ids_dir)
    with writing_the_cache(ids_dir):
        n = write_ids(ids_dir, encode_pairs(cfg, pairs(), vocabs, True, f"{cfg.train}"), *sizes)
    log.info("stored %d training pairs", n)
    return vocabs, _used(root, open_ids(ids_dir, sizes))


def _used(root: Path, ids: ParallelIds) -> ParallelIds:
    with contextlib.suppress(OSError):  # record the last use, for cache clean-up by age
        os.utime(root)
    return ids
