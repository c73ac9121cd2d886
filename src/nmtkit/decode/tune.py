"""Choose the beam size and the length penalty of beam search (and whether minimum Bayes
risk decoding, ``--mbr``, or reranking with a reverse or right-to-left model, ``--rerank``,
pays) on a validation set.

Beam search ranks finished hypotheses by log P(y|x) / lp(y) with the GNMT length penalty
lp(y) = ((5 + |y|) / 6) ** alpha (Wu et al. 2016, Sec. 7, Eq. 14): alpha = 0 ranks by the
raw log-probability, which favours short outputs, and a larger alpha favours longer ones.
Which alpha and which beam size translate best depends on the model and the language pair
(the paper tunes both on a development set, Sec. 6.1: "beam size of 4 and length penalty
alpha = 0.6 ... chosen after experimentation on the development set"). :func:`tune_search`
translates a validation set once per setting of a grid and scores each with sacreBLEU
(BLEU, chrF and TER); :func:`best_trial` picks the setting to use by one of
:data:`nmtkit.config.TUNE_METRICS` (cased sacreBLEU unless told otherwise; a model trained on
lowercased text, ``data.lowercase``, is chosen by ``bleu_lc_tok``, as its output has no case to
score; TER, an edit rate, is minimised). Only the sentences of a validation set may be used
for this: a test set chosen on is no longer a test (``nmtkit tune`` refuses one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..config import (
    MAX_LENGTH_PENALTY,
    TUNE_BEAMS,
    TUNE_LENGTH_PENALTIES,
    TUNE_METRICS,
    TUNE_R2L_WEIGHTS,
    DecodeConfig,
)
from ..errors import UserError
from ..evaluate import score
from .choice import choose, reranking_search
from .options import TranslateOptions
from .text_translator import TextTranslator, decode_options
from .translation import Translation


@dataclass(frozen=True)
class Trial:
    """One setting of the grid and how the validation set scored with it."""

    beam: int
    length_penalty: float | None
    """``None`` for greedy search (beam 1), which ranks nothing and has no penalty."""
    bleu: float
    chrf: float
    length_ratio: float
    """Output length / reference length in sacreBLEU's tokens (BLEU's brevity penalty
    applies below 1)."""
    seconds: float
    bleu_lc_tok: float | None = None
    """BLEU on lowercased tokenized text (``None`` in trials recorded before it was kept)."""
    mbr: int = 0
    """Minimum Bayes risk decoding over this many candidates (:mod:`nmtkit.decode.mbr`);
    with ``rerank``, over this many of the reranking's best; 0 = the beam's own best."""
    rerank: int = 0
    """Reranking of this many candidates with a reverse model (:mod:`nmtkit.decode.rerank`);
    0 = off."""
    reverse_weight: float | None = None
    """Reranking: the reverse model's weight (``None`` without reranking)."""
    r2l_weight: float | None = None
    """Reranking with right-to-left models: their weight (``None`` without them)."""
    ter: float | None = None
    """sacreBLEU's TER (Snover et al. 2006): word edits per reference word x 100, lower is
    better (``None`` in trials recorded before it was kept)."""

    def flags(self) -> str:
        """The command-line options that decode with this setting (reranking also needs its
        ``--reverse-model`` or ``--r2l-model``)."""
        out = f"--beam {self.beam}"
        if self.length_penalty is not None:
            out += f" --length-penalty {self.length_penalty:g}"
        if self.rerank:
            out += f" --rerank {self.rerank} --reverse-weight {self.reverse_weight:g}"
            if self.r2l_weight is not None:
                out += f" --r2l-weight {self.r2l_weight:g}"
        return out + (f" --mbr {self.mbr}" if self.mbr else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def grid(beams: Sequence[int], penalties: Sequence[float], mbr: Sequence[int] = (0,),
         rerank: Sequence[int] = (0,)) -> list[tuple[int, float | None, int, int]]:
    """Every (beam, length penalty, MBR candidates, reranked candidates) to try, in the order
    given: each MBR size alone, each reranking size alone, then MBR among the reranking's
    best for each MBR size below a reranking size (:mod:`nmtkit.decode.choice`); beam 1 once,
    without a penalty, MBR or reranking (greedy search has one candidate). ``ValueError``
    for an empty list, a beam below 1, a penalty outside [0, ``MAX_LENGTH_PENALTY``] or a
    negative number of candidates."""
    if not beams or not penalties or not mbr or not rerank:
        raise UserError("give at least one beam size, one length penalty, one MBR size and "
                         "one reranking size")
    if any(b < 1 for b in beams):
        raise UserError(f"beam sizes must be >= 1, got {list(beams)}")
    if any(not 0 <= p <= MAX_LENGTH_PENALTY for p in penalties):  # `not` catches NaN too
        raise UserError(f"length penalties must be in [0, {MAX_LENGTH_PENALTY:g}] "
                         f"(decode.length_penalty's range), got {list(penalties)}")
    for what, sizes in (("MBR", mbr), ("reranked", rerank)):
        if any(m < 0 for m in sizes):
            raise UserError(f"{what} candidates must be >= 0 (0 = off), got {list(sizes)}")
    choices = [(m, 0) for m in dict.fromkeys(mbr)]
    choices += [(0, r) for r in dict.fromkeys(rerank) if r and (0, r) not in choices]
    choices += [(m, r) for r in dict.fromkeys(rerank) if r for m in dict.fromkeys(mbr)
                if 0 < m < r]
    out: list[tuple[int, float | None, int, int]] = []
    for b in dict.fromkeys(beams):
        for p in ([None] if b == 1 else dict.fromkeys(penalties)):
            out.extend((b, p, m, r) for m, r in ([(0, 0)] if b == 1 else choices))
    return out


def tune_search(translator: TextTranslator, sources: list[str], references: list[str],
                beams: Sequence[int] = TUNE_BEAMS,
                penalties: Sequence[float] = TUNE_LENGTH_PENALTIES, *, tgt_lang: str | None = None,
                on_trial: Callable[[Trial], None] | None = None,
                mbr: Sequence[int] = (0,), rerank: Sequence[int] = (0,),
                reverse_weights: Sequence[float] = (1.0,),
                r2l_weights: Sequence[float] | None = None,
                progress: Callable[[int, int], None] | None = None) -> list[Trial]:
    """Translate ``sources`` with every setting of :func:`grid` and score each against
    ``references`` (sacreBLEU, :func:`nmtkit.evaluate.score`). A reranking size is searched
    and scored by the reverse model (``translator.reverse``) once per beam and penalty, then
    chosen from with each of ``reverse_weights`` (and, where the reranking has right-to-left
    models, each of ``r2l_weights`` with each: default ``TUNE_R2L_WEIGHTS``), alone and with
    each MBR size below it (one trial each, sharing the search's seconds).
    ``on_trial`` is called with each trial as soon as it is scored; ``progress(done, total)``
    with the sentences translated, of those of every search (:func:`searches` of them). The
    translator's own options are restored after."""
    if len(sources) != len(references):
        raise UserError(f"{len(sources)} sources vs {len(references)} references")
    if not sources:
        raise UserError("nothing to tune on: the validation set is empty")
    settings = grid(beams, penalties, mbr, rerank)
    if any(r for *_, r in settings) and (
            not reverse_weights or any(not w >= 0 for w in reverse_weights)):
        raise UserError(f"reverse weights must be >= 0, got {list(reverse_weights)}")
    r2l_options = right_to_left_weights(translator, r2l_weights)
    base = translator.decode_cfg
    trials: list[Trial] = []
    n_searches = searches(settings)

    def searched_sentences(done: int, total: int) -> None:  # total: one search's
        assert progress is not None
        progress(done, total * n_searches)

    told = None if progress is None else searched_sentences
    # (translate_lines is told only where there is a bar: a translator of an older signature
    # keeps working without one)
    lines_progress: dict[str, Any] = {} if told is None else {"progress": told}

    def record(trial: Trial) -> None:
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)

    searched: tuple[tuple[int, float | None, int], list[list[Translation]], float] | None = None
    try:
        for beam, penalty, candidates, reranked in settings:
            translator.decode_cfg = setting_options(base, beam, penalty, candidates, reranked)
            start = time.perf_counter()
            if not reranked:
                hyps = translator.translate_lines(sources, tgt_lang=tgt_lang, **lines_progress)
                record(scored(hyps, references, time.perf_counter() - start, beam, penalty,
                              candidates))
                continue
            if searched is None or searched[0] != (beam, penalty, reranked):
                results = translator.translate(  # all, reverse-scored
                    sources, TranslateOptions(tgt_lang=tgt_lang, progress=told))
                searched = ((beam, penalty, reranked), results, time.perf_counter() - start)
            _, results, seconds = searched
            for w in dict.fromkeys(reverse_weights):
                for v in r2l_options:
                    cfg = replace(translator.decode_cfg, n_best=1, reverse_weight=w,
                                  r2l_weight=v or 0.0, mbr=candidates)
                    hyps = [choose(r, cfg)[0].text for r in results]  # MBR among its best, if asked
                    record(scored(hyps, references, seconds, beam, penalty, candidates, reranked,
                                  w, v))
    finally:
        translator.decode_cfg = base
    return trials


