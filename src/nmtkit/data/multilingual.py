"""One model, many directions: a target-language token first in every source (Johnson et al.
2017, Google's multilingual NMT, Sec. 3) and temperature sampling over the directions'
training pairs (Arivazhagan et al. 2019, Sec. 4.2; fairseq's multilingual sampling).

``data.directions: [de-en, en-de]`` names the directions; each is read from the same corpus
(``data.corpus``, the same split names or path prefixes) with its own languages, and its
sources start with ``<2xx>``, ``xx`` its target language. The tag is one token of the source
vocabulary that the tokenizer never sees (the mechanism of ``data.extra``'s tags,
:func:`nmtkit.data.prepare.split_tag`); at translation time the translator puts it before
the source of the language asked for, never the user.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import DataConfig
from .batching import ParallelIds
from .corpora import Parallel, load_parallel

log = logging.getLogger(__name__)

SAMPLE_SEED = 20190711
"""Mixed into the seed of each epoch's sample of the directions (any fixed value)."""


def target_tag(lang: str) -> str:
    """The source token that asks for a translation into ``lang``: ``<2en>``."""
    return f"<2{lang}>"


@dataclass(frozen=True)
class Direction:
    """One translation direction of ``data.directions``."""

    src: str
    tgt: str

    @property
    def name(self) -> str:
        """``de-en``: as written in the config, and in the ``bleu_de-en`` metric's name."""
        return f"{self.src}-{self.tgt}"

    @property
    def tag(self) -> str:
        return target_tag(self.tgt)


def directions(cfg: DataConfig) -> list[Direction]:
    """``data.directions`` (checked by :meth:`DataConfig.validate`); [] for a run of one
    direction (``src_lang`` -> ``tgt_lang``, untagged)."""
    out = []
    for name in cfg.directions:
        src, tgt = name.split("-")
        out.append(Direction(src, tgt))
    return out


def direction_tags(cfg: DataConfig) -> frozenset[str]:
    """The target-language tokens of ``data.directions`` (empty for one direction)."""
    return frozenset(d.tag for d in directions(cfg))


def target_tags(cfg: DataConfig) -> dict[str, str]:
    """Target language -> the token put first in its sources: ``<2xx>`` for each target of
    ``data.directions``; for a model of one direction its target with none (``""``)."""
    dirs = directions(cfg)
    if not dirs:
        return {cfg.tgt_lang: ""}
    return {d.tgt: d.tag for d in dirs}


def for_direction(cfg: DataConfig, d: Direction) -> DataConfig:
    """``cfg`` reading one direction: its languages as ``src_lang``/``tgt_lang``."""
    return dataclasses.replace(cfg, src_lang=d.src, tgt_lang=d.tgt, directions=())


@dataclass
class DirectedSplit:
    """One direction's part of a split: its pairs (sources untagged), and the direction
    (``None``: the only one of a run without ``data.directions``)."""

    direction: Direction | None
    text: Parallel

    @property
    def name(self) -> str | None:
        return None if self.direction is None else self.direction.name

    @property
    def tgt_lang(self) -> str | None:
        """The target language to ask the translator for (``None``: the model's only one)."""
        return None if self.direction is None else self.direction.tgt

    def tagged(self) -> Parallel:
        """The pairs with ``<2xx> `` before every source (as the model reads them)."""
        if self.direction is None:
            return self.text
        head = self.direction.tag + " "
        return Parallel([head + s for s in self.text.src], list(self.text.tgt), self.text.name,
                        self.text.skipped_empty)


def load_directed(cfg: DataConfig, split: str) -> list[DirectedSplit]:
    """``split`` of the corpus in every direction of ``data.directions`` (one entry for a run
    without them)."""
    dirs = directions(cfg)
    if not dirs:
        return [DirectedSplit(None, load_parallel(cfg, split))]
    return [DirectedSplit(d, load_parallel(for_direction(cfg, d), split)) for d in dirs]


def join(splits: Sequence[DirectedSplit]) -> Parallel:
    """The directions' tagged pairs one after the other; ``parts`` holds their sizes (a
    run of one direction: its pairs as they are)."""
    if len(splits) == 1 and splits[0].direction is None:
        return splits[0].text
    src: list[str] = []
    tgt: list[str] = []
    for s in splits:
        tagged = s.tagged()
        src += tagged.src
        tgt += tagged.tgt
    return Parallel(src, tgt, " + ".join(s.text.name for s in splits),
                    sum(s.text.skipped_empty for s in splits), parts=tuple(len(s.text) for s in splits))


# ---------------------------------------------------------------------------
# Sampling the directions by temperature


