"""The decoding rules every engine follows, in one place and without PyTorch: the PyTorch
searches (:mod:`nmtkit.decode.search`, :mod:`nmtkit.decode.constraints`), the numpy search
(:mod:`nmtkit.lite.search`), the CTranslate2 engine
(:mod:`nmtkit.export.ctranslate2_engine`), the server's checks (:mod:`nmtkit.serve.checks`)
and the CTranslate2 export's plain snippet (:mod:`nmtkit.export.ctranslate2`).

- **Output length** (:func:`output_cap`): at most ``floor(max_len_a * S + max_len_b)``
  output tokens, ``</s>`` included, where ``S`` counts the source's tokens *and* its
  ``</s>`` (the ids the encoder reads); at least 1 (``</s>`` alone); with an absolute
  ``max_length`` (tokens before ``</s>``), at most ``max_length + 1``. The rule is fairseq's
  ``max_len_a * src_len + max_len_b`` (Ott et al. 2019, ``SequenceGenerator``), computed
  *exactly* on the numbers as written: ``max_len_a`` is the decimal its ``repr`` shows
  (``1.2`` is 6/5), so ``floor`` sees the value a user computes by hand. Binary floating
  point does not: in float64 ``2.3 * 100`` is 229.99999999999997 (cap 229, not 230), in
  float32 ``1.3 * 90 + 5`` is 121.99999 (121, not 122). nmtkit's default (1.2, 10) gives
  the same caps in all three for every source up to 100,000 tokens, so no default
  translation changes.
- **Length penalty** (:func:`length_penalty`): GNMT's
  ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, Sec. 7, Eq. 14; ``|Y|`` counts
  ``</s>``); a hypothesis is ranked by its length-normalised score ``log P(Y) / lp(Y)``
  (Eq. 14 without the coverage penalty, ``beta = 0``), both while the beam chooses its
  slots and among the ended hypotheses at the end.
- **Ranking** (:func:`best_first`): the ended hypotheses by normalised score, highest
  first, ties in beam-slot order.
- **Never produced** (:data:`NEVER`): ``<pad>`` and ``<s>``.
- **A result** (:class:`Hypothesis`): one record for every engine; only the type of its
  optional attention differs (a tensor from PyTorch's search, an array from numpy's).

This module imports nothing of PyTorch or numpy (a test imports it alone), so the numpy
engine's cold start and the CTranslate2 engine use it without either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .data.vocab import BOS, PAD

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

NEVER: tuple[int, ...] = (PAD, BOS)
"""Target ids a hypothesis may never produce: ``<pad>`` (not a token) and ``<s>`` (only
the start)."""

A = TypeVar("A")
"""The type of a hypothesis's attention: ``torch.Tensor`` or ``numpy.ndarray``."""


@dataclass
class Hypothesis(Generic[A]):
    """One output of a search: ``tokens`` (without ``<s>``/``</s>``), its ranking ``score``
    (``log_prob / length_penalty(len(tokens) + 1)`` for beam search, ``log_prob`` for greedy
    search), ``log_prob`` (``</s>`` included)."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: A | None = None
    """With ``need_attention``: (len(tokens) + 1, S) the source attention of each output
    step (the last decoder layer's, heads averaged)."""
    token_log_probs: list[float] | None = None
    """With ``token_scores``: log P of each token and of ``</s>`` (len(tokens) + 1 values,
    summing to ``log_prob``)."""
    constraints_met: bool = True
    """Whether the output contains every constraint phrase of its sentence (no constraints:
    true). Only the length cap makes a constrained search end without them
    (:mod:`nmtkit.decode.constraints`)."""


@lru_cache(maxsize=64)
def _exact(x: float) -> Fraction:
    """``x`` as the decimal it is written as (``repr``): 1.2 -> 6/5, not 1.19999..."""
    return Fraction(repr(float(x))) if isinstance(x, float) else Fraction(x)


def output_cap(source_len: int, max_len_a: float, max_len_b: float,
               max_length: int | None = None) -> int:
    """The most output tokens (``</s>`` included) for a source of ``source_len`` ids
    (``</s>`` included): ``floor(max_len_a * source_len + max_len_b)`` computed exactly (see
    the module), at least 1, and at most ``max_length + 1`` when ``max_length`` (tokens
    before ``</s>``) is given. A search forces ``</s>`` at the cap."""
    cap = max(math.floor(_exact(max_len_a) * source_len + _exact(max_len_b)), 1)
    return cap if max_length is None else min(cap, max_length + 1)


def output_cap_source(max_len_a: float, max_len_b: float, source_len: str) -> str:
    """:func:`output_cap` (no ``max_length``) as a Python expression in integers, for a
    script that runs without nmtkit: ``source_len`` is the expression of the source's ids
    (``</s>`` included), e.g. ``"len(tokens) + 1"``. ``1.2, 10`` ->
    ``max(1, (6 * (len(tokens) + 1) + 50) // 5)``."""
    a, b = _exact(max_len_a), _exact(max_len_b)
    q = math.lcm(a.denominator, b.denominator)  # a * S + b == (pa * S + pb) // q, exactly
    pa, pb = a.numerator * (q // a.denominator), b.numerator * (q // b.denominator)
    value = f"{pa} * ({source_len}) + {pb}" if pb else f"{pa} * ({source_len})"
    return f"max(1, {value})" if q == 1 else f"max(1, ({value}) // {q})"


@overload
def length_penalty(length: Tensor, alpha: float) -> Tensor: ...
@overload
def length_penalty(length: np.ndarray, alpha: float) -> np.ndarray: ...
@overload
def length_penalty(length: float, alpha: float) -> float: ...
def length_penalty(length: Any, alpha: float) -> Any:
    """GNMT's length penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, Sec. 7,
    Eq. 14) of a length (``</s>`` included), or elementwise of a tensor or array of them,
    computed in the precision given: PyTorch's and numpy's searches pass float32 lengths,
    a Python number computes in float64."""
    return ((5.0 + length) / 6.0) ** alpha


def best_first(final_scores: Sequence[float], n: int) -> list[int]:
    """The indices of the ``n`` best of a beam's final (length-normalised) scores, highest
    first; ties keep the beam's slot order (a stable sort), so every engine ranks equal
    scores alike."""
    return sorted(range(len(final_scores)), key=lambda j: -final_scores[j])[:n]
