"""From configured corpora to token-id arrays: corpora -> tokenizers -> vocabularies -> ids."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from ..config import DataConfig
from .batching import ParallelIds
from .corpora import Parallel, load_parallel
from .tokenizers import Tokenizer, tokenizer_from_state, train_tokenizers
from .vocab import Vocab

log = logging.getLogger(__name__)


@dataclass
class Vocabularies:
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab


def vocab_state(v: Vocabularies) -> dict[str, Any]:
    return {"tokenizers": {"src": v.src_tok.state(), "tgt": v.tgt_tok.state()},
            "vocab": {"src": v.src_vocab.to_dict(), "tgt": v.tgt_vocab.to_dict()}}


def vocab_from_state(state: dict[str, Any]) -> Vocabularies:
    """Inverse of :func:`vocab_state` (a checkpoint's ``tokenizers``/``vocab`` entries)."""
    return Vocabularies(tokenizer_from_state(state["tokenizers"]["src"]),
                        tokenizer_from_state(state["tokenizers"]["tgt"]),
                        Vocab.from_dict(state["vocab"]["src"]),
                        Vocab.from_dict(state["vocab"]["tgt"]))


PairSource = Callable[[], Iterable[tuple[str, str]]]
"""A zero-argument function giving a fresh pass over (source, target) pairs: the training
split is read more than once (sample, count, encode) without being held in memory."""

SAMPLE_SEED = 20170612
"""Seed of the tokenizer-training sample (any fixed value: the sample must not change)."""


def pairs_of(par: Parallel) -> PairSource:
    return lambda: zip(par.src, par.tgt, strict=True)


def sample_pairs(pairs: Iterable[tuple[str, str]], n: int,
                 seed: int = SAMPLE_SEED) -> tuple[list[str], list[str]]:
    """A uniform sample of ``n`` pairs in one pass (reservoir sampling, Vitter's Algorithm R),
    returned in corpus order; every pair when ``n`` is 0 or the corpus has at most ``n``."""
    rng = random.Random(seed)
    kept: list[tuple[int, tuple[str, str]]] = []
    for i, pair in enumerate(pairs):
        if n == 0 or i < n:
            kept.append((i, pair))
        else:
            j = rng.randrange(i + 1)
            if j < n:
                kept[j] = (i, pair)
    kept.sort(key=lambda item: item[0])
    return [s for _, (s, _t) in kept], [t for _, (_s, t) in kept]


def build_vocabularies(cfg: DataConfig, pairs: PairSource) -> Vocabularies:
    """Train the tokenizers on (a sample of ``data.tokenizer_sample``) training pairs, then
    count every pair's tokens into vocabularies.

    SentencePiece pieces are all kept (min_freq 1: the segmentation was already sized by
    ``vocab_size``); word and whitespace tokens below ``min_freq`` become ``<unk>``.
    """
    src_lines, tgt_lines = sample_pairs(pairs(), cfg.tokenizer_sample)
    src_tok, tgt_tok = train_tokenizers(cfg, src_lines, tgt_lines)
    del src_lines, tgt_lines
    min_freq = 1 if cfg.tokenizer == "sentencepiece" or cfg.corpus == "copy" else cfg.min_freq

    def tokens(sides: str) -> Iterator[list[str]]:
        for s, t in tqdm(pairs(), desc=f"counting {sides} tokens", unit=" pairs", disable=None,
                         leave=False):
            if sides != "target":
                yield src_tok.encode(s)
            if sides != "source":
                yield tgt_tok.encode(t)

    if cfg.joint_vocab:
        src_vocab = tgt_vocab = Vocab.build(tokens("joint"), min_freq=min_freq)
    else:
        src_vocab = Vocab.build(tokens("source"), min_freq=min_freq)
        tgt_vocab = Vocab.build(tokens("target"), min_freq=min_freq)
    log.info("vocabulary: source %d, target %d types", len(src_vocab), len(tgt_vocab))
    return Vocabularies(src_tok, tgt_tok, src_vocab, tgt_vocab)


def encode_pairs(cfg: DataConfig, pairs: Iterable[tuple[str, str]], v: Vocabularies,
                 drop_long: bool, name: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Token ids pair by pair. Sources end with EOS (reversed first if ``reverse_source``).

    With ``drop_long``, pairs longer than ``cfg.max_len`` tokens on either side are skipped
    (counted and logged at the end); otherwise they are truncated.
    """
    dropped = total = 0
    for total, (s, t) in enumerate(pairs, start=1):  # noqa: B007 (logged below)
        st, tt = v.src_tok.encode(s), v.tgt_tok.encode(t)
        if len(st) > cfg.max_len or len(tt) > cfg.max_len:
            if drop_long:
                dropped += 1
                continue
            st, tt = st[: cfg.max_len], tt[: cfg.max_len]
        if cfg.reverse_source:
            st = st[::-1]
        yield (np.asarray(v.src_vocab.encode(st, add_eos=True), dtype=np.int64),
               np.asarray(v.tgt_vocab.encode(tt, add_eos=False), dtype=np.int64))
    if dropped:
        log.warning("%s: skipped %d of %d pairs longer than data.max_len=%d tokens",
                    name, dropped, total, cfg.max_len)


def encode_parallel(cfg: DataConfig, par: Parallel, v: Vocabularies,
                    drop_long: bool) -> ParallelIds:
    """Token ids of one split held in memory (see :func:`encode_pairs`)."""
    src_ids: list[np.ndarray] = []
    tgt_ids: list[np.ndarray] = []
    for s, t in encode_pairs(cfg, pairs_of(par)(), v, drop_long, par.name):
        src_ids.append(s)
        tgt_ids.append(t)
    return ParallelIds(src_ids, tgt_ids)


def load_split(cfg: DataConfig, role: str) -> Parallel:
    """role: train | valid | test -> the configured split of the corpus."""
    return load_parallel(cfg, getattr(cfg, role))
