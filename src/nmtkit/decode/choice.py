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
    from .rerank import Reranker
    from .translation import Translation


def reranking_search(cfg: DecodeConfig) -> DecodeConfig:
    """The options that give a reranking setting (``cfg.rerank``) all its candidates in the
    beam's order, every one scored by the reranking models: its weights at 0, no MBR, every
    candidate kept. Settings that differ only in their weights (or MBR among the reranking's
    best) then :func:`choose` from one such search (``nmtkit tune``, ``benchmarks/mbr.py``)."""
    return replace(cfg, reverse_weight=0.0, r2l_weight=0.0, mbr=0, n_best=cfg.rerank)


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


def choose(candidates: list[Translation], cfg: DecodeConfig) -> list[Translation]:
    """One line's candidates (with their ``reverse_log_prob`` when ``cfg.rerank``) reordered by
    the reranking score, by MBR's expected utility, or reranked, cut to the ``cfg.mbr`` best
    and reordered by MBR among them when both are on; cut to ``cfg.n_best``. The one place
    that says how the two combine (``nmtkit tune`` chooses with it too)."""
    if cfg.rerank and cfg.mbr:
        return mbr.choose(rerank.choose(candidates, replace(cfg, n_best=cfg.mbr)), cfg)
    if cfg.rerank:
        return rerank.choose(candidates, cfg)
    if cfg.mbr:
        return mbr.choose(candidates, cfg)
    return candidates[:cfg.n_best]


def choose_all(results: list[list[Translation]], sources: Sequence[str], cfg: DecodeConfig,
               reverse: Reranker | None = None) -> list[list[Translation]]:
    """Each line's candidates (``results``, one list per line of ``sources``) scored by the
    reverse model when reranking, then :func:`choose`; ``results`` as they are when MBR and
    reranking are both off. ``reverse``: the reverse model(s) reranking needs
    (``ValueError`` without them)."""
    if not (cfg.mbr or cfg.rerank):
        return results
    if cfg.rerank:
        rerank.require_reverse(cfg, reverse)
        assert reverse is not None
        results = rerank.with_reverse_scores(results, sources, reverse)
    return [choose(cs, cfg) for cs in results]
