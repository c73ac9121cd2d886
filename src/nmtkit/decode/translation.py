"""What a translator returns for one line: :class:`Translation`, one record per candidate.

A plain record with no behaviour, so that the modules that choose among candidates
(:mod:`~nmtkit.decode.choice`, :mod:`~nmtkit.decode.mbr`, :mod:`~nmtkit.decode.rerank`) and
the translator that makes them (:mod:`~nmtkit.decode.translator`) share it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Translation:
    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: np.ndarray | None = None  # (len(tokens) + 1, len(src_tokens) + 1)
    """On request: the source attention per output step (the last decoder layer's, heads
    averaged, as the search saw it; or the ``decode.alignment_layer``/``alignment_head`` named,
    :func:`chosen_source_attention`), float32, as every engine gives it
    (:class:`~nmtkit.decode.engine.Found`)."""
    token_log_probs: list[float] | None = None
    """On request: log P of each token and of ``</s>`` (len(tokens) + 1 values, their sum
    the translation's log-probability)."""
    alignment: list[tuple[int, int]] | None = None
    """On request: (source position, target position) pairs, Pharaoh ``i-j``: each target
    token with the source token it attends to most (:func:`alignment_from_attention`)."""
    constraints_met: bool = True
    """Whether the translation contains every constraint phrase of its line (true when it
    has none); only the output cap makes a constrained search end without them."""
    log_prob: float | None = None
    """The translation's log-probability (``</s>`` included; ``score`` is it divided by the
    length penalty), where the engine gives it."""
    mbr_utility: float | None = None
    """With ``decode.mbr``: the expected utility that ranked it (:mod:`nmtkit.decode.mbr`)."""
    reverse_log_prob: float | None = None
    """With ``decode.rerank``: the reverse model's log P(source | this), per source token."""
    r2l_log_prob: float | None = None
    """With ``decode.rerank`` and right-to-left models: their log P(this | source) read from
    its end, per token (``</s>`` included)."""
    rerank_score: float | None = None
    """With ``decode.rerank``: the score that ranked it, ``score + reverse_weight *
    reverse_log_prob`` (``+ r2l_weight * r2l_log_prob``; :mod:`nmtkit.decode.rerank`)."""

    @property
    def ranking_score(self) -> float:
        """The score that put it where it is in its list: the expected utility with
        ``decode.mbr`` (also after reranking), the reranking score with ``decode.rerank``
        alone, else the search's."""
        if self.mbr_utility is not None:
            return self.mbr_utility
        return self.rerank_score if self.rerank_score is not None else self.score
