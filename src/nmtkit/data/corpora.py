"""Parallel corpora: named (Multi30k, IWSLT14, WMT14), plain files, TSV, and the copy task.

IWSLT14 and WMT14 are fetched as raw archives and prepared into line-aligned
text by :mod:`nmtkit.data.recipes`; their archives come through
:func:`fetch_file` exactly as the Multi30k files do.

Multi30k files come from, in order: the offline mirror ``$NMTKIT_DATA/multi30k/``,
the cache ``$NMTKIT_CACHE/multi30k/`` (default ``~/.cache/nmtkit``), or a
download into that cache.  Every file is checked against a pinned sha256 when
we know one; for the others the first download records the observed hash in
``<file>.sha256`` beside it (trust on first use) and later uses check it.
Downloads go to a temporary file in the cache and are renamed into place only
once verified, so a failed or corrupted download leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import itertools
import logging
import os
import random
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from nmtkit.config import DataConfig
from nmtkit.io import atomic_write_text

log = logging.getLogger(__name__)


class CorpusError(ValueError):
    """Corpus text that cannot be read or used; the message names the file (and line)."""


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

DOWNLOAD_TIMEOUT_S = 60.0


def cache_dir() -> Path:
    """``$NMTKIT_CACHE`` or ``~/.cache/nmtkit``."""
    env = os.environ.get("NMTKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nmtkit"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(
    url: str, dest: str | Path, sha256: str | None = None, timeout: float = DOWNLOAD_TIMEOUT_S
) -> str:
    """Fetch ``url`` to ``dest`` atomically and return the file's sha256.

    The bytes go to a temporary file beside ``dest``; it is renamed over
    ``dest`` only if the download completes and (when ``sha256`` is given) the
    hash matches.  On any failure nothing is left behind and a
    :class:`CorpusError` naming the URL is raised.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    length = resp.headers.get("Content-Length") if resp.headers else None
                    total = int(length) if length and length.isdigit() else None
                    with tqdm(
                        total=total,
                        unit="B",
                        unit_scale=True,
                        unit_divisor=1024,
                        desc=dest.name,
                        disable=None,
                        leave=False,
                    ) as bar:
                        for block in iter(lambda: resp.read(1 << 16), b""):
                            out.write(block)
                            h.update(block)
                            bar.update(len(block))
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                raise CorpusError(f"download of {url} failed: {e}") from None
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256.lower():
            raise CorpusError(
                f"download of {url}: sha256 mismatch (expected {sha256}, got {digest}); "
                "the file was not saved"
            )
        os.replace(tmp, dest)
        return digest
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _read_sidecar(path: Path) -> str | None:
    try:
        text = _sidecar(path).read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return None
    return text[0].lower() if text else None


def fetch_file(
    collection: str, name: str, url: str, pinned: str | None, label: str | None = None
) -> tuple[Path, str]:
    """Local copy of the raw file ``<collection>/<name>`` and its sha256, fetching it if needed.

    Looks in, in order: the offline mirror ``$NMTKIT_DATA/<collection>/<name>``
    (used as it is, after checking the pinned hash when there is one), the
    cache ``$NMTKIT_CACHE/<collection>/<name>`` (checked against the pinned
    hash, else the ``<name>.sha256`` sidecar written on first use), and last a
    download of ``url`` into the cache (:func:`download`: atomic, verified).
    Without a pinned hash the first download records the hash it saw (trust on
    first use).  ``label`` names the corpus in messages.
    """
    label = label or collection
    mirror_note = ""
    data_env = os.environ.get("NMTKIT_DATA")
    if data_env:
        mirrored = Path(data_env).expanduser() / collection / name
        if mirrored.is_file():
            got = sha256_file(mirrored)
            if pinned is not None and got != pinned:
                raise CorpusError(
                    f"{mirrored}: sha256 mismatch (expected {pinned}, got {got}); "
                    f"the NMTKIT_DATA mirror holds a different file than {url}"
                )
            return mirrored, got
        mirror_note = f"not found in the mirror {mirrored} (NMTKIT_DATA) and "
        log.info("%s not in the NMTKIT_DATA mirror; using the cache", name)

    cached = cache_dir() / collection / name
    expected = pinned or _read_sidecar(cached)
    if cached.is_file():
        got = sha256_file(cached)
        if expected is None:
            log.warning("%s has no recorded sha256; trusting it and recording %s", cached, got)
            atomic_write_text(_sidecar(cached), f"{got}  {name}\n")
            return cached, got
        if got == expected:
            return cached, got
        log.warning(
            "%s: sha256 mismatch (expected %s, got %s); downloading again", cached, expected, got
        )

    log.info("downloading %s to %s", url, cached)
    try:
        got = download(url, cached, expected)
    except CorpusError as e:
        hint = (
            ""
            if data_env
            else f" (set NMTKIT_DATA to a folder holding {collection}/ to work offline)"
        )
        raise CorpusError(
            f"{label} {name}: {mirror_note}could not be fetched into the cache {cached}: {e}{hint}"
        ) from None
    if expected is None:
        log.warning(
            "%s has no pinned sha256; recording the downloaded file's %s (trust on first use)",
            name,
            got,
        )
        atomic_write_text(_sidecar(cached), f"{got}  {name}\n")
    return cached, got


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
            f"unknown corpus {cfg.corpus!r} (known: multi30k, iwslt14, wmt14, parallel, tsv, copy)"
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
