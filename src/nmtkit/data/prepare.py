"""From configured corpora to token-id arrays: corpora -> tokenizers -> vocabularies -> ids."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from ..config import ConfigError, DataConfig, ExtraCorpus
from .batching import ParallelIds
from .corpora import Parallel, load_parallel
from .directions import direction_tags, directions
from .multilingual import SampledIds, join, load_directed, temperature_counts
from .tokenizers import SentencePieceTokenizer, Tokenizer, tokenizer_from_state, train_tokenizers
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
    tags = extra_tags(cfg)
    src_lines, tgt_lines = sample_pairs(pairs(), cfg.tokenizer_sample)
    src_lines = [split_tag(s, tags)[1] for s in src_lines]  # tags are no text to segment
    src_tok, tgt_tok = train_tokenizers(cfg, src_lines, tgt_lines)
    del src_lines, tgt_lines
    min_freq = 1 if cfg.tokenizer == "sentencepiece" or cfg.corpus == "copy" else cfg.min_freq
    # data.subword_alpha: sampled segmentations use pieces that the deterministic one may
    # never produce on this corpus (e.g. a BPE merge that is always merged further): keep all.
    src_keep, tgt_keep = set(tags), set[str]()
    for keep, tok in ((src_keep, src_tok), (tgt_keep, tgt_tok)):  # data.byte_fallback
        keep |= set(tok.byte_pieces()) if isinstance(tok, SentencePieceTokenizer) else set()
    if cfg.subword_alpha > 0:
        src_keep |= set(src_tok.pieces()) if isinstance(src_tok, SentencePieceTokenizer) else set()
        tgt_keep |= set(tgt_tok.pieces()) if isinstance(tgt_tok, SentencePieceTokenizer) else set()

    def tokens(sides: str) -> Iterator[list[str]]:
        for s, t in tqdm(pairs(), desc=f"counting {sides} tokens", unit=" pairs", disable=None,
                         leave=False):
            if sides != "target":
                yield src_tok.encode(split_tag(s, tags)[1])
            if sides != "source":
                yield tgt_tok.encode(t)

    if cfg.joint_vocab:
        src_vocab = tgt_vocab = Vocab.build(tokens("joint"), min_freq=min_freq,
                                            keep=src_keep | tgt_keep)
    else:
        src_vocab = Vocab.build(tokens("source"), min_freq=min_freq, keep=src_keep)
        tgt_vocab = Vocab.build(tokens("target"), min_freq=min_freq, keep=tgt_keep)
    log.info("vocabulary: source %d, target %d types", len(src_vocab), len(tgt_vocab))
    return Vocabularies(src_tok, tgt_tok, src_vocab, tgt_vocab)


def encode_pairs(cfg: DataConfig, pairs: Iterable[tuple[str, str]], v: Vocabularies,
                 drop_long: bool, name: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Token ids pair by pair. Sources end with EOS (reversed first if ``reverse_source``);
    targets are reversed with ``reverse_target`` (a right-to-left model).

    With ``drop_long``, pairs longer than ``cfg.max_len`` tokens on either side are skipped
    (counted and logged at the end); otherwise they are truncated.
    """
    dropped = total = 0
    tags = extra_tags(cfg)
    for total, (s, t) in enumerate(pairs, start=1):  # noqa: B007 (logged below)
        tag, s = split_tag(s, tags)
        head = [tag] if tag else []  # a data.extra tag: one token, first whatever the order
        st, tt = v.src_tok.encode(s), v.tgt_tok.encode(t)
        if len(head) + len(st) > cfg.max_len or len(tt) > cfg.max_len:
            if drop_long:
                dropped += 1
                continue
            st, tt = st[: cfg.max_len - len(head)], tt[: cfg.max_len]
        if cfg.reverse_source:
            st = st[::-1]
        if cfg.reverse_target:
            tt = tt[::-1]
        st = head + st
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


def encode_training(cfg: DataConfig, par: Parallel, v: Vocabularies) -> ParallelIds:
    """Token ids of the training pairs (:func:`load_training`), pairs longer than
    ``data.max_len`` skipped. With ``data.directions`` (``par.parts``: one block per
    direction) each direction is encoded apart, and each epoch samples the directions by
    ``data.direction_temperature`` (:class:`~nmtkit.data.multilingual.SampledIds`)."""
    if not par.parts:
        return encode_parallel(cfg, par, v, drop_long=True)
    src: list[np.ndarray] = []
    tgt: list[np.ndarray] = []
    sizes: list[int] = []
    start = 0
    for d, n in zip(directions(cfg), par.parts, strict=True):
        block = zip(par.src[start:start + n], par.tgt[start:start + n], strict=True)
        before = len(src)
        for s, t in encode_pairs(cfg, block, v, drop_long=True, name=f"{par.name} ({d.name})"):
            src.append(s)
            tgt.append(t)
        sizes.append(len(src) - before)
        start += n
    counts = temperature_counts(sizes, cfg.direction_temperature)
    for d, n, c in zip(directions(cfg), sizes, counts, strict=True):
        log.info("direction %s (%s): %d training pairs, %d per epoch (data.direction_temperature "
                 "%g)", d.name, d.tag, n, c, cfg.direction_temperature)
    return SampledIds(src, tgt, sizes, counts)


