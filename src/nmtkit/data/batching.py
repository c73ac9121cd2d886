"""Length-bucketed, token-budget batches (Vaswani et al. 2017, Sec. 5.1: "batched together
by approximate sequence length"; the Annotated Transformer's "minimal padding").

Sentences are ordered by length (ties broken randomly, from the seed and the epoch),
cut greedily into batches whose *padded* size ``n * max_len`` stays within the budget
on both sides, and the batch order is shuffled. Every pair appears exactly once per
epoch; the same (seed, epoch) gives the same batches, so a resumed run sees the same data.
With ``world > 1`` each rank takes every ``world``-th batch (DistributedSampler-style).

:func:`static_batches` is the variant for CUDA graphs (``train.cuda_graphs``): every batch
is padded to one of a few fixed shapes (rows, source width, target width), so that one
captured graph per shape serves the whole run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from .vocab import BOS, EOS, PAD

log = logging.getLogger(__name__)


def pad_mask(ids: Tensor, pad: int = PAD) -> Tensor:
    """(batch, S) ids -> (batch, 1, S) bool, True at real tokens: the source mask of every
    model (the Annotated Transformer's ``(src != pad).unsqueeze(-2)``)."""
    return (ids != pad).unsqueeze(-2)


def token_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    rank: int = 0,
    world: int = 1,
) -> list[np.ndarray]:
    """Index arrays of the batches of one epoch. Lengths include the added BOS/EOS."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    n = len(src_lens)
    rng, tie = _tie_breaks(n, seed, epoch, shuffle)
    order = np.lexsort((tie, src_lens, tgt_lens))  # by target length, then source, then tie
    batches: list[np.ndarray] = []
    start, max_s, max_t = 0, 0, 0
    for pos, i in enumerate(order):
        s, t = int(src_lens[i]), int(tgt_lens[i])
        new_s, new_t = max(max_s, s), max(max_t, t)
        count = pos - start + 1
        if count > 1 and count * max(new_s, new_t) > max_tokens:
            batches.append(order[start:pos])
            start, new_s, new_t = pos, s, t
        max_s, max_t = new_s, new_t
    if start < n:
        batches.append(order[start:n])
    return _deal(batches, rng, shuffle, rank, world)


def _tie_breaks(n: int, seed: int, epoch: int, shuffle: bool) -> tuple[np.random.Generator, np.ndarray]:
    """The epoch's generator and a random tie-break per pair (their index without shuffle)."""
    rng = np.random.default_rng([seed, epoch])
    return rng, (rng.random(n) if shuffle else np.arange(n))


def _deal(batches: list[np.ndarray], rng: np.random.Generator, shuffle: bool, rank: int,
          world: int) -> list[np.ndarray]:
    """The epoch's batches in shuffled order; with ``world > 1`` this rank's every
    ``world``-th one (as many on every rank)."""
    if shuffle:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    if world > 1:
        usable = len(batches) - len(batches) % world
        batches = batches[rank:usable:world]
    return batches


SHAPE_STEPS = ((32, 4), (64, 8), (128, 16), (256, 32))
"""Widths of :func:`static_width`: multiples of 4 up to 32 tokens, of 8 up to 64, of 16 up to
128, of 32 up to 256, and of 64 beyond: a padded width is at most ~12% above the real one
(past 8 tokens), in 8 + 4 + 4 + 4 widths up to 256."""


