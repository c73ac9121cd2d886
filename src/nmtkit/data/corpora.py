"""Parallel corpora: named (Multi30k, IWSLT14, WMT14), plain files, TSV, and the copy task.

Every corpus becomes line-aligned source/target text (:func:`split_files`), read whole
(:func:`load_parallel`) or streamed pair by pair (:func:`iter_parallel`).  Multi30k's files
and the IWSLT14/WMT14 archives are fetched by :func:`nmtkit.data.fetch.fetch_file` (the
NMTKIT_DATA mirror, else the cache, else a sha256-checked download); the archives are then
prepared into text by :mod:`nmtkit.data.recipes`.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nmtkit.config import CORPORA, DataConfig
from nmtkit.data.fetch import CorpusError, fetch_file

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Reading text files


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (``.gz`` by suffix), without their ``\\n`` / ``\\r\\n``.

    Only ``\\n`` ends a line (other Unicode line separators stay inside it, so
    parallel files cannot drift apart); a leading byte-order mark is dropped.
    Any other whitespace is left for the caller.
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{path}: file not found") from None
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise CorpusError(f"{path}: cannot read: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise CorpusError(
            f"{path}:{line}: invalid UTF-8 (byte {data[e.start]:#04x} at offset {e.start})"
        ) from None
    if not text:
        raise CorpusError(f"{path}: empty file")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a text file one at a time, as :func:`read_lines` returns them.

    For corpora larger than memory: the file is decoded line by line, so an
    invalid byte is reported with its line number when it is reached.
    """
    path = Path(path)
    try:
        f = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        raise CorpusError(f"{path}: file not found") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e}") from None
    with f:
        number = 0
        try:
            for number, raw in enumerate(f, start=1):  # binary files split on b"\n" only
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise CorpusError(f"{path}:{number}: invalid UTF-8 (byte {raw[e.start]:#04x} "
                                      f"at column {e.start})") from None
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                if line.endswith("\n"):
                    line = line[:-1]
                yield line[:-1] if line.endswith("\r") else line
        except (OSError, EOFError, zlib.error) as e:
            raise CorpusError(f"{path}:{number + 1}: cannot read: {e}") from None
        if number == 0:
            raise CorpusError(f"{path}: empty file")


# ---------------------------------------------------------------------------
# Multi30k (Elliott et al. 2016), task 1

MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
)
MULTI30K_LANGS = ("de", "en", "fr", "cs")
MULTI30K_SPLITS: dict[str, tuple[str, ...]] = {
    "train": ("de", "en", "fr", "cs"),
    "val": ("de", "en", "fr", "cs"),
    "test_2016_flickr": ("de", "en", "fr", "cs"),
    "test_2017_flickr": ("de", "en", "fr"),
    "test_2018_flickr": ("de", "en", "fr", "cs"),
    "test_2017_mscoco": ("de", "en", "fr"),
}
"""Split -> the languages the Multi30k repository has it in."""
MULTI30K_SHA256: dict[str, str] = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
}
"""Pinned hashes of the files we know; others are trusted on first use."""


def _check_multi30k_name(split: str, lang: str) -> str:
    if lang not in MULTI30K_LANGS:
        raise CorpusError(
            f"Multi30k has no language {lang!r}; languages: {', '.join(MULTI30K_LANGS)}"
        )
    if split not in MULTI30K_SPLITS:
        raise CorpusError(f"Multi30k has no split {split!r}; splits: {', '.join(MULTI30K_SPLITS)}")
    if lang not in MULTI30K_SPLITS[split]:
        have = ", ".join(f"{s} ({'/'.join(ls)})" for s, ls in MULTI30K_SPLITS.items())
        raise CorpusError(
            f"Multi30k split {split!r} does not exist in language {lang!r} "
            f"(it has {'/'.join(MULTI30K_SPLITS[split])}); available: {have}"
        )
    return f"{split}.{lang}.gz"


def multi30k_file(split: str, lang: str) -> Path:
    """Local path of a Multi30k task-1 file (``<split>.<lang>.gz``), downloading if needed."""
    name = _check_multi30k_name(split, lang)
    url = MULTI30K_URL.format(split=split, lang=lang)
    return fetch_file("multi30k", name, url, MULTI30K_SHA256.get(name), "Multi30k")[0]


# ---------------------------------------------------------------------------
# Parallel text


@dataclass
class Parallel:
    """Aligned source/target sentences (``src[i]`` translates to ``tgt[i]``)."""

    src: list[str]
    tgt: list[str]
    name: str
    skipped_empty: int = 0  # training pairs dropped because a side was empty

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise CorpusError(
                f"{self.name}: {len(self.src)} source vs {len(self.tgt)} target sentences"
            )

    def __len__(self) -> int:
        return len(self.src)


def _parallel_file(prefix: str, lang: str) -> Path:
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    raise CorpusError(f"{plain}: file not found (nor {gz})")


def _read_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return src, tgt


