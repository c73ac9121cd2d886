"""Limits of the HTTP service (kept free of web imports so the CLI can read the defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ServeLimits:
    """What one request may ask for, and how requests are batched."""

    max_texts: int = 64
    """Texts per translate request."""
    max_chars: int = 1000
    """Characters per text."""
    max_beam: int = 10
    max_length: int = 256
    """Largest ``max_length`` (output tokens) a request may ask for."""
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
        for name, value in asdict(self).items():
            if value < 0 or (value == 0 and name != "max_wait_ms"):
                raise ValueError(f"serve limit {name} must be positive, got {value}")
