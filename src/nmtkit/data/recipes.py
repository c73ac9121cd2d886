"""IWSLT14 German-English and WMT14 English-German, from the official raw archives.

Two named corpora beyond Multi30k (``data.corpus: iwslt14`` / ``wmt14``), built
the way fairseq's ``examples/translation/prepare-iwslt14.sh`` and
``prepare-wmt14en2de.sh`` build them, minus the Moses steps: nmtkit trains
SentencePiece on raw text, so there is no Moses tokenization, no lowercasing,
no punctuation normalisation and no ``clean-corpus-n`` length/ratio filter
(``data.max_len`` filters training pairs by subword count instead).

**Archives.**  Each raw archive is fetched by :func:`nmtkit.data.fetch.fetch_file`:
the offline mirror ``$NMTKIT_DATA/<corpus>/<archive>`` (the bytes a download
gives), else the cache ``$NMTKIT_CACHE/<corpus>/<archive>``, else a download
into the cache.  Files are checked against :data:`SHA256` where we have a
trustworthy value; the others are trusted on first use (the first download
records its hash in ``<archive>.sha256`` and later uses are checked against it).

* WMT14 training archives and ``dev.tgz``: pinned, from TensorFlow Datasets'
  ``url_checksums/wmt14_translate.txt`` (sha256 and size of the same URLs).
  ``dev.tgz`` is therefore the WMT19 development archive that TFDS pins (it
  holds every earlier newstest, newstest2013 included), not WMT14's or WMT17's
  ``dev.tgz``; a mirror must hold that one.
* ``test-full.tgz`` (newstest2014, the "full" 3003-sentence set fairseq uses)
  and IWSLT14 ``de-en.tgz``: trust on first use.  The only published checksums
  we found for them are md5 sums, which we do not pin.

**Preparation** (:func:`prepare`) streams the needed members out of each tar
(one pass, nothing else is extracted: :mod:`nmtkit.data.archives`) and writes
``$NMTKIT_CACHE/<corpus>/prepared/<split>.<lang>.gz`` (:func:`prepared_text_dir`).
Splits that come from the same archives form a :class:`SplitGroup` and are built
together.  It runs once: a manifest per group beside the files records the sha256
of the archives they came from (and where those lay), so a changed archive
triggers a rebuild and an unchanged one is not even re-read, and the size and sha256
of each prepared file: a use checks the sizes, ``nmtkit prepare`` the sha256s too, and a
damaged file is built again from the archives.  Each file appears
atomically (staged beside the others, then renamed in: :func:`nmtkit.io.staged_files`)
and the manifest is written last.

IWSLT14 (``de-en.tgz``, the 2014-01 TED release; splits as in fairseq):

* ``train.tags.de-en.{de,en}``: lines with ``<url>``, ``<talkid>`` or
  ``<keywords>`` are dropped and the ``<title>``/``<description>`` tags removed
  (their text kept), as fairseq's grep/sed do; a pair is also dropped when
  either side starts with ``<`` (other talk metadata) or is empty, then every
  23rd pair (23, 46, ...) goes to ``valid`` and the rest to ``train``
  (fairseq's ``NR % 23``).
* dev/test ``*.xml``: the text of each ``<seg id=...>...</seg>``, XML entities
  unescaped (fairseq also maps U+2019 to ``'`` there; we keep the raw text).
  Each set is a split of its own (``dev2010``, ``dev2012`` (TEDX), ``tst2010``,
  ``tst2011``, ``tst2012``) and ``test`` is their concatenation in that order.

WMT14 (en-de, the ``--icml17`` variant of fairseq's recipe: news-commentary v9):

* ``train``: europarl-v7, commoncrawl and news-commentary-v9 concatenated in
  that order; pairs with an empty side dropped.
* ``newstest2013`` (alias ``valid``) from ``dev.tgz`` and ``newstest2014``
  (alias ``test``) from ``test-full.tgz``: the ``<seg>`` text of the sgm files,
  entities unescaped.  English comes from the ``-src.en`` file and German from
  the ``-ref.de`` file (the en->de pair, as fairseq); the same two files serve
  the de->en direction.  Unlike fairseq's script, which holds out every 100th
  training pair as its validation set, newstest2013 is the validation set here
  (as in Vaswani et al. 2017) and every training pair is kept for training.

Run ``nmtkit prepare iwslt14`` (or ``wmt14``; :func:`prepare` from Python) to fetch and
prepare ahead of training.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtkit.data.archives import (
    Cleaner,
    Extracted,
    GzTextWriter,
    aligned_pairs,
    clean_plain,
    clean_segments,
    extract,
    require,
)
from nmtkit.data.fetch import (
    CorpusError,
    cache_dir,
    fetch_file,
    local_file,
    sha256_file,
    writing_the_cache,
)
from nmtkit.io import atomic_write_text, file_lock, staged_files

log = logging.getLogger("nmtkit.data.recipes")  # the same name under python -m

RECIPE_VERSION = 1
"""Bumped whenever the preparation changes what it writes, so old files are rebuilt."""
GZIP_LEVEL = 3
"""Prepared files are read a few times; a fast level keeps WMT14's preparation short."""

