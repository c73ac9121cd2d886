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

Right-to-left models (``--r2l-model``, trained with ``data.reverse_target``: they write a
translation last token first) add a second view of the candidate in the same direction,
seen from its end (Sennrich et al. 2016's right-to-left rescoring; Liu et al. 2016): a left-
to-right search commits to its first words before it sees how the sentence ends, and a
candidate whose end reads badly scores low from there. Each adds

    + v * (1 / (|y| + 1)) * log P_r2l(reversed(y) | x)

(``</s>`` included; several: their mean), ``v`` being ``decode.r2l_weight``. Either kind of
model may rerank alone or both together; both are held by one :class:`ReverseScorer`, as
each reads the candidate the other way round (from the other language, or from its end);
:func:`nmtkit.decode.reverse_models.reverse_scorer` builds one from checkpoints.

The output is always one of the candidates; the list comes back in reranked order, each
with its ``reverse_log_prob`` (and ``r2l_log_prob``) and ``rerank_score``; a line with
constraints keeps those that contain every phrase first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np
import torch

from ..config import DecodeConfig
from ..data.batching import pad_batch, pad_mask
from ..data.tokenizers import Tokenizer
from ..data.vocab import BOS, PAD, Vocab
from ..models.seq2seq import Seq2Seq, target_mask
from .translation import Translation


class ScoringModel(Protocol):
    """What reranking reads of a model with its text pipeline: a
    :class:`~nmtkit.decode.translator.Translator` is one. Reranking sits below the translator
    (which calls it), so it names only what it uses."""

    model: Seq2Seq
    device: torch.device
    tgt_tok: Tokenizer
    tgt_vocab: Vocab
    max_positions: int | None

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """The source tokens of ``line`` and its ids (``</s>`` included)."""
        ...


class ReverseScorer:
    """The models that rerank candidates by reading them the other way round.

    ``translators``: models trained in the reverse direction, for log P(x | y) of source lines
    given candidate translations (each a :class:`ScoringModel`, such as an nmtkit
    :class:`~.translator.Translator`, whose tokenizers and vocabularies read the candidate as
    its source and the source line as its target). ``tgt_langs``: per translator, the language
    to ask it for when it is a model of several directions (the forward model's source
    language), ``None`` for a model of one direction; all ``None`` when not given. ``r2l``:
    right-to-left models of the forward direction (``data.reverse_target``), for log P(y | x)
    read from the candidate's end; ``r2l_tgt_langs``: their target language where they have
    several. At least one model of either kind."""

    def __init__(self, translators: Sequence[ScoringModel],
                 tgt_langs: Sequence[str | None] | None = None, batch_size: int = 128, *,
                 r2l: Sequence[ScoringModel] = (),
                 r2l_tgt_langs: Sequence[str | None] | None = None) -> None:
        if not translators and not r2l:
            raise ValueError("reranking needs at least one reverse or right-to-left model")
        self.translators = list(translators)
        self.tgt_langs = list(tgt_langs) if tgt_langs is not None else [None] * len(translators)
        self.r2l = list(r2l)
        """Right-to-left models of the forward direction (may be empty)."""
        self.r2l_tgt_langs = (list(r2l_tgt_langs) if r2l_tgt_langs is not None
                              else [None] * len(self.r2l))
        for langs, models, what in ((self.tgt_langs, self.translators, "reverse"),
                                    (self.r2l_tgt_langs, self.r2l, "right-to-left")):
            if len(langs) != len(models):
                raise ValueError(f"{len(langs)} target languages for {len(models)} {what} models")
        self.batch_size = batch_size
        """Pairs per teacher-forced pass."""

    def _target_ids(self, tr: ScoringModel, line: str) -> np.ndarray:
        """The reverse model's target ids of a source line: its tokens, cut to the position
        table, then ``</s>``."""
        toks = tr.tgt_tok.encode(line.strip())
        if tr.max_positions is not None:
            toks = toks[:tr.max_positions - 1]
        return np.asarray(tr.tgt_vocab.encode(toks, add_eos=True), dtype=np.int64)

    @torch.no_grad()
    def _one_model(self, tr: ScoringModel, tgt_lang: str | None, candidates: Sequence[str],
                   sources: Sequence[str]) -> list[float]:
        """Per pair, the mean log-probability of a ``sources`` line's tokens and ``</s>``
        under ``tr`` reading a ``candidates`` line (a reverse model)."""
        srcs = [tr.encode_source(c, tgt_lang)[1] for c in candidates]
        tgts = [self._target_ids(tr, s) for s in sources]
        return self._teacher_forced(tr, srcs, tgts)

    @torch.no_grad()
    def _one_r2l_model(self, tr: ScoringModel, tgt_lang: str | None,
                       candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """Per pair, the mean log-probability of a ``candidates`` line's tokens, last first,
        then ``</s>``, under ``tr`` (a right-to-left model) reading the ``sources`` line."""
        srcs = [tr.encode_source(s, tgt_lang)[1] for s in sources]
        tgts = []
        for c in candidates:
            ids = self._target_ids(tr, c)  # y </s>
            tgts.append(np.concatenate([ids[:-1][::-1], ids[-1:]]))  # reversed(y) </s>
        return self._teacher_forced(tr, srcs, tgts)

    def _teacher_forced(self, tr: ScoringModel, srcs: Sequence[np.ndarray],
                        tgts: Sequence[np.ndarray]) -> list[float]:
        """Per (source ids, target ids ending in ``</s>``) pair, the mean log-probability
        ``tr``'s model gives the target ids, in batches of similar length."""
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
        return self._mean(self._one_model, self.translators, self.tgt_langs, candidates, sources)

    def score_r2l(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """``(1 / (|y| + 1)) log P_r2l(reversed(y) | x)`` for each (candidate ``y``, source
        line ``x``) pair: the right-to-left models' mean."""
        return self._mean(self._one_r2l_model, self.r2l, self.r2l_tgt_langs, candidates, sources)

    @staticmethod
    def _mean(one: Callable[[ScoringModel, str | None, Sequence[str], Sequence[str]], list[float]],
              models: Sequence[ScoringModel], langs: Sequence[str | None],
              candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        if len(candidates) != len(sources):
            raise ValueError(f"{len(candidates)} candidates vs {len(sources)} sources")
        if not candidates:
            return []
        if not models:
            raise ValueError("no model of this kind to score with")
        per_model = [one(tr, lang, candidates, sources)
                     for tr, lang in zip(models, langs, strict=True)]
        return [sum(col) / len(col) for col in zip(*per_model, strict=True)]


def require_reverse(cfg: DecodeConfig, reverse: ReverseScorer | None) -> None:
    """``ValueError`` if ``cfg`` asks for reranking and there is no model to rerank with."""
    if cfg.rerank and reverse is None:
        raise ValueError("decode.rerank needs a model of the reverse direction to score the "
                         "candidates: give one (--reverse-model; or a right-to-left model, "
                         "--r2l-model), or set decode.rerank to 0")


def rerank_score(t: Translation, cfg: DecodeConfig) -> float:
    """The beam's score plus ``cfg.reverse_weight`` times the reverse models' per-token
    log-probability and ``cfg.r2l_weight`` times the right-to-left models' (each where the
    candidate was scored by such models)."""
    assert t.reverse_log_prob is not None or t.r2l_log_prob is not None
    out = t.score
    if t.reverse_log_prob is not None:
        out += cfg.reverse_weight * t.reverse_log_prob
    if t.r2l_log_prob is not None:
        out += cfg.r2l_weight * t.r2l_log_prob
    return out


def choose(candidates: list[Translation], cfg: DecodeConfig) -> list[Translation]:
    """One line's candidates (each with its ``reverse_log_prob``) reordered by
    :func:`rerank_score` (best first; those missing a constraint phrase after those that
    have them all; ties in the search's order), each with its ``rerank_score``, cut to
    ``cfg.n_best``."""
    if not candidates or not any(c.tokens for c in candidates):  # an empty line stays empty
        return candidates[:cfg.n_best]
    scores = [rerank_score(c, cfg) for c in candidates]
    order = sorted(range(len(candidates)),
                   key=lambda i: (not candidates[i].constraints_met, -scores[i], i))
    return [replace(candidates[i], rerank_score=scores[i]) for i in order[:cfg.n_best]]


def with_reverse_scores(results: list[list[Translation]], sources: Sequence[str],
                        reverse: ReverseScorer) -> list[list[Translation]]:
    """Every line's candidates with their ``reverse_log_prob`` (with reverse models) and
    ``r2l_log_prob`` (with right-to-left models; ``sources``: the input lines), scored in
    one pass over all lines; a line with no candidate token stays as it is."""
    flat = [(i, j) for i, cs in enumerate(results) if any(c.tokens for c in cs)
            for j in range(len(cs))]
    texts, lines = [results[i][j].text for i, j in flat], [sources[i] for i, _ in flat]
    none: list[float | None] = [None] * len(flat)
    rev = reverse.score(texts, lines) if reverse.translators else none
    r2l = reverse.score_r2l(texts, lines) if reverse.r2l else none
    scored = [list(cs) for cs in results]
    for (i, j), v, w in zip(flat, rev, r2l, strict=True):
        scored[i][j] = replace(scored[i][j], reverse_log_prob=v, r2l_log_prob=w)
    return scored
