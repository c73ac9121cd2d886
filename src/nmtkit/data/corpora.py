"""Parallel corpora: named (Multi30k, IWSLT14, WMT14), plain files, TSV, and the copy task.

Every corpus becomes line-aligned source/target text (:func:`split_files`), read whole
(:func:`load_parallel`) or streamed pair by pair (:func:`iter_parallel`).  Multi30k's files
and the IWSLT14/WMT14 archives are fetched by :func:`nmtkit.data.fetch.fetch_file` (the
NMTKIT_DATA mirror, else the cache, else a sha256-checked download); the archives are then
prepared into text by :mod:`nmtkit.data.recipes`.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import logging
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nmtkit.config import CORPORA, TSV_SPLITS, DataConfig
from nmtkit.data.fetch import CorpusError, fetch_file

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Reading text files


def read_lines(path: str | Path, empty_ok: bool = False) -> list[str]:
    """All lines of a UTF-8 text file (``.gz`` by suffix), without their ``\\n`` / ``\\r\\n``.
    An empty file is a :class:`CorpusError` (a corpus split), or with ``empty_ok`` no lines
    (text to translate: ``nmtkit translate -i``).

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
        if empty_ok:
            return []
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
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "tok/test_2016_flickr.lc.norm.tok.cs": "748c8816de928732365176e5c5d2f9bbabcec9b8d4448fba2d230feb057898a7",
    "tok/test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "tok/test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "tok/test_2016_flickr.lc.norm.tok.fr": "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
    "tok/test_2017_flickr.lc.norm.tok.de": "02067e4a9402786a4fcb8c1b6f4307e4a5073ced64800abead5273b54f5f31f6",
    "tok/test_2017_flickr.lc.norm.tok.en": "c9d1dfd7a26add989382e534af235af9f0f658b2a30e7eb0efdaf142496ee54f",
    "tok/test_2017_flickr.lc.norm.tok.fr": "c0583117a47b31e8a6c6a97cfe8de153e462074668f4e994764fcc80b21d33b4",
    "tok/test_2017_mscoco.lc.norm.tok.de": "e2825990b8a4e5289d2cdba801d57c187810bab9b4f5d87a30c35800a0d871b6",
    "tok/test_2017_mscoco.lc.norm.tok.en": "fe69ae004d71c42ead0301e70c57de5b1b6b5fb7f52210d42b22801e98e656f3",
    "tok/test_2017_mscoco.lc.norm.tok.fr": "0b6a4620f02b6b9acf7811fda23f90fed9c6baa0b96aa224db50a273078c84d1",
    "tok/test_2018_flickr.lc.norm.tok.cs": "09a4987a524dea4852ccfef35329281b2cd577780691b732341ccecc4015aa4c",
    "tok/test_2018_flickr.lc.norm.tok.de": "45ce6b121708adf538d3a8c71dc1acbcb1e0f2bca74ace8e58652f9ea5b96335",
    "tok/test_2018_flickr.lc.norm.tok.en": "a66e25cbb8323d74a40873dcd222659f39e30ee7687a6ed5445833aed0673239",
    "tok/test_2018_flickr.lc.norm.tok.fr": "22d44a4ba21e050f218399f2c4f9e1a36875f209820c1f1c9af5b76a2947a71c",
    "tok/train.lc.norm.tok.cs": "7645fb91efa18f94c83d493f740a5d5a941e4b01efa6a124bf2d4af040e133e0",
    "tok/train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "tok/train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "tok/train.lc.norm.tok.fr": "8fa41bb718412bcb7c5dfa58603842810a01543eae86a51279f9886b901266e1",
    "tok/val.lc.norm.tok.cs": "b87ee4917f4a0f9ca6cca03e402026c9f4437dc1bd6a7dadfd2544ecfb6c5501",
    "tok/val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "tok/val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "tok/val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
}
"""sha256 of every task-1 file of the multi30k/dataset repository (commit a3d2e0d), by its name
under the ``multi30k`` collection: ``<split>.<lang>.gz`` (raw) and ``tok/<split>.lc.norm.tok.<lang>``
(the official lowercased, normalised, tokenized references)."""
MULTI30K_TOK_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/tok/{split}.lc.norm.tok.{lang}"
)


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


def multi30k_reference_file(split: str, lang: str) -> Path:
    """Local path of the official lowercased, punctuation-normalised, Moses-tokenized reference
    of a Multi30k split (``tok/<split>.lc.norm.tok.<lang>``, plain text), downloading if
    needed: what the multimodal-MT literature scores against (see
    :func:`nmtkit.evaluate.multi30k_tok_bleu`)."""
    _check_multi30k_name(split, lang)
    name = f"tok/{split}.lc.norm.tok.{lang}"
    url = MULTI30K_TOK_URL.format(split=split, lang=lang)
    return fetch_file("multi30k", name, url, MULTI30K_SHA256[name], "Multi30k")[0]


# ---------------------------------------------------------------------------
# Parallel text


@dataclass
class Parallel:
    """Aligned source/target sentences (``src[i]`` translates to ``tgt[i]``)."""

    src: list[str]
    tgt: list[str]
    name: str
    skipped_empty: int = 0  # training pairs dropped because a side was empty
    parts: tuple[int, ...] = ()
    """Sizes of consecutive blocks sampled apart (``data.directions``: one per direction,
    :mod:`nmtkit.data.multilingual`); empty = one block."""

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise CorpusError(
                f"{self.name}: {len(self.src)} source vs {len(self.tgt)} target sentences"
            )
        if self.parts and sum(self.parts) != len(self.src):
            raise CorpusError(f"{self.name}: parts {list(self.parts)} do not add up to "
                              f"{len(self.src)} pairs")

    def __len__(self) -> int:
        return len(self.src)