URLS: dict[str, dict[str, str]] = {
    "iwslt14": {
        # WIT3's 2014-01 archive (https://wit3.fbk.eu/archive/2014-01/texts/de/en/de-en.tgz)
        # is no longer served; fairseq's prepare-iwslt14.sh now points at its copy.
        "de-en.tgz": "http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz",
    },
    "wmt14": {
        "training-parallel-europarl-v7.tgz":
            "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        "training-parallel-commoncrawl.tgz":
            "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        "training-parallel-nc-v9.tgz": "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
        "dev.tgz": "http://data.statmt.org/wmt19/translation-task/dev.tgz",
        "test-full.tgz": "http://www.statmt.org/wmt14/test-full.tgz",
    },
}
"""Corpus -> archive file name -> where it is downloaded from."""

SHA256: dict[str, dict[str, str]] = {
    "iwslt14": {},
    "wmt14": {
        # tensorflow_datasets/url_checksums/wmt14_translate.txt (and wmt17_translate.txt)
        "training-parallel-europarl-v7.tgz":
            "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        "training-parallel-commoncrawl.tgz":
            "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        "training-parallel-nc-v9.tgz":
            "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        "dev.tgz": "7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7",
    },
}
"""Pinned hashes; archives not listed here are trusted on first use."""

# ---------------------------------------------------------------------------
# Cleaning (what fairseq's grep/sed do, without the Moses steps)

_IWSLT_DROP = ("<url>", "<talkid>", "<keywords>")
_IWSLT_UNTAG = re.compile(r"</?(?:title|description)>")


def clean_iwslt_train(lines: Iterator[tuple[int, str]], where: str) -> Iterator[str]:
    """``train.tags.*``: drop ``<url>``/``<talkid>``/``<keywords>`` lines and strip the
    ``<title>``/``<description>`` tags (prepare-iwslt14.sh's grep -v and sed). Other lines
    that start with ``<`` (talk metadata) are kept here, so both sides stay aligned, and
    the pair is dropped when either side is one (:func:`_build_iwslt14`)."""
    for _, line in lines:
        if any(tag in line for tag in _IWSLT_DROP):
            continue
        yield _IWSLT_UNTAG.sub("", line).strip()


# ---------------------------------------------------------------------------
# The two recipes


class _Outputs:
    """The gzip files of one build, all opened up front (an empty split still gets files), in
    ``directory`` (a staging directory); write errors name them where they will lie, in
    ``final``."""

    def __init__(self, directory: Path, stems: Iterable[str], langs: tuple[str, str],
                 final: Path):
        self.directory = directory
        self.langs = langs
        self.files: dict[tuple[str, str], GzTextWriter] = {}
        self.counts: dict[str, int] = {}
        for stem in stems:
            self.counts[stem] = 0
            for lang in langs:
                name = f"{stem}.{lang}.gz"
                self.files[stem, lang] = GzTextWriter(directory / name, GZIP_LEVEL,
                                                      name=final / name)

    def write(self, stem: str, pair: dict[str, str]) -> None:
        for lang in self.langs:
            self.files[stem, lang].write(pair[lang] + "\n")
        self.counts[stem] += 1

    def close(self) -> None:
        for f in self.files.values():
            f.close()


IWSLT14_SETS: dict[str, str] = {
    "dev2010": "IWSLT14.TED.dev2010",
    "dev2012": "IWSLT14.TEDX.dev2012",
    "tst2010": "IWSLT14.TED.tst2010",
    "tst2011": "IWSLT14.TED.tst2011",
    "tst2012": "IWSLT14.TED.tst2012",
}
"""Split name -> file stem of each IWSLT14 dev/test set; ``test`` concatenates them in
this order (prepare-iwslt14.sh)."""
IWSLT14_VALID_EVERY = 23
"""Every 23rd training pair is held out as ``valid`` (prepare-iwslt14.sh: ``NR % 23``)."""


