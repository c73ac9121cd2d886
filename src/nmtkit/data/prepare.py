"""From configured corpora to token-id arrays: corpora -> tokenizers -> vocabularies -> ids."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..config import DataConfig
from .batching import ParallelIds
from .corpora import Parallel, load_parallel
from .tokenizers import Tokenizer, train_tokenizers
from .vocab import Vocab

log = logging.getLogger(__name__)


@dataclass
class Vocabularies:
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab


def build_vocabularies(cfg: DataConfig, train: Parallel) -> Vocabularies:
    """Train the tokenizers on the training split, then count their tokens into vocabularies.

    SentencePiece pieces are all kept (min_freq 1: the segmentation was already sized by
    ``vocab_size``); word and whitespace tokens below ``min_freq`` become ``<unk>``.
    """
    src_tok, tgt_tok = train_tokenizers(cfg, train.src, train.tgt)
    src_tokens = [src_tok.encode(s) for s in train.src]
    tgt_tokens = [tgt_tok.encode(t) for t in train.tgt]
    min_freq = 1 if cfg.tokenizer == "sentencepiece" or cfg.corpus == "copy" else cfg.min_freq
    if cfg.joint_vocab:
        vocab = Vocab.build(src_tokens + tgt_tokens, min_freq=min_freq)
        src_vocab = tgt_vocab = vocab
    else:
        src_vocab = Vocab.build(src_tokens, min_freq=min_freq)
        tgt_vocab = Vocab.build(tgt_tokens, min_freq=min_freq)
    log.info("vocabulary: source %d, target %d types", len(src_vocab), len(tgt_vocab))
    return Vocabularies(src_tok, tgt_tok, src_vocab, tgt_vocab)


def encode_parallel(cfg: DataConfig, par: Parallel, v: Vocabularies,
                    drop_long: bool) -> ParallelIds:
    """Token ids for one split. Sources end with EOS (reversed first if ``reverse_source``).

    With ``drop_long``, pairs longer than ``cfg.max_len`` tokens on either side are skipped
    (counted and logged); otherwise they are truncated.
    """
    src_ids, tgt_ids, dropped = [], [], 0
    for s, t in zip(par.src, par.tgt, strict=True):
        st, tt = v.src_tok.encode(s), v.tgt_tok.encode(t)
        if len(st) > cfg.max_len or len(tt) > cfg.max_len:
            if drop_long:
                dropped += 1
                continue
            st, tt = st[: cfg.max_len], tt[: cfg.max_len]
        if cfg.reverse_source:
            st = st[::-1]
        src_ids.append(np.asarray(v.src_vocab.encode(st, add_eos=True), dtype=np.int64))
        tgt_ids.append(np.asarray(v.tgt_vocab.encode(tt, add_eos=False), dtype=np.int64))
    if dropped:
        log.warning("%s: skipped %d of %d pairs longer than data.max_len=%d tokens",
                    par.name, dropped, len(par.src), cfg.max_len)
    return ParallelIds(src_ids, tgt_ids)


def load_split(cfg: DataConfig, role: str) -> Parallel:
    """role: train | valid | test -> the configured split of the corpus."""
    return load_parallel(cfg, getattr(cfg, role))
