"""Minimum Bayes risk (MBR) decoding: of several candidate translations, the one the others
agree with most.

Beam search looks for the most probable output (the *mode* of the model's distribution).
MBR decoding (Kumar & Byrne 2004; for NMT Eikema & Aziz 2020, Freitag et al. 2022) looks
for the candidate with the highest *expected utility* under the model instead:

    y* = argmax_{h in C}  sum_{y in C}  w(y) * U(h, y)

- ``C``, the candidates (``decode.mbr`` of them): the n best of a beam search as wide as
  that (``decode.beam`` if wider), or, with ``decode.sampling``, that many samples;
- ``U(h, y)``, a sentence-level similarity of ``h`` to ``y`` taken as the reference
  (``decode.mbr_utility``): :func:`bleu_plus_one` or :func:`chrf`;
- ``w(y)``, the weight of ``y`` as the true translation: samples count 1 each (they are
  draws from the model: a Monte Carlo estimate of the expectation); the n best of a beam
  search count their model probability raised to ``decode.mbr_scale`` and renormalised over
  the list, ``w(y) ~ P(y | x) ** scale`` (0: the same weight for each, 1: the model's own
  posterior restricted to the list, larger: closer to the beam's own choice).

The translation chosen is one of the candidates, so MBR never writes a sentence the search
did not find; it trades the single most probable one for the one in the middle of the
likely ones, which is what a corpus metric such as BLEU rewards. The candidates come back
ordered by expected utility (best first, ties in the search's order), each with its
``mbr_utility``; a line with constraints keeps those that contain every phrase first.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config import MBR_UTILITIES as UTILITIES
from ..errors import UserError

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from .translation import Translation

BLEU_ORDER = 4
CHRF_ORDER = 6
CHRF_BETA = 2.0


class _Grams:
    """A text's n-gram counts for orders 1..``order`` (words for BLEU, characters for chrF)."""

    __slots__ = ("counts", "totals")

    def __init__(self, units: Sequence[str], order: int) -> None:
        self.counts = [Counter(tuple(units[i:i + n]) for i in range(len(units) - n + 1))
                       for n in range(1, order + 1)]
        self.totals = [max(len(units) - n + 1, 0) for n in range(1, order + 1)]

    def matches(self, other: _Grams) -> list[int]:
        """Clipped n-gram matches per order: sum over this text's n-grams of min(count here,
        count there) (BLEU's modified precision numerator, Papineni et al. 2002, Sec. 2.1)."""
        out = []
        for mine, theirs in zip(self.counts, other.counts, strict=True):
            if len(theirs) < len(mine):  # iterate over the smaller table
                mine, theirs = theirs, mine
            out.append(sum(min(c, theirs[g]) for g, c in mine.items() if g in theirs))
        return out


def bleu_plus_one(hyp: _Grams, ref: _Grams) -> float:
    """Sentence BLEU with add-one smoothing of the 2- to 4-gram precisions ("BLEU+1", Lin &
    Och 2004), in [0, 1]: ``BP * exp(mean_n log p_n)``, ``p_1 = m_1 / c_1``,
    ``p_n = (m_n + 1) / (c_n + 1)`` for n > 1, ``BP = min(1, exp(1 - r / c))`` (``c``, ``r``:
    hypothesis and reference lengths in words). 0 when no word matches."""
    c, r = hyp.totals[0], ref.totals[0]
    m = hyp.matches(ref)
    if c == 0 or m[0] == 0:
        return 1.0 if c == r == 0 else 0.0
    log_p = math.log(m[0] / c) + sum(math.log((m[n] + 1) / (hyp.totals[n] + 1))
                                     for n in range(1, BLEU_ORDER))
    brevity = min(0.0, 1.0 - r / c)
    return math.exp(brevity + log_p / BLEU_ORDER)