def _build_iwslt14(archives: dict[str, Path], out: _Outputs, scratch: Path) -> None:
    label = "de-en.tgz"
    wanted: dict[str, tuple[Cleaner, bool]] = {}
    for lang in ("de", "en"):
        wanted[f"de-en/train.tags.de-en.{lang}"] = (clean_iwslt_train, False)
        for stem in IWSLT14_SETS.values():
            wanted[f"de-en/{stem}.de-en.{lang}.xml"] = (clean_segments, True)
    found, seen = extract(archives[label], label, wanted, scratch)

    def member(name: str) -> Extracted:
        return require(found, seen, label, [name])

    kept = skipped = 0
    for de, en in aligned_pairs(member("de-en/train.tags.de-en.de"), member("de-en/train.tags.de-en.en")):
        if not (de and en) or de.startswith("<") or en.startswith("<"):  # empty or metadata
            skipped += 1
            continue
        kept += 1
        out.write("valid" if kept % IWSLT14_VALID_EVERY == 0 else "train", {"de": de, "en": en})
    if skipped:
        log.info("iwslt14: dropped %d training pair(s) with an empty or metadata side", skipped)
    for split, stem in IWSLT14_SETS.items():
        for de, en in aligned_pairs(member(f"de-en/{stem}.de-en.de.xml"),
                             member(f"de-en/{stem}.de-en.en.xml")):
            out.write(split, {"de": de, "en": en})
            out.write("test", {"de": de, "en": en})


WMT14_TRAIN: tuple[tuple[str, str], ...] = (
    ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
    ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
    ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en"),
)
"""(archive, member prefix) of the training corpora, concatenated in this order."""

WMT14_EVAL: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "newstest2013": ("dev.tgz", {
        "en": ("dev/newstest2013-src.en.sgm", "dev/newstest2013-ref.en.sgm", "dev/newstest2013.en"),
        "de": ("dev/newstest2013-ref.de.sgm", "dev/newstest2013-src.de.sgm", "dev/newstest2013.de"),
    }),
    "newstest2014": ("test-full.tgz", {
        "en": ("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.en.sgm"),
        "de": ("test-full/newstest2014-deen-ref.de.sgm", "test-full/newstest2014-deen-src.de.sgm"),
    }),
}
"""Evaluation set -> (archive, language -> members to take it from, first present wins;
sgm files are read for their segments, a plain file line by line)."""


def _build_wmt14_train(archives: dict[str, Path], out: _Outputs, scratch: Path) -> None:
    skipped = 0
    for label, prefix in WMT14_TRAIN:
        names = {lang: f"{prefix}.{lang}" for lang in ("en", "de")}
        found, seen = extract(archives[label], label,
                               {n: (clean_plain, False) for n in names.values()}, scratch)
        en = require(found, seen, label, [names["en"]])
        de = require(found, seen, label, [names["de"]])
        for e, d in aligned_pairs(en, de):
            if e and d:
                out.write("train", {"en": e, "de": d})
            else:
                skipped += 1
        for s in found.values():
            s.path.unlink()
    if skipped:
        log.info("wmt14: dropped %d training pair(s) with an empty side", skipped)


def _build_wmt14_eval(name: str) -> Callable[[dict[str, Path], _Outputs, Path], None]:
    label, members = WMT14_EVAL[name]

    def build(archives: dict[str, Path], out: _Outputs, scratch: Path) -> None:
        wanted: dict[str, tuple[Cleaner, bool]] = {
            m: (clean_segments if m.endswith(".sgm") else clean_plain, True)
            for names in members.values() for m in names
        }
        found, seen = extract(archives[label], label, wanted, scratch)
        en = require(found, seen, label, members["en"])
        de = require(found, seen, label, members["de"])
        for e, d in aligned_pairs(en, de):
            out.write(name, {"en": e, "de": d})

    return build


Builder = Callable[[dict[str, Path], _Outputs, Path], None]
"""(archive name -> local path, the outputs to write, a scratch directory) -> None."""


@dataclass(frozen=True)
class SplitGroup:
    """Splits prepared together, in one pass over the same archives, and kept up to date
    together (one manifest, one lock)."""

    archives: tuple[str, ...]
    stems: tuple[str, ...]
    """The file stems written: ``<stem>.<lang>.gz`` for both languages."""
    build: Builder


@dataclass(frozen=True)
class Recipe:
    label: str
    langs: tuple[str, str]
    groups: dict[str, SplitGroup]
    splits: dict[str, tuple[str, str]]
    """Split name -> (group, file stem); aliases share a stem."""


