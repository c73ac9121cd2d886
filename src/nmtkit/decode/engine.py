"""What passes between the text pipeline and an engine: the one seam of translation.

The text pipeline (:class:`~nmtkit.decode.text_translator.TextTranslator`) turns lines into
:class:`Source` records (sentences cut, spans protected, tokenized, in the order the model
reads them), orders them by length and cuts batches; an engine searches one batch
(:meth:`~nmtkit.decode.text_translator.TextTranslator.search`) under one
:class:`SearchRequest` and answers each source with its n best :class:`Found`. Everything an
engine returns is plain Python and numpy: no tensor crosses the seam.

This module imports numpy and nmtkit's config only, so that an engine that needs no PyTorch
(the numpy one, CTranslate2's) starts without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from .deadline import Deadline


@dataclass(frozen=True)
class Source:
    """One sentence to search: ``tokens`` in reading order (a translation's ``src_tokens``),
    ``model_tokens`` the same in the order the model reads them (reversed for
    ``data.reverse_source``), ``ids`` those as source ids with ``</s>`` last; ``prefix``: the
    target ids its output must start with, ``phrases``: the target id sequences it must
    contain (``None``: none asked)."""

    tokens: list[str]
    model_tokens: list[str]
    ids: np.ndarray
    prefix: list[int] | None = None
    phrases: list[list[int]] | None = None


@dataclass(frozen=True)
class SearchRequest:
    """What one batch's search is asked for: the decoding options ``cfg`` (MBR's or
    reranking's candidates already resolved, :func:`~nmtkit.decode.choice.candidate_options`),
    the output cap ``max_length`` (tokens before ``</s>``; ``None``: the length rule alone),
    the source ``attention`` of each output step (of ``cfg.alignment_layer`` and
    ``cfg.alignment_head``), each token's log-probability (``token_scores``), and the
    ``deadline`` checked while it runs."""

    cfg: DecodeConfig
    max_length: int | None = None
    attention: bool = False
    token_scores: bool = False
    deadline: Deadline | None = None


@dataclass(frozen=True)
class Found:
    """One hypothesis an engine found: ``tokens`` (target tokens in reading order, no
    ``</s>``), its ranking ``score``, and where the engine gives them its ``log_prob``
    (``</s>`` included), ``token_log_probs`` (each token's, then ``</s>``'s), the source
    ``attention`` (asked: (len(tokens) + 1, source ids) float32, row t the step that writes
    token t, the last row ``</s>``'s; columns in the order the model read the source,
    ``</s>`` last) and whether it contains every constraint phrase."""

    tokens: list[str]
    score: float
    log_prob: float | None = None
    token_log_probs: list[float] | None = None
    attention: np.ndarray | None = None
    constraints_met: bool = True