def _read_tsv(path: Path) -> tuple[list[str], list[str]]:
    src: list[str] = []
    tgt: list[str] = []
    for i, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            what = "no tab" if len(fields) == 1 else f"{len(fields)} tab-separated fields"
            raise CorpusError(f"{path}:{i}: expected 'source<TAB>target', found {what}")
        src.append(fields[0])
        tgt.append(fields[1])
    return src, tgt


def copy_task(split: str, size: int, length: int, vocab: int) -> tuple[list[str], list[str]]:
    """Synthetic copy task (The Annotated Transformer's first example): target == source.

    Each line is ``length`` symbols drawn uniformly from ``1..vocab-1``; the
    generator is seeded from the split name with CRC-32, so every process
    (and every Python hash seed) produces the same data.
    """
    if vocab < 2:
        raise CorpusError(f"copy task: copy_vocab must be >= 2, got {vocab}")
    if length < 1 or size < 1:
        raise CorpusError(f"copy task: copy_len and sizes must be >= 1, got {length}, {size}")
    rng = random.Random(zlib.crc32(split.encode("utf-8")))
    lines = [" ".join(str(rng.randint(1, vocab - 1)) for _ in range(length)) for _ in range(size)]
    return lines, list(lines)


def split_files(cfg: DataConfig, split: str) -> tuple[Path, Path, str] | None:
    """(source file, target file, display name) of a split kept as two line-aligned text files
    (``multi30k``, ``iwslt14``, ``wmt14``, ``parallel``), fetched (and for IWSLT14/WMT14
    prepared, see :mod:`nmtkit.data.recipes`) first where needed; ``None`` for ``tsv`` and
    ``copy``.
    """
    if cfg.corpus in ("iwslt14", "wmt14"):
        from nmtkit.data import recipes  # recipes imports this module

        return recipes.split_files(cfg.corpus, split, cfg.src_lang, cfg.tgt_lang)
    if cfg.corpus == "multi30k":
        return (multi30k_file(split, cfg.src_lang), multi30k_file(split, cfg.tgt_lang),
                f"multi30k/{split}.{cfg.src_lang}-{cfg.tgt_lang}")
    if cfg.corpus == "parallel":
        return _parallel_file(split, cfg.src_lang), _parallel_file(split, cfg.tgt_lang), split
    return None


def load_parallel(cfg: DataConfig, split: str) -> Parallel:
    """Read one split of ``cfg.corpus``; lines are ``.strip()``-ed.

    ``split`` is a Multi30k split name (``multi30k``), an IWSLT14 or WMT14 split name
    (``iwslt14``, ``wmt14``: see :mod:`nmtkit.data.recipes`), a path prefix with files
    ``<split>.<src_lang>`` / ``<split>.<tgt_lang>`` (``parallel``, ``.gz`` accepted),
    a TSV file (``tsv``), or ``train``/anything else (``copy``).  In the
    training split (``split == cfg.train``) pairs with an empty side are
    dropped and counted; other splits keep every line, so a translation has
    one output per input.
    """
    files = split_files(cfg, split)
    if files is not None:
        src_path, tgt_path, name = files
        src, tgt = _read_pair(src_path, tgt_path)
    elif cfg.corpus == "tsv":
        src, tgt = _read_tsv(Path(split))
        name = split
    elif cfg.corpus == "copy":
        size = cfg.copy_train_size if split == "train" else cfg.copy_valid_size
        src, tgt = copy_task(split, size, cfg.copy_len, cfg.copy_vocab)
        name = f"copy/{split}"
    else:
        raise CorpusError(
            f"unknown corpus {cfg.corpus!r} (known: {', '.join(CORPORA)})"
        )

    src = [s.strip() for s in src]
    tgt = [t.strip() for t in tgt]
    skipped = 0
    if split == cfg.train:
        keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if s and t]
        skipped = len(src) - len(keep)
        if skipped:
            log.warning("%s: skipped %d training pair(s) with an empty side", name, skipped)
            src = [src[i] for i in keep]
            tgt = [tgt[i] for i in keep]
    return Parallel(src=src, tgt=tgt, name=name, skipped_empty=skipped)


def iter_parallel(cfg: DataConfig, split: str) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of a split one at a time, as :func:`load_parallel` gives them.

    File-backed corpora are streamed (a corpus larger than memory is never held
    whole); ``tsv`` and ``copy`` are read with :func:`load_parallel`. Files of
    different lengths raise :class:`CorpusError` when the shorter one ends.
    """
    files = split_files(cfg, split)
    if files is None:
        par = load_parallel(cfg, split)
        yield from zip(par.src, par.tgt, strict=True)
        return
    src_path, tgt_path, name = files
    training, skipped = split == cfg.train, 0
    pairs = itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path))
    for number, (s, t) in enumerate(pairs, start=1):
        if s is None or t is None:
            longer, shorter = (tgt_path, src_path) if s is None else (src_path, tgt_path)
            raise CorpusError(f"line counts differ: {shorter} ends after {number - 1} lines, "
                              f"{longer} goes on")
        s, t = s.strip(), t.strip()
        if training and not (s and t):
            skipped += 1
            continue
        yield s, t
    if skipped:
        log.warning("%s: skipped %d training pair(s) with an empty side", name, skipped)