def temperature_counts(sizes: Sequence[int], temperature: float) -> list[int]:
    """Pairs of each direction in one epoch. The epoch keeps the total size and shares it in
    proportion to p_d = n_d^(1/T) / sum_k n_k^(1/T) (Arivazhagan et al. 2019, Sec. 4.2):
    T = 1 gives each direction its own size (the plain union), a large T equal shares (small
    directions up-sampled, large ones down-sampled), T < 1 favours the large ones further.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    total = sum(sizes)
    live = [n for n in sizes if n > 0]
    if not live:
        return [0] * len(sizes)
    # log-space softmax of log(n) / T: no overflow for a small T
    top = max(math.log(n) / temperature for n in live)
    weights = [math.exp(math.log(n) / temperature - top) if n > 0 else 0.0 for n in sizes]
    z = sum(weights)
    return [round(total * w / z) for w in weights]


def epoch_indices(sizes: Sequence[int], counts: Sequence[int], seed: int,
                  epoch: int) -> np.ndarray:
    """The rows of one epoch, from a store of the directions' pairs one after the other
    (``sizes[d]`` rows each): direction d's ``counts[d]`` rows are every one of its rows
    ``counts[d] // sizes[d]`` times, then a seeded sample without replacement of
    ``counts[d] % sizes[d]`` more. The same (seed, epoch) gives the same rows (``--resume``
    repeats them); when every count equals its size (T = 1) they are simply 0..N-1."""
    rows: list[np.ndarray] = []
    start = 0
    for d, (n, c) in enumerate(zip(sizes, counts, strict=True)):
        if n > 0 and c > 0:
            whole, rest = divmod(c, n)
            part = [np.tile(np.arange(n, dtype=np.int64), whole)]
            if rest:
                rng = np.random.default_rng([SAMPLE_SEED, seed, epoch, d])
                part.append(np.sort(rng.choice(n, rest, replace=False)))
            rows.append(start + np.concatenate(part))
        start += n
    return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)


class SampledIds(ParallelIds):
    """Training ids of ``data.directions``: each direction's pairs stored once, one direction
    after the other; the batches of an epoch are cut from that epoch's temperature sample
    (:func:`epoch_indices`), so they depend on (seed, epoch) only and ``--resume`` continues
    exactly. With counts equal to the sizes the batches are :class:`ParallelIds`'s own."""

    def __init__(self, src: list[np.ndarray], tgt: list[np.ndarray], sizes: Sequence[int],
                 counts: Sequence[int]) -> None:
        super().__init__(src, tgt)
        if sum(sizes) != len(self) or len(sizes) != len(counts):
            raise ValueError(f"sizes {list(sizes)} (counts {list(counts)}) do not describe "
                             f"{len(self)} pairs")
        self.sizes, self.counts = list(sizes), list(counts)

    def epoch_rows(self, seed: int, epoch: int) -> np.ndarray:
        return epoch_indices(self.sizes, self.counts, seed, epoch)  # (epoch pairs,) store rows


def evaluation_direction(cfg: DataConfig, src_lang: str | None,
                         tgt_lang: str | None) -> tuple[DataConfig, Direction]:
    """The direction that ``nmtkit evaluate --split`` scores: (``cfg`` reading its files, the
    direction). A model of one direction: its own (``ValueError`` if the languages given are
    others). A model of ``data.directions``: ``tgt_lang`` must be one of its targets (may be
    left out when it has one), ``src_lang`` may be left out when one direction goes into
    ``tgt_lang``; any other source language is a zero-shot direction (Johnson et al. 2017,
    Sec. 5), evaluated as asked, from any language the model has read or written; one it has
    never seen is a ``ValueError`` (back-translation would name its synthetic corpus after
    it)."""
    dirs = directions(cfg)
    if not dirs:
        own = Direction(cfg.src_lang, cfg.tgt_lang)
        if (src_lang or own.src, tgt_lang or own.tgt) != (own.src, own.tgt):
            raise ValueError(f"this model translates {own.src} -> {own.tgt} only, not "
                             f"{src_lang or own.src} -> {tgt_lang or own.tgt}")
        return cfg, own
    targets = sorted({d.tgt for d in dirs})
    if tgt_lang is None and len(targets) > 1:
        raise ValueError(f"this model translates into {', '.join(targets)}: name the target "
                         "language (--tgt-lang)")
    tgt = tgt_lang or targets[0]
    if tgt not in targets:
        raise ValueError(f"target language {tgt!r}: this model translates into "
                         f"{', '.join(targets)} only")
    known = sorted({lang for d in dirs for lang in (d.src, d.tgt)})
    if src_lang is not None and src_lang not in known:
        raise ValueError(f"source language {src_lang!r}: this model knows {', '.join(known)} "
                         "only")
    sources = sorted(d.src for d in dirs if d.tgt == tgt)
    if src_lang is None and len(sources) > 1:
        raise ValueError(f"this model translates into {tgt} from {', '.join(sources)}: name the "
                         "source language (--src-lang)")
    src = src_lang or sources[0]
    if src == tgt:
        raise ValueError(f"--src-lang and --tgt-lang are both {src!r}")
    d = Direction(src, tgt)
    return for_direction(cfg, d), d
