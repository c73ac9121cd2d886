"""Limits of the HTTP service (kept free of web imports so the CLI can read the defaults).

Besides the per-field limits (texts, characters, beam, output tokens), the search work one
request may ask for is bounded in proportion to its time limit (``--timeout``), here and
only here (:attr:`ServeLimits.max_work`, :func:`search_work`, :func:`work_error`): work is
counted in *hypothesis-steps*, one hypothesis extended by one token,

    work = sum over texts of  steps x width x (1 + phrases)

with ``steps`` the most output tokens the text may get (the model's length rule
``max_len_a x source tokens + max_len_b``, raised to fit its constraints and prefix, capped
at the output cap), ``width`` the hypotheses kept per text (the beam, or MBR's/reranking's
candidates) and ``phrases`` its constraint phrases (the constrained search does work per
phrase for every hypothesis at every step). A request may ask for at most
``work_per_second x timeout_s`` of it: more is refused (413) before it queues, with the
estimate, the bound and their ratio. The rate is measured on the host when the server
starts (:mod:`nmtkit.serve.calibrate`) unless ``--work-rate`` gives it. The estimate is
an upper bound on the work (a text may end sooner); what it cannot foresee (a busier
moment, other requests taking their turns) is stopped by the request's deadline
(:mod:`nmtkit.decode.deadline`), which every search checks between steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from ..config import MAX_BEAM
from ..errors import UserError

MAX_COUNT = 2**31 - 1
"""Upper bound of every count limit: larger values only overflow the search's tensors."""
MAX_TIMEOUT_S = 86_400.0
"""Largest per-request time limit (one day)."""
MAX_WAIT_MS = 60_000.0
"""Largest batching wait (one minute: longer only holds every request back)."""

BATCH_S = 0.25
"""Seconds of search a batch of CTranslate2 is sized to (:meth:`ServeLimits.batch_size`): a
request waiting its turn waits about this long for each request ahead of it."""
BATCH_STEPS = 32
"""Search steps of a typical sentence, for that sizing."""

OPTIONS = {"max_texts": "--max-texts", "max_chars": "--max-chars", "max_beam": "--max-beam",
           "max_length": "--max-length", "max_body_bytes": "--max-body-bytes",
           "timeout_s": "--timeout", "max_batch": "--max-batch", "max_wait_ms": "--max-wait-ms",
           "work_per_second": "--work-rate"}
"""The ``nmtkit serve`` option that sets each limit (the others have none)."""


