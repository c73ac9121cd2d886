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
from torch import Tensor

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
        return (self.src != PAD).unsqueeze(-2)  # (batch, 1, S)

    def to(self, device) -> Batch:
        """Move to ``device``; to CUDA through pinned memory, so the copy does not block."""
        if device.type != "cuda":
            return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device),
                         self.index, self.n_tokens)
        src, tgt_in, tgt_out = (x.pin_memory().to(device, non_blocking=True)
                                for x in (self.src, self.tgt_in, self.tgt_out))
        return Batch(src, tgt_in, tgt_out, self.index, self.n_tokens)


class ParallelIds:
    """Token ids of one split: ``src[i]`` ends with EOS; ``tgt[i]`` has no BOS/EOS."""

    def __init__(self, src: list[np.ndarray], tgt: list[np.ndarray]):
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source vs {len(tgt)} target sequences")
        self.src, self.tgt = src, tgt
        self.src_lens = np.array([len(s) for s in src], dtype=np.int64)
        self.tgt_lens = np.array([len(t) + 1 for t in tgt], dtype=np.int64)  # + BOS or EOS

    def __len__(self) -> int:
        return len(self.src)

    def batches(self, max_tokens: int, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                rank: int = 0, world: int = 1) -> list[np.ndarray]:
        return token_batches(self.src_lens, self.tgt_lens, max_tokens, seed, epoch, shuffle,
                             rank, world)

    def collate(self, index: np.ndarray) -> Batch:
        tgt = [self.tgt[i] for i in index]
        tgt_in = pad_batch([np.concatenate(([BOS], t)) for t in tgt])
        tgt_out = pad_batch([np.concatenate((t, [EOS])) for t in tgt])
        return Batch(pad_batch([self.src[i] for i in index]), tgt_in, tgt_out, index,
                     int(sum(len(t) + 1 for t in tgt)))