def _parallel_file(prefix: str, lang: str) -> Path:
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    for there in (plain, gz):
        if there.exists():  # a directory, a device: not a corpus file
            kind = "a directory" if there.is_dir() else "not a regular file"
            raise CorpusError(f"{there}: is {kind}, not a corpus file")
    raise CorpusError(f"{plain}: file not found (nor {gz})")


def _read_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return src, tgt


def _read_tsv(path: Path, columns: tuple[str, ...] = ("src", "tgt")) -> tuple[list[str], list[str]]:
    """Source and target columns of a tab-separated file; ``columns`` names each column
    (``src``, ``tgt``, or ``-`` for one to ignore), e.g. ``("tgt", "src")`` for ``en<TAB>ru``
    read as ru -> en."""
    s, t = columns.index("src"), columns.index("tgt")
    src: list[str] = []
    tgt: list[str] = []
    for i, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != len(columns):
            what = "no tab" if len(fields) == 1 else f"{len(fields)} tab-separated fields"
            raise CorpusError(f"{path}:{i}: expected {len(columns)} columns "
                              f"'{'<TAB>'.join(columns)}' (data.tsv_columns), found {what}")
        src.append(fields[s])
        tgt.append(fields[t])
    return src, tgt


def tsv_split_indices(n: int, ratios: tuple[float, ...], seed: int) -> dict[str, list[int]]:
    """Lines 0..n-1 of one file dealt at random into the splits of ``data.tsv_split``.

    The line numbers are shuffled with ``random.Random(seed)``; the first ``round(r_0 * n)``
    go to ``train``, the next ``round(r_1 * n)`` to ``valid``, the rest to the last split
    (``test`` with 3 ratios). Each split keeps file order. Same file and seed, same splits.
    """
    order = list(range(n))
    random.Random(seed).shuffle(order)
    names = TSV_SPLITS[:len(ratios)]
    out: dict[str, list[int]] = {}
    start = 0
    for k, (name, ratio) in enumerate(zip(names, ratios, strict=True)):
        end = n if k == len(ratios) - 1 else min(n, start + round(ratio * n))
        out[name] = sorted(order[start:end])
        start = end
    return out


def _read_tsv_split(cfg: DataConfig, split: str) -> tuple[list[str], list[str], str]:
    """One split of ``data.tsv_file`` cut by ``data.tsv_split``; (src, tgt, display name)."""
    names = TSV_SPLITS[:len(cfg.tsv_split)]
    if split not in names:
        raise CorpusError(f"{cfg.tsv_file}: data.tsv_split cuts it into {', '.join(names)}; "
                          f"there is no split {split!r}")
    src, tgt = _read_tsv(Path(cfg.tsv_file), cfg.tsv_columns)
    keep = tsv_split_indices(len(src), cfg.tsv_split, cfg.tsv_seed)[split]
    return [src[i] for i in keep], [tgt[i] for i in keep], f"{cfg.tsv_file}:{split}"


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


@contextlib.contextmanager
def _prepared_hint(corpus: str) -> Iterator[None]:
    """A file of IWSLT14 or WMT14 that cannot be read, or does not match its other side, is
    one that nmtkit prepared in its cache: the error says so, and how to build it again."""
    try:
        yield
    except CorpusError as e:
        if corpus not in ("iwslt14", "wmt14"):
            raise
        from nmtkit.data.recipes import prepared_text_dir  # recipes imports this module

        raise CorpusError(f"{e} (prepared by nmtkit in its cache: `nmtkit prepare {corpus}` "
                          "checks the prepared files and builds damaged ones again, or delete "
                          f"{prepared_text_dir(corpus)})") from None


def load_parallel(cfg: DataConfig, split: str) -> Parallel:
    """Read one split of ``cfg.corpus``; lines are ``.strip()``-ed.

    ``split`` is a Multi30k split name (``multi30k``), an IWSLT14 or WMT14 split name
    (``iwslt14``, ``wmt14``: see :mod:`nmtkit.data.recipes`), a path prefix with files
    ``<split>.<src_lang>`` / ``<split>.<tgt_lang>`` (``parallel``, ``.gz`` accepted),
    a TSV file (``tsv``; with ``data.tsv_split``: ``train``, ``valid`` or ``test``, cut from
    ``data.tsv_file``), or ``train``/anything else (``copy``).  In the
    training split (``split == cfg.train``) pairs with an empty side are
    dropped and counted; other splits keep every line, so a translation has
    one output per input.
    """
    files = split_files(cfg, split)
    if files is not None:
        src_path, tgt_path, name = files
        with _prepared_hint(cfg.corpus):
            src, tgt = _read_pair(src_path, tgt_path)
    elif cfg.corpus == "tsv" and cfg.tsv_split:
        src, tgt, name = _read_tsv_split(cfg, split)
    elif cfg.corpus == "tsv":
        src, tgt = _read_tsv(Path(split), cfg.tsv_columns)
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
    with _prepared_hint(cfg.corpus):
        for number, (s, t) in enumerate(pairs, start=1):
            if s is None or t is None:
                longer, shorter = (tgt_path, src_path) if s is None else (src_path, tgt_path)
                raise CorpusError(f"line counts differ: {shorter} ends after {number - 1} "
                                  f"lines, {longer} goes on")
            s, t = s.strip(), t.strip()
            if training and not (s and t):
                skipped += 1
                continue
            yield s, t
    if skipped:
        log.warning("%s: skipped %d training pair(s) with an empty side", name, skipped)