def right_to_left_weights(translator: TextTranslator,
                          r2l_weights: Sequence[float] | None) -> list[float | None]:
    """The right-to-left weights a reranking tries: ``[None]`` where the translator reranks
    with no right-to-left model, else ``r2l_weights`` (default ``TUNE_R2L_WEIGHTS``), each
    once; ``UserError`` for none or a negative one."""
    scorer = getattr(translator, "reverse", None)
    if scorer is None or not scorer.r2l:
        return [None]
    weights = list(dict.fromkeys(TUNE_R2L_WEIGHTS if r2l_weights is None else r2l_weights))
    if not weights or any(not v >= 0 for v in weights):
        raise UserError(f"right-to-left weights must be >= 0, got {weights}")
    return list(weights)


def setting_options(base: DecodeConfig, beam: int, penalty: float | None, candidates: int,
                    reranked: int) -> DecodeConfig:
    """``base`` with one setting of :func:`grid`: one output per sentence, chosen by MBR
    among ``candidates`` where asked; a reranking setting keeps all the candidates in the
    beam's order (each reverse weight chooses among them afterwards)."""
    given: dict[str, Any] = {"beam": beam, "n_best": 1, "mbr": candidates, "rerank": reranked}
    if penalty is not None:
        given["length_penalty"] = penalty
    cfg = decode_options(base, **given)
    return reranking_search(cfg) if reranked else cfg