def load_split(cfg: DataConfig, role: str) -> Parallel:
    """role: train | valid | test -> the configured split of the corpus."""
    return load_parallel(cfg, getattr(cfg, role))


# ---------------------------------------------------------------------------
# More training pairs: data.extra (back-translation)

EXTRA_SEED = 20190801
"""Seed of the sample that a fractional ``data.extra`` weight keeps (fixed: same data, same
sample)."""


MAX_WEIGHTED_EXTRA_PAIRS = 100_000_000
"""The most pairs one ``data.extra`` corpus may give after its weight (weight x pairs).

``data.extra`` is read into memory (it needs ``data.mmap: false``) and every repeat is a
pair of the in-memory training set: 10^8 pairs are gigabytes of references and token ids,
more than a back-translated corpus of any real size times a sensible weight (a few copies),
so a larger product is a typo (``weight: 1e9`` grew memory without bound) and is refused
when the corpus is read, before any copy is made."""


def extra_tags(cfg: DataConfig) -> frozenset[str]:
    """The source tags of ``data.extra`` and the target-language tokens of ``data.directions``
    (:mod:`nmtkit.data.multilingual`); empty when nothing is tagged."""
    return frozenset(e.tag for e in cfg.extra if e.tag) | direction_tags(cfg)


def split_tag(text: str, tags: frozenset[str]) -> tuple[str | None, str]:
    """(the tag that starts ``text``, the rest): a tagged source is ``"<tag> text"`` in the
    training pairs, and the tag becomes one source token whatever the tokenizer (it is never
    segmented, nor seen by tokenizer training)."""
    if tags:
        head, sep, rest = text.partition(" ")
        if sep and head in tags:
            return head, rest
    return None, text


def weighted_indices(n: int, weight: float, seed: int = EXTRA_SEED) -> list[int]:
    """Indices 0..n-1 taken ``weight`` times: every one ``int(weight)`` times, then a seeded
    sample (in order) of ``round(frac * n)`` more for the fractional part."""
    whole = int(weight)
    extra = round((weight - whole) * n)
    sample = sorted(random.Random(seed).sample(range(n), min(extra, n)))
    return list(range(n)) * whole + sample


def load_extra(cfg: DataConfig, entry: ExtraCorpus, index: int = 0) -> Parallel:
    """One ``data.extra`` corpus (``data.extra[index]``): its pairs (empty sides dropped)
    weighted, tagged; refused when the weight would make more than
    :data:`MAX_WEIGHTED_EXTRA_PAIRS` of them."""
    as_parallel = dataclasses.replace(cfg, corpus="parallel", train=entry.path, extra=())
    par = load_parallel(as_parallel, entry.path)  # the training split's rules: no empty side
    if entry.weight * len(par) > MAX_WEIGHTED_EXTRA_PAIRS:
        raise ConfigError(f"data.extra[{index}].weight {entry.weight:g} x {len(par)} pairs of "
                          f"{entry.path} is {entry.weight * len(par):.3g} pairs, more than the "
                          f"{MAX_WEIGHTED_EXTRA_PAIRS:,} held in memory at most: use a smaller "
                          "weight (2 repeats every pair)")
    keep = weighted_indices(len(par), entry.weight)
    head = f"{entry.tag} " if entry.tag else ""
    log.info("data.extra %s: %d pairs, weight %g -> %d%s", entry.path, len(par), entry.weight,
             len(keep), f", tagged {entry.tag}" if entry.tag else "")
    return Parallel([head + par.src[i] for i in keep], [par.tgt[i] for i in keep],
                    f"{entry.path} (data.extra)", par.skipped_empty)


def load_training(cfg: DataConfig) -> Parallel:
    """The training split, then the pairs of every ``data.extra`` corpus after it; with
    ``data.directions`` the training split in each direction, tagged, one after the other."""
    if cfg.directions:
        return join(load_directed(cfg, cfg.train))
    par = load_split(cfg, "train")
    if not cfg.extra:
        return par
    src, tgt = list(par.src), list(par.tgt)
    for index, entry in enumerate(cfg.extra):
        more = load_extra(cfg, entry, index)
        src += more.src
        tgt += more.tgt
    log.info("training pairs: %d from %s, %d from data.extra", len(par), par.name, len(src) - len(par))
    return Parallel(src, tgt, par.name, par.skipped_empty)


def check_tags(cfg: DataConfig, v: Vocabularies) -> None:
    """Every ``data.extra`` tag (and ``data.directions`` token) is a token of the source
    vocabulary (a vocabulary built with the tags holds them; one taken from a checkpoint,
    ``--init-from``, may not)."""
    missing = sorted(t for t in extra_tags(cfg) if t not in v.src_vocab)
    if missing and cfg.directions:
        raise ConfigError(f"data.directions: the target-language token(s) {', '.join(missing)} "
                          "are not in the source vocabulary (taken from the checkpoint): they "
                          "would read as <unk>; fine-tune from a parent trained with them")
    if missing:
        raise ConfigError(f"data.extra.tag {', '.join(missing)} is not in the source vocabulary "
                          "(taken from the checkpoint): it would read as <unk>; use a tag the "
                          "parent model was trained with, or tag: \"\" (untagged)")
