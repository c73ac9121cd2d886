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
model may rerank alone or both together; both are held by one
:class:`~nmtkit.decode.reverse_models.ReverseScorer`, as each reads the candidate the other
way round (from the other language, or from its end);
:func:`nmtkit.decode.reverse_models.reverse_scorer` builds one from checkpoints. This module
holds the choice (plain Python: a translator imports it without PyTorch), that one the
models.

The output is always one of the candidates; the list comes back in reranked order, each
with its ``reverse_log_prob`` (and ``r2l_log_prob``) and ``rerank_score``; a line with
constraints keeps those that contain every phrase first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ..errors import UserError

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from .translation import Translation


class Reranker(Protocol):
    """What reranking reads of the models that score the candidates
    (:class:`nmtkit.decode.reverse_models.ReverseScorer` is one): named here, so that the
    choice needs neither the models nor PyTorch."""

    @property
    def translators(self) -> Sequence[object]:
        """The reverse models (may be empty)."""
        ...

    @property
    def r2l(self) -> Sequence[object]:
        """The right-to-left models (may be empty)."""
        ...

    def score(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """The reverse models' per-token log P(source | candidate) of each pair."""
        ...

    def score_r2l(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """The right-to-left models' per-token log P(candidate read from its end | source)."""
        ...


def require_reverse(cfg: DecodeConfig, reverse: Reranker | None) -> None:
    """``ValueError`` if ``cfg`` asks for reranking and there is no model to rerank with."""
    if cfg.rerank and reverse is None:
        raise UserError("decode.rerank needs a model of the reverse direction to score the "
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
                        reverse: Reranker) -> list[list[Translation]]:
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