RECIPES: dict[str, Recipe] = {
    "iwslt14": Recipe(
        label="IWSLT14",
        langs=("de", "en"),
        groups={"iwslt14": SplitGroup(("de-en.tgz",), ("train", "valid", "test", *IWSLT14_SETS),
                                      _build_iwslt14)},
        splits={s: ("iwslt14", s) for s in ("train", "valid", "test", *IWSLT14_SETS)},
    ),
    "wmt14": Recipe(
        label="WMT14",
        langs=("en", "de"),
        groups={
            "train": SplitGroup(tuple(a for a, _ in WMT14_TRAIN), ("train",), _build_wmt14_train),
            "newstest2013": SplitGroup(("dev.tgz",), ("newstest2013",),
                                       _build_wmt14_eval("newstest2013")),
            "newstest2014": SplitGroup(("test-full.tgz",), ("newstest2014",),
                                       _build_wmt14_eval("newstest2014")),
        },
        splits={
            "train": ("train", "train"),
            "newstest2013": ("newstest2013", "newstest2013"),
            "valid": ("newstest2013", "newstest2013"),
            "newstest2014": ("newstest2014", "newstest2014"),
            "test": ("newstest2014", "newstest2014"),
        },
    ),
}


# ---------------------------------------------------------------------------
# Building once, reusing afterwards


def prepared_text_dir(corpus: str) -> Path:
    """``$NMTKIT_CACHE/<corpus>/prepared``: the prepared ``<split>.<lang>.gz`` files of every
    split group of ``corpus``, with each group's manifest and lock."""
    return cache_dir() / corpus / "prepared"


def _manifest_path(corpus: str, group: str) -> Path:
    return prepared_text_dir(corpus) / f"{group}.manifest.json"


