"""Choosing the output among a search's candidates: minimum Bayes risk decoding
(:mod:`nmtkit.decode.mbr`, ``decode.mbr``) or reranking with a reverse model
(:mod:`nmtkit.decode.rerank`, ``decode.rerank``).

Both take the n best of a beam search (or samples) as candidates: :func:`candidate_options`
is the search that gives them, :func:`choose_all` the choice among them. With neither the
search's own n best are the output. With both (``decode.mbr`` below ``decode.rerank``), the
reranking orders the candidates and MBR chooses among its ``decode.mbr`` best: the two-stage
"quality-aware decoding" of Fernandes et al. (2022), where a reranker prunes the list to the
candidates MBR then compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from . import mbr, rerank

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from .rerank import ReverseScorer
    from .translator import Translation


def candidate_options(cfg: DecodeConfig) -> DecodeConfig:
    """The search that gives MBR or reranking its N candidates (``cfg.mbr`` or
    ``cfg.rerank``, the larger with both): N samples with ``cfg.sampling``, else the N best
    of a beam at least that wide; ``cfg`` itself when both are off."""
    n = max(cfg.mbr, cfg.rerank)
    if not n:
        return cfg
    if cfg.sampling:
        return replace(cfg, n_best=n)
    return replace(cfg, beam=max(cfg.beam, n), n_best=n)


def choose_all(results: list[list[Translation]], sources: Sequence[str], cfg: DecodeConfig,
               reverse: ReverseScorer | None = None) -> list[list[Translation]]:
    """Each line's candidates (``results``, one list per line of ``sources``) reordered by
    MBR's expected utility or by the reranking score (with both: reranked, cut to the
    ``cfg.mbr`` best, then reordered by MBR among them), cut to ``cfg.n_best``; ``results``
    as they are when both are off. ``reverse``: the reverse model(s) reranking needs."""
    if cfg.rerank and cfg.mbr:
        best = rerank.choose_all(results, sources, replace(cfg, n_best=cfg.mbr), reverse)
        return mbr.choose_all(best, cfg)
    if cfg.mbr:
        return mbr.choose_all(results, cfg)
    return rerank.choose_all(results, sources, cfg, reverse)