def chrf(hyp: _Grams, ref: _Grams) -> float:
    """chrF (Popović 2015), in [0, 1]: character 1- to 6-gram precision and recall (spaces
    removed), each averaged over the orders that both texts are long enough for, combined as
    ``F_beta = (1 + beta^2) P R / (beta^2 P + R)`` with beta 2 (recall weighs more)."""
    m = hyp.matches(ref)
    orders = [n for n in range(CHRF_ORDER) if hyp.totals[n] and ref.totals[n]]
    if not orders:
        return 1.0 if hyp.totals[0] == ref.totals[0] == 0 else 0.0
    p = sum(m[n] / hyp.totals[n] for n in orders) / len(orders)
    r = sum(m[n] / ref.totals[n] for n in orders) / len(orders)
    if p + r == 0:
        return 0.0
    b2 = CHRF_BETA ** 2
    return (1 + b2) * p * r / (b2 * p + r)


def _grams(text: str, utility: str) -> _Grams:
    if utility == "bleu":
        from ..evaluate import word_punct_tokens  # here: sacreBLEU's import only when MBR runs

        return _Grams(word_punct_tokens(text), BLEU_ORDER)
    return _Grams(list("".join(text.split())), CHRF_ORDER)


UTILITY: dict[str, Callable[[_Grams, _Grams], float]] = {"bleu": bleu_plus_one, "chrf": chrf}


def utility_matrix(texts: Sequence[str], utility: str = "bleu") -> list[list[float]]:
    """``U[i][j]``: the utility of ``texts[i]`` taken as the hypothesis against ``texts[j]``
    taken as the reference (``utility``: one of :data:`UTILITIES`)."""
    if utility not in UTILITIES:
        raise UserError(f"MBR utility {utility!r}: choose one of {', '.join(UTILITIES)}")
    score = UTILITY[utility]
    grams = [_grams(t, utility) for t in texts]
    return [[score(h, r) for r in grams] for h in grams]


def weights(log_probs: Sequence[float] | None, n: int, scale: float) -> list[float]:
    """The candidates' weights, summing to 1: ``exp(scale * log P)`` renormalised (computed
    from the largest down, so that no term underflows to a sum of 0); the same for each
    when ``log_probs`` is ``None`` (samples) or ``scale`` is 0."""
    if log_probs is None or scale == 0:
        return [1.0 / n] * n
    top = max(log_probs)
    raw = [math.exp(scale * (lp - top)) for lp in log_probs]
    total = sum(raw)
    return [x / total for x in raw]


def expected_utilities(texts: Sequence[str], w: Sequence[float],
                       utility: str = "bleu") -> list[float]:
    """For each candidate ``h``: ``sum_j w[j] * U(h, texts[j])``. Equal texts are scored
    once (samples repeat), their weights added."""
    unique: dict[str, float] = {}
    for t, wt in zip(texts, w, strict=True):
        unique[t] = unique.get(t, 0.0) + wt
    keys = list(unique)
    u = utility_matrix(keys, utility)
    by_text = {t: sum(unique[keys[j]] * u[i][j] for j in range(len(keys)))
               for i, t in enumerate(keys)}
    return [by_text[t] for t in texts]


def choose(candidates: list[Translation], cfg: DecodeConfig) -> list[Translation]:
    """One line's candidates reordered by expected utility (best first; those missing a
    constraint phrase after those that have them all; ties in the search's order), each
    with its ``mbr_utility``, cut to ``cfg.n_best``."""
    if not candidates or not any(c.tokens for c in candidates):  # an empty line stays empty
        return candidates[:cfg.n_best]
    lps = [c.log_prob for c in candidates if c.log_prob is not None]
    known = None if cfg.sampling or len(lps) < len(candidates) else lps
    eu = expected_utilities([c.text for c in candidates],
                            weights(known, len(candidates), cfg.mbr_scale), cfg.mbr_utility)
    order = sorted(range(len(candidates)),
                   key=lambda i: (not candidates[i].constraints_met, -eu[i], i))
    return [replace(candidates[i], mbr_utility=eu[i]) for i in order[:cfg.n_best]]