def static_width(length: int) -> int:
    """The smallest width of the grid :data:`SHAPE_STEPS` that holds ``length`` tokens."""
    for limit, step in SHAPE_STEPS:
        if length <= limit:
            return max(step, -(-length // step) * step)
    return -(-length // 64) * 64


def static_rows(width: int, max_tokens: int) -> int:
    """Rows of a static batch whose longer side is ``width`` wide: as many as the budget
    holds (at least one)."""
    return max(1, max_tokens // width)


def static_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int = 0,
                   epoch: int = 0, shuffle: bool = True, rank: int = 0,
                   world: int = 1) -> list[np.ndarray]:
    """Index arrays of one epoch's batches for fixed shapes (see :func:`static_shape`).

    Pairs are sorted by their longer side ``l = max(src, tgt)`` (ties random), and cut
    greedily: a batch takes pairs while their count fits ``static_rows`` of the width of
    the longest so far. A batch may hold fewer pairs than that (where the width steps up,
    and at the end): its rows are then rounded up to a step of :data:`ROW_STEPS`, the rest
    padding. Every pair appears once per epoch; the same (seed, epoch) gives the same
    batches; ranks as in :func:`token_batches`.
    """
    longer = np.maximum(np.asarray(src_lens), np.asarray(tgt_lens))
    n = len(longer)
    rng, tie = _tie_breaks(n, seed, epoch, shuffle)
    order = np.lexsort((tie, longer))
    batches: list[np.ndarray] = []
    start = 0
    for pos, i in enumerate(order):
        rows = static_rows(static_width(int(longer[i])), max_tokens)
        if pos - start + 1 > rows:  # this pair's shape holds fewer rows than the batch has
            batches.append(order[start:pos])
            start = pos
    if start < n:
        batches.append(order[start:n])
    return _deal(batches, rng, shuffle, rank, world)


ROW_STEPS = 8
"""A static batch's rows are a multiple of 1/ROW_STEPS of what its width allows: a batch cut
short (where the width steps up, and at the end) pads at most that share with empty rows."""


def static_shape(src_len: int, tgt_len: int, max_tokens: int,
                 pairs: int = 0) -> tuple[int, int, int]:
    """(rows, source width, target width) of the static batch of ``pairs`` pairs (0: as many
    as fit) whose longest source has ``src_len`` tokens and longest target ``tgt_len``
    (BOS/EOS counted)."""
    s, t = static_width(src_len), static_width(tgt_len)
    rows = static_rows(max(s, t), max_tokens)
    if pairs:
        step = -(-rows // ROW_STEPS)
        rows = min(rows, -(-pairs // step) * step)
    return rows, s, t


def pad_batch(seqs: list[np.ndarray], pad: int = PAD) -> Tensor:
    """List of 1-D id arrays -> (batch, max_len) LongTensor, right-padded."""
    width = max(len(s) for s in seqs)
    out = np.full((len(seqs), width), pad, dtype=np.int64)
    for row, s in enumerate(seqs):
        out[row, : len(s)] = s
    return torch.from_numpy(out)


@dataclass
class Batch:
    """Tensors for one teacher-forced step. src: (b, S); tgt_in = BOS y; tgt_out = y EOS."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    index: np.ndarray
    n_tokens: int

    @property
    def src_mask(self) -> Tensor:
        return pad_mask(self.src)  # (batch, 1, S)

    def to(self, device: torch.device) -> Batch:
        """Move to ``device``; to CUDA through pinned memory, so the copy does not block."""
        if device.type != "cuda":
            return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device),
                         self.index, self.n_tokens)
        src, tgt_in, tgt_out = (x.pin_memory().to(device, non_blocking=True)
                                for x in (self.src, self.tgt_in, self.tgt_out))
        return Batch(src, tgt_in, tgt_out, self.index, self.n_tokens)


def flatten(seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged id sequences -> (tokens, offsets): ``seqs[i] == tokens[offsets[i]:offsets[i + 1]]``."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    tokens = np.concatenate(seqs).astype(np.int64) if seqs else np.zeros(0, dtype=np.int64)
    return tokens, offsets


def gather_padded(tokens: np.ndarray, offsets: np.ndarray, index: np.ndarray,
                  extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``index`` of a flat (tokens, offsets) store as a right-padded int64 array.

    Returns ``(ids, lens)``: ids is (batch, max_len + extra), PAD beyond each row's
    length. One vectorised gather, so ``tokens`` may be a memory map read page by page.
    """
    starts = offsets[index]
    lens = offsets[index + 1] - starts  # (batch,)
    width = int(lens.max(initial=0)) + extra
    pos = np.arange(width)
    inside = pos[None, :] < lens[:, None]  # (batch, width)
    out = np.full((len(index), width), PAD, dtype=np.int64)
    if inside.any():
        out[inside] = tokens[(starts[:, None] + pos[None, :])[inside]]
    return out, lens


class ParallelIds:
    """Token ids of one split, stored flat: source ``i`` is
    ``src_tokens[src_offsets[i]:src_offsets[i + 1]]`` and ends with EOS; targets have
    no BOS/EOS. The token arrays may live in memory or be memory maps (``data.mmap``):
    batches only ever read the rows they hold.
    """

    def __init__(self, src: list[np.ndarray], tgt: list[np.ndarray]):
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source vs {len(tgt)} target sequences")
        self._set(*flatten(src), *flatten(tgt))

    @classmethod
    def from_flat(cls, src_tokens: np.ndarray, src_offsets: np.ndarray,
                  tgt_tokens: np.ndarray, tgt_offsets: np.ndarray) -> ParallelIds:
        if len(src_offsets) != len(tgt_offsets):
            raise ValueError(f"{len(src_offsets) - 1} source vs {len(tgt_offsets) - 1} "
                             "target sequences")
        data = cls.__new__(cls)
        data._set(src_tokens, src_offsets, tgt_tokens, tgt_offsets)
        return data

    def _set(self, src_tokens: np.ndarray, src_offsets: ArrayLike, tgt_tokens: np.ndarray,
             tgt_offsets: ArrayLike) -> None:
        self.src_tokens, self.src_offsets = src_tokens, np.asarray(src_offsets, dtype=np.int64)
        self.tgt_tokens, self.tgt_offsets = tgt_tokens, np.asarray(tgt_offsets, dtype=np.int64)
        self.src_lens = np.diff(self.src_offsets)
        self.tgt_lens = np.diff(self.tgt_offsets) + 1  # + BOS or EOS

    def __len__(self) -> int:
        return len(self.src_lens)

    def source(self, i: int) -> np.ndarray:
        return np.asarray(self.src_tokens[self.src_offsets[i]:self.src_offsets[i + 1]])

    def target(self, i: int) -> np.ndarray:
        return np.asarray(self.tgt_tokens[self.tgt_offsets[i]:self.tgt_offsets[i + 1]])

    def epoch_rows(self, seed: int, epoch: int) -> np.ndarray | None:
        """The stored pairs that epoch ``epoch`` trains on (``None``: every one, once).
        Subclasses that sample an epoch (:class:`nmtkit.data.multilingual.SampledIds`)
        override this, and every kind of batch below is cut from their sample."""
        return None

    def batches(self, max_tokens: int, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                rank: int = 0, world: int = 1, static: bool = False) -> list[np.ndarray]:
        """One epoch's batches (indices of stored pairs): :func:`token_batches`, or with
        ``static`` :func:`static_batches`, over :meth:`epoch_rows`."""
        cut = static_batches if static else token_batches
        rows = self.epoch_rows(seed, epoch)
        if rows is None:
            return cut(self.src_lens, self.tgt_lens, max_tokens, seed, epoch, shuffle, rank, world)
        local = cut(self.src_lens[rows], self.tgt_lens[rows], max_tokens, seed, epoch, shuffle,
                    rank, world)
        return [rows[b] for b in local]

    def collate(self, index: np.ndarray, static_tokens: int = 0) -> Batch:
        """The batch of pairs ``index``. With ``static_tokens`` (the token budget of
        :func:`static_batches`) it is padded to :func:`static_shape`: extra columns are PAD,
        extra rows hold a one-token source (EOS), BOS as decoder input and PAD targets, so
        that they attend somewhere and add nothing to the loss."""
        index = np.asarray(index, dtype=np.int64)
        src, _ = gather_padded(self.src_tokens, self.src_offsets, index)
        tgt, lens = gather_padded(self.tgt_tokens, self.tgt_offsets, index, extra=1)
        tgt_in = np.concatenate((np.full((len(index), 1), BOS, dtype=np.int64), tgt[:, :-1]), 1)
        tgt[np.arange(len(index)), lens] = EOS  # y EOS
        n_tokens = int(lens.sum() + len(index))
        if static_tokens:
            rows, s, t = static_shape(src.shape[1], tgt.shape[1], static_tokens, len(index))
            if rows < len(index):
                raise ValueError(f"{len(index)} pairs do not fit the static shape "
                                 f"({rows}, {s}, {t}) of a {static_tokens}-token budget")
            src = _pad_to(src, rows, s, fill_row=EOS)
            tgt_in = _pad_to(tgt_in, rows, t, fill_row=BOS)
            tgt = _pad_to(tgt, rows, t, fill_row=PAD)
        return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt),
                     index, n_tokens)


def _pad_to(ids: np.ndarray, rows: int, width: int, fill_row: int) -> np.ndarray:
    """``ids`` (n, w) -> (rows, width): PAD to the right; each added row is ``fill_row``
    followed by PAD."""
    out = np.full((rows, width), PAD, dtype=np.int64)
    out[: ids.shape[0], : ids.shape[1]] = ids
    out[ids.shape[0]:, 0] = fill_row
    return out
