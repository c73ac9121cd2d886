"""Length-bucketed, token-budget batches (Vaswani et al. 2017, Sec. 5.1: "batched together
by approximate sequence length"; the Annotated Transformer's "minimal padding").

Sentences are ordered by length (ties broken randomly, from the seed and the epoch),
cut greedily into batches whose *padded* size ``n * max_len`` stays within the budget
on both sides, and the batch order is shuffled. Every pair appears exactly once per
epoch; the same (seed, epoch) gives the same batches, so a resumed run sees the same data.
With ``world > 1`` each rank takes every ``world``-th batch (DistributedSampler-style).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from ..models.seq2seq import pad_mask
from .vocab import BOS, EOS, PAD

log = logging.getLogger(__name__)


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
    rng = np.random.default_rng([seed, epoch])
    tie = rng.random(n) if shuffle else np.arange(n)
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
    if shuffle:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    if world > 1:
        usable = len(batches) - len(batches) % world
        batches = batches[rank:usable:world]
    return batches


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

    def batches(self, max_tokens: int, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                rank: int = 0, world: int = 1) -> list[np.ndarray]:
        return token_batches(self.src_lens, self.tgt_lens, max_tokens, seed, epoch, shuffle,
                             rank, world)

    def collate(self, index: np.ndarray) -> Batch:
        index = np.asarray(index, dtype=np.int64)
        src, _ = gather_padded(self.src_tokens, self.src_offsets, index)
        tgt, lens = gather_padded(self.tgt_tokens, self.tgt_offsets, index, extra=1)
        tgt_in = np.concatenate((np.full((len(index), 1), BOS, dtype=np.int64), tgt[:, :-1]), 1)
        tgt[np.arange(len(index)), lens] = EOS  # y EOS
        return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt),
                     index, int(lens.sum() + len(index)))
