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

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import DataConfig
from ..errors import UserError
from .batching import ParallelIds
from .corpora import Parallel, load_parallel
from .directions import Direction, directions, for_direction

log = logging.getLogger(__name__)

SAMPLE_SEED = 20190711
"""Mixed into the seed of each epoch's sample of the directions (any fixed value)."""


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
        raise UserError(f"temperature must be > 0, got {temperature}")
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
