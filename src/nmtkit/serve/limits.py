"""Limits of the HTTP service (kept free of web imports so the CLI can read the defaults)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..config import MAX_BEAM

MAX_COUNT = 2**31 - 1
"""Upper bound of every count limit: larger values only overflow the search's tensors."""
MAX_TIMEOUT_S = 86_400.0
"""Largest per-request time limit (one day)."""
MAX_WAIT_MS = 60_000.0
"""Largest batching wait (one minute: longer only holds every request back)."""

OPTIONS = {"max_texts": "--max-texts", "max_chars": "--max-chars", "max_beam": "--max-beam",
           "max_length": "--max-length", "max_body_bytes": "--max-body-bytes",
           "timeout_s": "--timeout", "max_batch": "--max-batch", "max_wait_ms": "--max-wait-ms"}
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
    """Sentences merged into one model call."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for company."""
    max_pending: int = 2048
    """Sentences waiting in the queue before new requests get a 503."""

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
            else:
                high = MAX_BEAM if f.name == "max_beam" else MAX_COUNT
                ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high
                rule = f"an integer >= 1 and <= {high}"
            if not ok:
                option = OPTIONS.get(f.name)
                raise ValueError(f"{option} must be {rule}, got {value!r} (serve limit {f.name})"
                                 if option else
                                 f"serve limit {f.name} must be {rule}, got {value!r}")
