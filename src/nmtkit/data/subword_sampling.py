"""Subword regularisation: the training split segmented anew, by sampling, at each epoch.

One sentence has many segmentations into the pieces of a SentencePiece model; training on
a different sampled one at each epoch makes the model robust to segmentation and acts as
a regulariser:

- BPE-dropout (Provilkov et al. 2020, Sec. 2): while a BPE model applies its merges, each
  merge is skipped with probability p (``data.subword_alpha``), so a word comes out in
  smaller pieces now and then;
- unigram subword sampling (Kudo 2018, Sec. 2.2 and 3.2): a segmentation x of sentence X
  is drawn from P(x | X)^alpha, normalised, among the l best (``data.subword_nbest``) or
  all (-1) segmentations.

Only the training split is sampled. Validation, test, decoding and every checkpoint's
tokenizer use the deterministic segmentation. An epoch's draw depends on (``train.seed``,
epoch) only, so a resumed run (which rebuilds its epoch) and every process of a torchrun
job see the same segmentation. The cost: the training text stays in memory beside its
ids, and is encoded again at the start of each epoch (single-threaded; Multi30k's 29k
pairs take about a second).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..config import DataConfig
from ..errors import UserError
from .batching import ParallelIds
from .corpora import Parallel
from .prepare import Vocabularies, encode_parallel
from .tokenizers import SentencePieceTokenizer, Tokenizer
from .vocab import UNK

log = logging.getLogger(__name__)

SAMPLING_SALT = 20200503
"""Mixed into every epoch's seed, so the segmentation draw is independent of the batch
shuffle (which is seeded from the same (seed, epoch))."""


def epoch_seed(seed: int, epoch: int) -> int:
    """SentencePiece's seed for ``epoch``: a function of (``train.seed``, epoch) only
    (an unsigned 32-bit number)."""
    return int(np.random.SeedSequence([seed, epoch, SAMPLING_SALT]).generate_state(1)[0])


class SampledSentencePiece:
    """A :class:`SentencePieceTokenizer` whose ``encode`` samples a segmentation; the rest
    (``decode``, ``state``: what a checkpoint stores) is the deterministic tokenizer's."""

    kind = SentencePieceTokenizer.kind

    def __init__(self, tok: SentencePieceTokenizer, alpha: float, nbest: int):
        self.tok, self.alpha, self.nbest = tok, alpha, nbest

    def encode(self, text: str) -> list[str]:
        return self.tok.sample(text, self.alpha, self.nbest)

    def decode(self, tokens: list[str]) -> str:
        return self.tok.decode(tokens)

    def state(self) -> dict[str, Any]:
        return self.tok.state()


def sampled(tok: Tokenizer, cfg: DataConfig) -> SampledSentencePiece:
    """``tok`` with sampling on, for ``cfg.subword_alpha``/``subword_nbest``."""
    if not isinstance(tok, SentencePieceTokenizer):
        raise UserError(f"data.subword_alpha needs SentencePiece tokenizers, got a {tok.kind} "
                         "tokenizer (from the checkpoint or data.tokenizer)")
    return SampledSentencePiece(tok, cfg.subword_alpha, cfg.subword_nbest)


class SubwordSampler:
    """The training split's ids for each epoch, from a freshly sampled segmentation.

    ``ids(epoch)`` re-encodes the held training text (pairs longer than ``data.max_len``
    after sampling are skipped for that epoch, as always in training) and keeps the last
    epoch's ids, so asking twice for one epoch encodes once.
    """

    def __init__(self, cfg: DataConfig, train: Parallel, vocabs: Vocabularies, seed: int):
        self.cfg, self.train, self.seed = cfg, train, seed
        src = sampled(vocabs.src_tok, cfg)
        tgt = src if vocabs.tgt_tok is vocabs.src_tok else sampled(vocabs.tgt_tok, cfg)
        self.vocabs = Vocabularies(src, tgt, vocabs.src_vocab, vocabs.tgt_vocab)
        self._last: tuple[int, ParallelIds] | None = None

    def ids(self, epoch: int) -> ParallelIds:
        if self._last is not None and self._last[0] == epoch:
            return self._last[1]
        SentencePieceTokenizer.seed_sampling(epoch_seed(self.seed, epoch))
        ids = encode_parallel(self.cfg, self.train, self.vocabs, drop_long=True)
        n = max(len(ids), 1)
        unk = (int(np.count_nonzero(np.asarray(ids.src_tokens) == UNK))
               + int(np.count_nonzero(np.asarray(ids.tgt_tokens) == UNK)))
        log.info("epoch %d: sampled segmentation (data.subword_alpha=%g): %d pairs, %.1f source "
                 "and %.1f target tokens a pair, %d <unk>", epoch, self.cfg.subword_alpha, len(ids),
                 len(ids.src_tokens) / n, len(ids.tgt_tokens) / n, unk)
        self._last = (epoch, ids)
        return ids