@dataclass
class ServeLimits:
    """What one request may ask for, and how requests are batched.

    Checked when made: a ``ValueError`` naming the ``nmtkit serve`` option (and the field)
    for a count below 1, a non-finite number, a timeout <= 0, a negative batching wait ...
    """

    max_texts: int = 64
    """Texts per translate request."""
    max_chars: int = 1000
    """Characters per text."""
    max_beam: int = 10
    max_length: int = 256
    """The most output tokens of any answer (``--max-length``): the largest ``max_length`` a
    request may ask for, and the cap of a request that asks for none (on top of the model's
    length rule); also the most tokens a forced target prefix may have."""
    max_attention_tokens: int = 200
    """Source tokens of an attention request (its answer grows with the square)."""
    max_body_bytes: int = 1_000_000
    timeout_s: float = 30.0
    """Per-request time limit (queueing included) -> 503."""
    max_batch: int = 32
    """Sentences merged into one model call; also the most sentences searched together
    (:meth:`batch_size`)."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for company."""
    max_pending: int = 2048
    """Sentences waiting in the queue before new requests get a 503."""
    work_per_second: int | None = None
    """Hypothesis-steps of search (see the module) the server is taken to do in a second
    (``--work-rate``): a request may ask for :attr:`max_work`, this times ``timeout_s``.
    ``None``: measured with the loaded model when the app is made
    (:mod:`nmtkit.serve.calibrate`), so that a request admitted on this host can be answered
    within ``timeout_s``. (The fixed 20,000 of before admitted, on a busy 2-core host,
    requests that needed minutes: issue 74.) Set it to serve the same bound everywhere."""
    rate_measured: bool = False
    """Whether :attr:`work_per_second` was measured (:mod:`nmtkit.serve.calibrate`) rather
    than given."""

    @property
    def max_work(self) -> int:
        """The most search work (hypothesis-steps) one request may ask for: in proportion
        to its time limit, ``work_per_second x timeout_s``."""
        if self.work_per_second is None:
            raise ValueError("the work rate is not known yet: measure it "
                             "(nmtkit.serve.calibrate.resolved_work_rate) or set work_per_second")
        return max(1, int(self.work_per_second * self.timeout_s))

    @property
    def rate_source(self) -> str:
        """Where :attr:`work_per_second` came from, as error messages say it."""
        return "measured on this host at start-up" if self.rate_measured else "set by --work-rate"

    def batch_size(self, sentences: int, width: int) -> int:
        """Sentences searched together in one batch of an engine whose search cannot stop
        between steps (CTranslate2's runs a batch in one call): as many as take about
        :data:`BATCH_S` at :attr:`work_per_second` (sentences of :data:`BATCH_STEPS` steps,
        ``width`` hypotheses each), at least 1, at most ``sentences`` and ``max_batch``, so
        that the requests waiting their turn wait no longer than that."""
        rate = self.work_per_second or 1
        fits = int(rate * BATCH_S / (BATCH_STEPS * max(1, width)))
        return max(1, min(sentences, self.max_batch, fits))

    def __post_init__(self) -> None:
        floats = {"timeout_s": (0.0, False, MAX_TIMEOUT_S), "max_wait_ms": (0.0, True, MAX_WAIT_MS)}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in floats:
                low, low_ok, high = floats[f.name]
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value) and (value >= low if low_ok else value > low)
                      and value <= high)
                rule = f"a finite number {'>=' if low_ok else '>'} {low:g} and <= {high:g}"
            elif (f.name == "work_per_second" and value is None) or f.name == "rate_measured":
                continue  # (None: measured later)
            else:
                high = MAX_BEAM if f.name == "max_beam" else MAX_COUNT
                ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high
                rule = f"an integer >= 1 and <= {high}"
            if not ok:
                option = OPTIONS.get(f.name)
                raise UserError(f"{option} must be {rule}, got {value!r} (serve limit {f.name})"
                                 if option else
                                 f"serve limit {f.name} must be {rule}, got {value!r}")


def search_work(steps: Sequence[int], width: int, phrases: Sequence[int]) -> int:
    """Hypothesis-steps of a request (see the module): per text, at most ``steps[i]``
    output tokens, ``width`` hypotheses, ``phrases[i]`` constraint phrases."""
    return sum(s * width * (1 + c) for s, c in zip(steps, phrases, strict=True))


def work_error(steps: Sequence[int], width: int, phrases: Sequence[int],
               limits: ServeLimits) -> str | None:
    """Why a request's search work exceeds ``limits.max_work`` (which bound, by how much,
    and what to change), or ``None`` when it fits."""
    work = search_work(steps, width, phrases)
    if work <= limits.max_work:
        return None
    per_text = f", up to {max(phrases)} constraint phrases each" if any(phrases) else ""
    return (f"too much search for one request: about {work:,} hypothesis-steps ({len(steps)} "
            f"texts of up to {max(steps)} output tokens x {width} hypotheses each{per_text}), "
            f"{work / limits.max_work:.1f} times the {limits.max_work:,} that --timeout "
            f"{limits.timeout_s:g} s allows at --work-rate {limits.work_per_second:,} a second "
            f"({limits.rate_source}); "
            "send fewer or shorter texts, or ask for a smaller beam, max_length or fewer "
            "constraint phrases")