def _stat(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _output_record(path: Path) -> dict[str, object]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _outputs_intact(corpus: str, manifest: dict[str, Any], verify: bool) -> bool:
    """Every prepared file has the size its manifest records and, with ``verify``, the
    sha256 (``nmtkit prepare``: a full read; a use checks the sizes only). A manifest written
    before sha256s were recorded gives a size alone (an int), which is all that is checked."""
    directory = prepared_text_dir(corpus)
    try:
        for f, rec in manifest["outputs"].items():
            size, digest = (rec, None) if isinstance(rec, int) else (rec["size"], rec["sha256"])
            path = directory / f
            if path.stat().st_size != size:
                return False
            if verify and digest is not None and (got := sha256_file(path)) != digest:
                log.warning("%s: sha256 mismatch (expected %s, got %s): the prepared files "
                            "are built again", path, digest, got)
                return False
    except (OSError, AttributeError, TypeError, KeyError):
        return False
    return True


def _read_manifest(corpus: str, group: SplitGroup, name: str,
                   verify: bool = False) -> dict[str, Any] | None:
    """The manifest of a complete build by this recipe version, else None."""
    try:
        manifest = json.loads(_manifest_path(corpus, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (not isinstance(manifest, dict) or manifest.get("recipe") != RECIPE_VERSION
            or sorted(manifest.get("archives", {})) != sorted(group.archives)
            or not _outputs_intact(corpus, manifest, verify)):
        return None
    return manifest


def _unchanged_on_disk(corpus: str, manifest: dict[str, Any]) -> bool:
    """True when every archive the build came from lies where it lay, with the same size and
    modification time (or has since been removed: the prepared files stay valid)."""
    for name, rec in manifest["archives"].items():
        local = local_file(corpus, name)
        if local is not None and {k: rec.get(k) for k in ("path", "size", "mtime_ns")} != _stat(local):
            return False
    return True


def _ensure_group(corpus: str, name: str, verify: bool = False) -> None:
    """Build the group ``name`` unless its files are there, complete and from the same
    archives; ``verify`` also reads them against their sha256 (``nmtkit prepare``)."""
    recipe = RECIPES[corpus]
    group = recipe.groups[name]
    if not verify:  # the cheap look first, without the lock
        manifest = _read_manifest(corpus, group, name)
        if manifest is not None and _unchanged_on_disk(corpus, manifest):
            return
    directory = prepared_text_dir(corpus)
    with writing_the_cache(directory), file_lock(directory / f".{name}.lock"):
        # another process may have built it meanwhile
        manifest = _read_manifest(corpus, group, name, verify)
        if manifest is not None and _unchanged_on_disk(corpus, manifest):
            return
        archives: dict[str, Path] = {}
        records: dict[str, dict[str, object]] = {}
        for archive in group.archives:
            path, digest = fetch_file(corpus, archive, URLS[corpus][archive],
                                      SHA256[corpus].get(archive), recipe.label)
            archives[archive] = path
            records[archive] = {"sha256": digest, **_stat(path)}
        if manifest is not None and all(
            manifest["archives"][a].get("sha256") == r["sha256"] for a, r in records.items()
        ):  # same bytes, moved or touched: keep the files, remember where the archives are
            manifest["archives"] = records
            atomic_write_text(_manifest_path(corpus, name), json.dumps(manifest, indent=1) + "\n")
            return
        _build(corpus, name, group, archives, records)


def _build(corpus: str, name: str, group: SplitGroup, archives: dict[str, Path],
           records: dict[str, dict[str, object]]) -> None:
    """Build ``group`` and put its files in place; called holding the group's lock.

    The prepared directory is shared by every group of the corpus (and holds their locks),
    so it is not replaced whole (:func:`nmtkit.io.atomic_dir`): the files are staged beside
    it and moved in one by one (:func:`nmtkit.io.staged_files`), with the group's manifest
    removed before the first move and written after the last, so a reader never takes a
    half-replaced group for a complete one.
    """
    recipe = RECIPES[corpus]
    directory = prepared_text_dir(corpus)
    log.info("%s: preparing %s from %s", recipe.label, ", ".join(group.stems),
             ", ".join(group.archives))
    for stale in directory.glob(f".{name}.*.tmp"):  # a build killed half-way (we hold the lock)
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    manifest_path = _manifest_path(corpus, name)
    with staged_files(directory, name) as tmp:
        scratch = tmp / "scratch"  # a subdirectory: removed with the staging directory
        scratch.mkdir()
        out = _Outputs(tmp, group.stems, recipe.langs, directory)
        try:
            group.build(archives, out, scratch)
        finally:
            out.close()
        files = {f"{stem}.{lang}.gz": _output_record(tmp / f"{stem}.{lang}.gz")
                 for stem in group.stems for lang in recipe.langs}
        manifest_path.unlink(missing_ok=True)  # no manifest while the files are being swapped
    manifest = {"recipe": RECIPE_VERSION, "corpus": corpus, "archives": records,
                "outputs": files, "lines": out.counts}
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    log.info("%s: prepared %s", recipe.label,
             ", ".join(f"{s} ({n} pairs)" for s, n in out.counts.items()))


def _recipe(corpus: str) -> Recipe:
    try:
        return RECIPES[corpus]
    except KeyError:
        raise CorpusError(f"no recipe for corpus {corpus!r} (known: {', '.join(RECIPES)})") from None


def _check_split(recipe: Recipe, split: str, src_lang: str, tgt_lang: str) -> tuple[str, str]:
    a, b = recipe.langs
    if {src_lang, tgt_lang} != {a, b}:
        raise CorpusError(f"{recipe.label} has the language pair {a}-{b} (either direction), "
                          f"not {src_lang}-{tgt_lang}")
    if split not in recipe.splits:
        raise CorpusError(f"{recipe.label} has no split {split!r}; splits: "
                          f"{', '.join(recipe.splits)}")
    return recipe.splits[split]


def split_files(corpus: str, split: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path, str]:
    """(source file, target file, display name) of a prepared split, preparing it first if
    needed (see the module docstring)."""
    recipe = _recipe(corpus)
    group, stem = _check_split(recipe, split, src_lang, tgt_lang)
    _ensure_group(corpus, group)
    directory = prepared_text_dir(corpus)
    return (directory / f"{stem}.{src_lang}.gz", directory / f"{stem}.{tgt_lang}.gz",
            f"{corpus}/{split}.{src_lang}-{tgt_lang}")


def prepare(corpus: str, splits: Iterable[str] | None = None) -> dict[str, int]:
    """Fetch and prepare ``splits`` (default: all) of ``corpus``; split -> number of pairs.
    Files prepared earlier are read against their recorded sha256 and built again from the
    archives where one differs."""
    recipe = _recipe(corpus)
    wanted = list(splits) if splits is not None else list(recipe.splits)
    counts: dict[str, int] = {}
    verified: set[str] = set()
    for split in wanted:
        group, stem = _check_split(recipe, split, *recipe.langs)
        _ensure_group(corpus, group, verify=group not in verified)
        verified.add(group)
        manifest = json.loads(_manifest_path(corpus, group).read_text(encoding="utf-8"))
        counts[split] = manifest["lines"][stem]
    return counts
