"""Choose the beam size and the length penalty of beam search (and whether minimum Bayes
risk decoding pays, ``--mbr``) on a validation set.

Beam search ranks finished hypotheses by log P(y|x) / lp(y) with the GNMT length penalty
lp(y) = ((5 + |y|) / 6) ** alpha (Wu et al. 2016, Sec. 7, Eq. 14): alpha = 0 ranks by the
raw log-probability, which favours short outputs, and a larger alpha favours longer ones.
Which alpha and which beam size translate best depends on the model and the language pair
(the paper tunes both on a development set, Sec. 6.1: "beam size of 4 and length penalty
alpha = 0.6 ... chosen after experimentation on the development set"). :func:`tune_search`
translates a validation set once per setting of a grid and scores each with sacreBLEU;
:func:`best_trial` picks the setting to use by one of
:data:`nmtkit.config.TUNE_METRICS` (cased sacreBLEU unless told otherwise; a model trained on
lowercased text, ``data.lowercase``, is chosen by ``bleu_lc_tok``, as its output has no case to
score). Only the sentences of a validation set may be used for this: a test set chosen on is
no longer a test (``nmtkit tune`` refuses one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..config import TUNE_BEAMS, TUNE_LENGTH_PENALTIES, TUNE_METRICS
from ..evaluate import score
from .translator import TextTranslator, decode_options


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
    0 = the beam's own best."""

    def flags(self) -> str:
        """The command-line options that decode with this setting."""
        out = f"--beam {self.beam}"
        if self.length_penalty is not None:
            out += f" --length-penalty {self.length_penalty:g}"
        return out + (f" --mbr {self.mbr}" if self.mbr else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def grid(beams: Sequence[int], penalties: Sequence[float],
         mbr: Sequence[int] = (0,)) -> list[tuple[int, float | None, int]]:
    """Every (beam, length penalty, MBR candidates) to try, in the order given; beam 1 once,
    without a penalty or MBR (greedy search has one candidate). ``ValueError`` for an empty
    list, a beam below 1, a negative penalty or a negative number of candidates."""
    if not beams or not penalties or not mbr:
        raise ValueError("give at least one beam size, one length penalty and one MBR size")
    if any(b < 1 for b in beams):
        raise ValueError(f"beam sizes must be >= 1, got {list(beams)}")
    if any(not p >= 0 for p in penalties):  # `not >=` also catches NaN
        raise ValueError(f"length penalties must be >= 0, got {list(penalties)}")
    if any(m < 0 for m in mbr):
        raise ValueError(f"MBR candidates must be >= 0 (0 = off), got {list(mbr)}")
    out: list[tuple[int, float | None, int]] = []
    for b in dict.fromkeys(beams):
        for p in ([None] if b == 1 else dict.fromkeys(penalties)):
            out.extend((b, p, m) for m in ([0] if b == 1 else dict.fromkeys(mbr)))
    return out


def tune_search(translator: TextTranslator, sources: list[str], references: list[str],
                beams: Sequence[int] = TUNE_BEAMS,
                penalties: Sequence[float] = TUNE_LENGTH_PENALTIES, *, tgt_lang: str | None = None,
                on_trial: Callable[[Trial], None] | None = None,
                mbr: Sequence[int] = (0,)) -> list[Trial]:
    """Translate ``sources`` with every setting of :func:`grid` and score each against
    ``references`` (sacreBLEU, :func:`nmtkit.evaluate.score`). ``on_trial`` is called with
    each trial as soon as it is scored. The translator's own options are restored after."""
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources vs {len(references)} references")
    if not sources:
        raise ValueError("nothing to tune on: the validation set is empty")
    settings = grid(beams, penalties, mbr)
    base = translator.decode_cfg
    trials = []
    try:
        for beam, penalty, candidates in settings:
            given: dict[str, Any] = {"beam": beam, "n_best": 1, "mbr": candidates}
            if penalty is not None:
                given["length_penalty"] = penalty
            translator.decode_cfg = decode_options(base, **given)
            start = time.perf_counter()
            hyps = translator.translate_lines(sources, tgt_lang=tgt_lang)
            seconds = time.perf_counter() - start
            s = score(hyps, references)
            trial = Trial(beam, penalty, s["bleu"], s["chrf"], s["length_ratio"],
                          round(seconds, 2), s["bleu_lc_tok"], candidates)
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
    finally:
        translator.decode_cfg = base
    return trials


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
    """The trial with the highest ``metric`` (one of :data:`nmtkit.config.TUNE_METRICS`);
    among equal ones the smaller beam (faster), then fewer MBR candidates, then the setting
    that came first in the grid.
    ``ValueError`` for an unknown metric or a trial that lacks it."""
    if not trials:
        raise ValueError("no trials")
    if metric not in TUNE_METRICS:
        raise ValueError(f"unknown metric {metric!r}: choose one of {', '.join(TUNE_METRICS)}")
    if any(getattr(t, metric) is None for t in trials):
        raise ValueError(f"a trial has no {metric} score (recorded before it was kept): "
                         "tune again")
    return max(trials, key=lambda t: (getattr(t, metric), -t.beam, -t.mbr))