def scored(hyps: list[str], references: list[str], seconds: float, beam: int,
           penalty: float | None, mbr: int, rerank: int = 0, reverse_weight: float | None = None,
           r2l_weight: float | None = None) -> Trial:
    """The trial of one setting whose translations are ``hyps``: sacreBLEU's scores against
    ``references`` (:func:`nmtkit.evaluate.score`) and the search's ``seconds``."""
    s = score(hyps, references)
    return Trial(beam, penalty, s["bleu"], s["chrf"], s["length_ratio"], round(seconds, 2),
                 s["bleu_lc_tok"], mbr, rerank, reverse_weight, r2l_weight, s["ter"])


def searches(settings: Sequence[tuple[int, float | None, int, int]]) -> int:
    """How many searches :func:`tune_search` runs for the ``settings`` of :func:`grid`: one
    per setting without reranking, one per run of settings that rerank the same beam,
    penalty and candidates (their weights and MBR sizes choose among one search's)."""
    n, last = 0, None
    for beam, penalty, _, reranked in settings:
        if not reranked:
            n += 1
        elif last != (beam, penalty, reranked):
            n, last = n + 1, (beam, penalty, reranked)
    return n


def at_the_edge(best: Trial, penalties: Sequence[float]) -> str | None:
    """``"largest"`` or ``"smallest"`` when ``best`` took the largest penalty of the grid
    (above 0) or its smallest (above 0): the optimum may lie beyond it, so the grid should
    be extended that way. ``None`` otherwise (inside the grid, at 0, or greedy)."""
    tried = sorted(set(penalties))
    if best.length_penalty is None or len(tried) < 2:
        return None
    if best.length_penalty == tried[-1]:
        return "largest"
    if best.length_penalty == tried[0] and tried[0] > 0:
        return "smallest"
    return None


def best_trial(trials: Sequence[Trial], metric: str = "bleu") -> Trial:
    """The trial with the best ``metric`` (one of :data:`nmtkit.config.TUNE_METRICS`, which
    says whether higher or lower is better: the lowest TER, the highest of the others);
    among equal ones the smaller beam (faster), then fewer MBR or reranked candidates, then
    the setting that came first in the grid.
    ``ValueError`` for an unknown metric or a trial that lacks it."""
    if not trials:
        raise ValueError("no trials")
    if metric not in TUNE_METRICS:
        raise UserError(f"unknown metric {metric!r}: choose one of {', '.join(TUNE_METRICS)}")
    if any(getattr(t, metric) is None for t in trials):
        raise UserError(f"a trial has no {metric} score (recorded before it was kept): "
                         "tune again")
    sign = 1.0 if TUNE_METRICS[metric] == "higher" else -1.0
    return max(trials, key=lambda t: (sign * getattr(t, metric), -t.beam, -t.mbr, -t.rerank))
