"""The server's work rate, measured at start-up: how many hypothesis-steps of search
(:mod:`nmtkit.serve.limits`) the loaded model does in a second on this host.

The work bound (``--work-rate`` x ``--timeout``) is meant to admit only requests that can be
answered in time. A fixed rate cannot know the host, the model, the engine or how busy the
cores are: issue 74 found 20,000 a second admitting requests that a busy 2-core host needed
minutes for (they ended in 503 after the whole wait). So ``nmtkit serve`` (and
:func:`~nmtkit.serve.app.create_app` without a rate) translates a small fixed request with
the loaded model before it starts (:func:`measure_work_rate`, a fraction of a second): a few
sentences of the model's own source words, at a small beam, until :data:`MIN_S` seconds have
gone; the rate is the request's estimated work (counted as a request's is,
:func:`~nmtkit.serve.checks.request_work`) over the time it took, times :data:`HEADROOM`.
Nonsense sentences tend to run to their length cap, as the estimate assumes, so the rate is
near the host's worst case. ``--work-rate`` still overrides it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..data.vocab import SPECIALS
from ..decode.options import TranslateOptions
from .checks import output_cap, request_work
from .limits import ServeLimits, search_work

if TYPE_CHECKING:
    from ..decode.text_translator import TextTranslator

log = logging.getLogger(__name__)

TEXTS = 8
"""Sentences of the timed request."""
TOKENS = 12
"""Source words of each."""
BEAM = 4
"""Its beam (at most the server's ``--max-beam``)."""
MIN_S = 0.2
"""The timed request is translated again until this many seconds have gone (a busy moment
of the host counts in proportion)."""
MAX_RUNS = 50
"""... or this many times (a tiny model)."""
HEADROOM = 0.75
"""The rate is this part of what was measured: room for a busier moment and for what the
estimate leaves out (tokenizing, choosing, the answer's JSON)."""


@dataclass(frozen=True)
class WorkRate:
    """What :func:`measure_work_rate` found: ``per_second`` (the rate the server uses:
    measured x :data:`HEADROOM`), from ``work`` hypothesis-steps in ``seconds`` over ``runs``
    translations of the timed request."""

    per_second: int
    work: int
    seconds: float
    runs: int


def calibration_texts(translator: TextTranslator, n: int = TEXTS, tokens: int = TOKENS) -> list[str]:
    """``n`` sentences of ``tokens`` source words each, made of the source vocabulary's
    most frequent words (tokens of letters or digits only: no punctuation that would cut a
    sentence, no special, tag or byte token), the same for the same model."""
    words = [t for t in translator.src_vocab.itos[len(SPECIALS):]
             if t.lstrip("\u2581").isalnum()][:200] or ["a"]
    return [translator.src_tok.decode([words[(i * 7 + j * 3) % len(words)] for j in range(tokens)])
            for i in range(n)]


def measure_work_rate(translator: TextTranslator, limits: ServeLimits, *,
                      clock: Callable[[], float] = time.perf_counter, min_s: float = MIN_S,
                      max_runs: int = MAX_RUNS) -> WorkRate:
    """Time :func:`calibration_texts` translated with ``translator`` (after one untimed
    translation of one of them: first calls set things up) at beam :data:`BEAM` and the
    server's output cap, until ``min_s`` seconds or ``max_runs`` runs; the hypothesis-steps
    the server would count for it per second, times :data:`HEADROOM` (at least 1)."""
    texts = calibration_texts(translator)
    beam = min(BEAM, limits.max_beam)
    cap = output_cap(None, limits)
    steps, width, phrases = request_work(translator, texts, beam, None, None, limits)
    work = search_work(steps, width, phrases)
    tags = sorted(translator.target_tags)  # a multilingual model: time its first direction
    options = TranslateOptions(beam=beam, batch_size=len(texts), max_length=cap,
                               tgt_lang=tags[0] if len(tags) > 1 else None)
    translator.translate(texts[:1], options)  # untimed
    runs, start = 0, clock()
    while True:
        translator.translate(texts, options)
        runs += 1
        seconds = clock() - start
        if seconds >= min_s or runs >= max_runs:
            break
    rate = max(1, int(HEADROOM * work * runs / max(seconds, 1e-9)))
    return WorkRate(rate, work * runs, seconds, runs)


def resolved_work_rate(translator: TextTranslator, limits: ServeLimits) -> ServeLimits:
    """``limits`` with a work rate: its own (``--work-rate``), else measured now (logged)."""
    if limits.work_per_second is not None:
        return limits
    measured = measure_work_rate(translator, limits)
    log.info("work rate measured on this host: %s hypothesis-steps a second (%s in %.2f s, "
             "%d runs, x %.2f headroom): a request may ask for %s with --timeout %g s; "
             "--work-rate sets it", f"{measured.per_second:,}", f"{measured.work:,}",
             measured.seconds, measured.runs, HEADROOM,
             f"{measured.per_second * limits.timeout_s:,.0f}", limits.timeout_s)
    return replace(limits, work_per_second=measured.per_second, rate_measured=True)
