"""Reranking a beam's n best with a model of the reverse direction.

A translation model scores how likely an output is given the source, P(y | x). It does
not check the other way: whether the source could be read back from the output. A model
trained in the reverse direction does, P(x | y): it is low for a candidate that leaves part of
the source untranslated or adds what the source does not say. Reranking the n best of a
beam search by both (the direct and the *channel* model of the noisy-channel view; Yu et
al. 2017, Yee et al. 2019; the "right-to-left and target-to-source" rescoring of WMT systems,
e.g. Sennrich et al. 2016) picks the candidate they agree on:

    y* = argmax_{y in C}  s(y | x) + w * (1 / |x|) * log P_rev(x | y)

- ``C``: the candidates (``decode.rerank`` of them): the n best of a beam at least that wide
  (or that many samples with ``decode.sampling``);
- ``s(y | x)``: the beam's own score, log P(y | x) divided by the length penalty (so with
  ``w = 0`` the order is the beam's);
- ``log P_rev(x | y)``: the log-probability of the source line (``</s>`` included) under the
  reverse model reading the candidate, teacher-forced, divided by the number of source
  tokens it counts (the source is the same for every candidate: this only puts ``w`` on a
  per-token scale). Several reverse models: the mean of their scores. A model of several
  directions (``data.directions``) that has the reverse one is asked for the forward source
  language: one model trained both ways (``configs/multi30k_transformer_bidirectional.yaml``)
  reranks its own translations, with no second model to train.
- ``w``: ``decode.reverse_weight`` (3, chosen on val for Multi30k in both directions),
  or chosen on val with ``nmtkit tune --reverse-model ... --rerank 20``, which scores
  every weight of its grid from one search.

The output is always one of the candidates; the list comes back in reranked order, each
with its ``reverse_log_prob`` and ``rerank_score``; a line with constraints keeps those that
contain every phrase first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..data.batching import pad_batch
from ..data.vocab import BOS, PAD
from ..models.seq2seq import pad_mask, target_mask

if TYPE_CHECKING:
    from ..checkpoint import Bundle
    from ..config import DecodeConfig
    from ..data.multilingual import Direction
    from .translator import Translation, Translator


class ReverseScorer:
    """log P(x | y) of source lines given candidate translations, with one or more models
    trained in the reverse direction (each an nmtkit :class:`~.translator.Translator`, whose
    tokenizers and vocabularies read the candidate as its source and the source line as its
    target). ``tgt_langs``: per translator, the language to ask it for when it is a model of
    several directions (the forward model's source language), ``None`` for a model of one
    direction; all ``None`` when not given."""

    def __init__(self, translators: Sequence[Translator],
                 tgt_langs: Sequence[str | None] | None = None, batch_size: int = 128) -> None:
        if not translators:
            raise ValueError("reranking needs at least one reverse model")
        self.translators = list(translators)
        self.tgt_langs = list(tgt_langs) if tgt_langs is not None else [None] * len(translators)
        if len(self.tgt_langs) != len(self.translators):
            raise ValueError(f"{len(self.tgt_langs)} target languages for "
                             f"{len(self.translators)} reverse models")
        self.batch_size = batch_size
        """Pairs per teacher-forced pass."""

    def _target_ids(self, tr: Translator, line: str) -> np.ndarray:
        """The reverse model's target ids of a source line: its tokens, cut to the position
        table, then ``</s>``."""
        toks = tr.tgt_tok.encode(line.strip())
        if tr.max_positions is not None:
            toks = toks[:tr.max_positions - 1]
        return np.asarray(tr.tgt_vocab.encode(toks, add_eos=True), dtype=np.int64)

    @torch.no_grad()
    def _one_model(self, tr: Translator, tgt_lang: str | None, candidates: Sequence[str],
                   sources: Sequence[str]) -> list[float]:
        srcs = [tr.encode_source(c, tgt_lang)[1] for c in candidates]
        tgts = [self._target_ids(tr, s) for s in sources]
        out = [0.0] * len(srcs)
        order = sorted(range(len(srcs)), key=lambda i: (len(srcs[i]), len(tgts[i])))
        for at in range(0, len(order), self.batch_size):
            rows = order[at:at + self.batch_size]
            src = pad_batch([srcs[i] for i in rows]).to(tr.device)  # (batch, S)
            tgt_out = pad_batch([tgts[i] for i in rows]).to(tr.device)  # (batch, T): y </s>
            tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], BOS), tgt_out[:, :-1]], dim=1)  # <s> y
            log_probs = tr.model(src, pad_mask(src), tgt_in, target_mask(tgt_in))  # (batch, T, V)
            picked = log_probs.float().gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (batch, T)
            real = tgt_out != PAD
            per_token = (picked * real).sum(dim=1) / real.sum(dim=1)  # (batch,)
            for i, value in zip(rows, per_token.tolist(), strict=True):
                out[i] = value
        return out

    def score(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """``(1 / |x|) log P(x | y)`` for each (candidate ``y``, source line ``x``) pair: the
        mean log-probability of the source's tokens and ``</s>`` (the reverse models' mean)."""
        if len(candidates) != len(sources):
            raise ValueError(f"{len(candidates)} candidates vs {len(sources)} sources")
        if not candidates:
            return []
        per_model = [self._one_model(tr, lang, candidates, sources)
                     for tr, lang in zip(self.translators, self.tgt_langs, strict=True)]
        return [sum(col) / len(col) for col in zip(*per_model, strict=True)]


def reverse_scorer(bundles: Sequence[Bundle], forward: Direction,
                   names: Sequence[str] | None = None) -> ReverseScorer:
    """A :class:`ReverseScorer` of loaded checkpoints (``names``: their files, for errors)
    for a forward model translating ``forward`` (its ``src`` -> ``tgt``). A model of one
    direction must translate ``tgt`` -> ``src``; a model of several directions
    (``data.directions``) must have that direction among them, and is asked for ``src``:
    so one model trained both ways (``[de-en, en-de]``) can rerank its own translations.
    ``ValueError`` naming the file otherwise."""
    from ..data.multilingual import Direction, directions

    shown = list(names) if names is not None else [str(b.path) for b in bundles]
    back = Direction(forward.tgt, forward.src)
    need = (f"a reverse model for a {forward.src}->{forward.tgt} model must translate "
            f"{back.src}->{back.tgt}")
    tags: list[str | None] = []
    for b, name in zip(bundles, shown, strict=True):
        data = b.cfg.data
        if data.directions:
            if back not in directions(data):
                raise ValueError(f"{name} translates {', '.join(data.directions)}: {need}")
            tags.append(back.tgt)
        else:
            if (data.src_lang, data.tgt_lang) != (back.src, back.tgt):
                raise ValueError(f"{name} translates {data.src_lang}->{data.tgt_lang}: {need}")
            tags.append(None)
    return ReverseScorer([b.translator() for b in bundles], tags)


def require_reverse(cfg: DecodeConfig, reverse: ReverseScorer | None) -> None:
    """``ValueError`` if ``cfg`` asks for reranking and there is no reverse model."""
    if cfg.rerank and reverse is None:
        raise ValueError("decode.rerank needs a model of the reverse direction to score the "
                         "candidates: give one (--reverse-model), or set decode.rerank to 0")


def rerank_score(t: Translation, weight: float) -> float:
    """The beam's score plus ``weight`` times the reverse model's per-token log-probability."""
    assert t.reverse_log_prob is not None
    return t.score + weight * t.reverse_log_prob


def choose(candidates: list[Translation], cfg: DecodeConfig) -> list[Translation]:
    """One line's candidates (each with its ``reverse_log_prob``) reordered by
    :func:`rerank_score` (best first; those missing a constraint phrase after those that
    have them all; ties in the search's order), each with its ``rerank_score``, cut to
    ``cfg.n_best``."""
    if not candidates or not any(c.tokens for c in candidates):  # an empty line stays empty
        return candidates[:cfg.n_best]
    scores = [rerank_score(c, cfg.reverse_weight) for c in candidates]
    order = sorted(range(len(candidates)),
                   key=lambda i: (not candidates[i].constraints_met, -scores[i], i))
    return [replace(candidates[i], rerank_score=scores[i]) for i in order[:cfg.n_best]]


def with_reverse_scores(results: list[list[Translation]], sources: Sequence[str],
                        reverse: ReverseScorer) -> list[list[Translation]]:
    """Every line's candidates with their ``reverse_log_prob`` (``sources``: the input lines),
    scored in one pass over all lines; a line with no candidate token stays as it is."""
    flat = [(i, j) for i, cs in enumerate(results) if any(c.tokens for c in cs)
            for j in range(len(cs))]
    values = reverse.score([results[i][j].text for i, j in flat], [sources[i] for i, _ in flat])
    scored = [list(cs) for cs in results]
    for (i, j), v in zip(flat, values, strict=True):
        scored[i][j] = replace(scored[i][j], reverse_log_prob=v)
    return scored
