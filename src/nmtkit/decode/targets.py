"""Forced prefixes and constraint phrases, given per line, placed on the line's sentences.

The translator cuts a line into sentences (``decode.split_sentences``,
:mod:`nmtkit.decode.lines`), but a forced prefix and constraint phrases are given per line
(``--prefix-file``, ``--constraints-file``, the server's ``prefixes`` and ``constraints``).
Reading such a line whole would hand a model trained on single sentences a paragraph, which it
shortens to its first sentence; so the line is cut as any other, and what was given for it
goes to its sentences by two rules, neither of which drops a sentence, a prefix's word or a
phrase:

- **A prefix** starts the line's translation, so it starts the first sentence's. A prefix of
  several sentences (cut by the target language's rules) is shared out in order: its k-th
  sentence starts the translation of the line's k-th sentence, and the last sentence of the
  line takes whatever is left of it (:func:`prefix_pieces`). A prefix copied from an earlier
  translation of the same line (the web page's "keep the translation up to here") so gives
  each sentence its own part, and a one-sentence prefix, the usual case, stays whole on the
  first sentence. The search goes on after each part as after any prefix: a translation
  model ends a sentence given whole (it has its final stop), so the line's translation
  starts with the prefix; the whole prefix forced on the first sentence instead would make
  the model translate the second sentence twice, once inside the first.
- **A constraint phrase** has no source side: nothing says which sentence it translates. It
  goes where the model puts it most readily: to the first sentence whose unconstrained best
  translation already holds it, else to the sentence whose translation loses the least
  log-probability by holding it, found by searching each of the line's sentences with that
  phrase alone (:func:`least_cost`). Each phrase is then met once in the line, in the
  sentence it was placed in, searched with all the phrases placed there; the line's
  ``constraints_met`` says all were met. The placing costs one more search of the line's
  sentences per phrase that no free translation holds, and one constrained search of the
  sentences that got phrases; a line of one sentence is searched once, as before.

The search itself (:meth:`~nmtkit.decode.text_translator.TextTranslator.translate`) does the
passes; this module holds the rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..data.placeholders import find_spans
from ..data.sentences import sentence_bounds
from .lines import KEEP_WHOLE
from .translation import Translation


@dataclass
class SentenceTargets:
    """What each sentence of a call must start with (``prefixes``: target ids, ``None``: no
    prefix) and contain (``phrases``: target id sequences, ``None``: none), and the lines
    whose phrases still wait for a sentence (``pending``: (line, its sentences, its
    phrases))."""

    prefixes: list[list[int] | None]
    phrases: list[list[list[int]] | None]
    pending: list[tuple[int, list[int], list[list[int]]]] = field(default_factory=list)

    def of(self, ids: Sequence[int]) -> list[tuple[list[int] | None, list[list[int]] | None]]:
        """(prefix, phrases) of each sentence of ``ids``."""
        return [(self.prefixes[i], self.phrases[i]) for i in ids]


def prefix_pieces(prefix: str, n_sentences: int, lang: str) -> list[str]:
    """``prefix`` cut for a line of ``n_sentences`` sentences: its sentences in order
    (``lang``'s rules, :func:`~nmtkit.data.sentences.sentence_bounds`), at most
    ``n_sentences`` pieces, the last piece all the rest; piece k starts sentence k's
    translation. The pieces joined are ``prefix`` (nothing dropped); one piece, ``prefix``
    itself, for a line of one sentence or a prefix of one sentence."""
    if n_sentences <= 1 or not prefix.strip():
        return [prefix]
    keep = [(s.start, s.end) for s in find_spans(prefix) if s.kind in KEEP_WHOLE]
    cuts = [0, *sentence_bounds(prefix, lang, keep)][:n_sentences]
    return [prefix[a:b] for a, b in zip(cuts, [*cuts[1:], len(prefix)], strict=True)]


def holds(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    """Whether ``phrase`` occurs in ``tokens`` as a contiguous run."""
    n = len(phrase)
    return n > 0 and any(list(tokens[i:i + n]) == list(phrase) for i in range(len(tokens) - n + 1))


def least_cost(free: Sequence[Translation], tried: Sequence[Translation]) -> int:
    """The index of the sentence a phrase goes to: ``free[k]`` is sentence k's best
    translation without it, ``tried[k]`` its best translation with it; the one that loses
    the least log-probability (``score`` where an engine gives none) and still holds the
    phrase (only the output cap can keep it out), the first on a tie."""

    def cost(k: int) -> float:
        a, b = free[k], tried[k]
        if not b.constraints_met:
            return math.inf
        if a.log_prob is not None and b.log_prob is not None:
            return a.log_prob - b.log_prob
        return a.score - b.score

    costs = [cost(k) for k in range(len(tried))]
    return min(range(len(costs)), key=lambda k: costs[k])
