"""How sure the model was of a translation: token probabilities and source coverage.

Two signals for a reader of one translation (the web page's confidence view, ``POST
/v1/translate`` with ``"confidence": true``), both from numbers the decoder already has:

- **low-probability tokens**: ``P(y_t | y_<t, x) = exp(log P)``, the model's probability of
  each output token (and of ``</s>``) as the search chose it; a token under
  :data:`LOW_PROBABILITY` is one the model hesitated over.
- **possible omissions**: the *coverage* of source token i, the attention it received over
  the whole output, ``c_i = (S + 1) / T * sum_t a[t, i]`` (``a``: the source attention of
  the alignment layer, heads averaged unless a head is named, over the T output tokens'
  rows; S + 1 columns: the source tokens and ``</s>``). Each row sums to 1, so attention
  spread evenly gives every column c = 1. A source token under :data:`LOW_COVERAGE` was
  hardly looked at while translating, the signal that coverage models use to find source
  words left untranslated (Tu et al. 2016, "Modeling Coverage for Neural Machine
  Translation", Sec. 3). Attention is not alignment: this flags *possible* omissions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .translation import Translation

LOW_PROBABILITY = 0.5
"""Default mark: an output token whose probability is below 0.5, i.e. the model gave the other
tokens together more mass than the one it chose."""

LOW_COVERAGE = 0.3
"""Default flag: a source token that received less than 0.3 of an even share of the attention
over the output (1 = even)."""


@dataclass
class Confidence:
    """The confidence view of one translation (each list in token order)."""

    token_probs: list[float]
    """P of each output token and of ``</s>`` (len(tokens) + 1 values): exp(log P)."""
    low_probability: list[bool]
    """``token_probs[t] < low_probability_threshold``."""
    coverage: list[float]
    """Per source token (``</s>`` not included): attention received over the output tokens,
    1 = an even share."""
    possible_omissions: list[bool]
    """``coverage[i] < low_coverage_threshold``."""
    low_probability_threshold: float
    low_coverage_threshold: float


def coverage(attention: np.ndarray, n_src: int, n_tgt: int) -> list[float]:
    """``c_i = (n_src + 1) / n_tgt * sum_{t < n_tgt} a[t, i]`` for the ``n_src`` source tokens.

    attention: (>= n_tgt, >= n_src + 1), row t the source attention of output step t, columns
    the source tokens then ``</s>`` (padding after them is ignored). The ``</s>`` row (the step
    that ends the output) is not counted. With no output tokens every coverage is 0.
    """
    if n_tgt == 0:
        return [0.0] * n_src
    a = np.asarray(attention[:n_tgt, : n_src + 1], dtype=np.float64)  # (n_tgt, n_src + 1)
    received = a.sum(axis=0) * (n_src + 1) / n_tgt  # (n_src + 1,)
    return [float(c) for c in received[:n_src]]


def confidence(token_log_probs: Sequence[float], attention: np.ndarray, n_src: int, n_tgt: int,
               low_probability: float = LOW_PROBABILITY,
               low_coverage: float = LOW_COVERAGE) -> Confidence:
    """The :class:`Confidence` of a translation of ``n_tgt`` tokens of a source of ``n_src``.

    token_log_probs: log P of each output token and of ``</s>`` (``n_tgt + 1`` values, as
    :attr:`nmtkit.decode.translation.Translation.token_log_probs`); attention: as in
    :func:`coverage` (:attr:`~nmtkit.decode.translation.Translation.attention`).
    """
    if len(token_log_probs) != n_tgt + 1:
        raise ValueError(f"{len(token_log_probs)} token log-probabilities for {n_tgt} tokens: "
                         "expected one per token and one for </s>")
    if attention.ndim != 2 or attention.shape[0] < n_tgt or attention.shape[1] < n_src + 1:
        raise ValueError(f"attention of shape {tuple(attention.shape)} for {n_tgt} output and "
                         f"{n_src} source tokens: expected (>= {n_tgt}, >= {n_src + 1})")
    probs = [math.exp(lp) for lp in token_log_probs]
    cov = coverage(attention, n_src, n_tgt)
    return Confidence(probs, [p < low_probability for p in probs], cov,
                      [c < low_coverage for c in cov], low_probability, low_coverage)


def translation_confidence(t: Translation, low_probability: float = LOW_PROBABILITY,
                           low_coverage: float = LOW_COVERAGE) -> Confidence:
    """:func:`confidence` of a :class:`~nmtkit.decode.translation.Translation` decoded with
    ``token_scores`` and ``need_attention``; an empty one (an empty source line) has empty
    lists."""
    if not t.src_tokens:
        return Confidence([], [], [], [], low_probability, low_coverage)
    if t.token_log_probs is None or t.attention is None:
        raise ValueError("confidence needs a translation decoded with token_scores=True and "
                         "need_attention=True")
    return confidence(t.token_log_probs, t.attention, len(t.src_tokens), len(t.tokens),
                      low_probability, low_coverage)
