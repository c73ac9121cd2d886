"""A deadline (and cancel flag) that a search checks between its steps.

The searches (:mod:`nmtkit.decode.search`: greedy, beam, n-best, sampling;
:mod:`nmtkit.decode.constraints`; an :class:`~nmtkit.decode.ensemble.Ensemble` is a model to
them) take an optional :class:`Deadline` and call :meth:`Deadline.check` before each step: a
deadline that has passed, or one that was cancelled (its request's client left), stops the
search with :class:`DeadlineExceeded` within one step. Without a deadline the search does no
extra work at all; with one, a ``time.monotonic()`` comparison per step.

``nmtkit serve`` makes one per request from ``--timeout`` (:mod:`nmtkit.serve.app`), so
that work past a request's deadline stops instead of keeping the model busy for the
requests behind it. It reaches the search through
:attr:`~nmtkit.decode.options.TranslateOptions.deadline`.
"""

from __future__ import annotations

import math
import time


class DeadlineExceeded(TimeoutError):
    """A search (or the translation it belongs to) stopped at its deadline, or because it
    was cancelled: nothing it had found is returned."""


class Deadline:
    """A point in time (``time.monotonic()``; ``inf``: none) and a cancel flag.

    :meth:`cancel` may be called from another thread (the server's event loop cancels the
    search running in its model thread): it only sets a flag that :meth:`check` reads.
    """

    __slots__ = ("at", "cancelled")

    def __init__(self, at: float = math.inf) -> None:
        self.at = at
        """``time.monotonic()`` past which :meth:`check` raises; ``inf``: never (cancel only)."""
        self.cancelled = False

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """The deadline ``seconds`` from now."""
        return cls(time.monotonic() + seconds)

    def cancel(self) -> None:
        """Stop the work at its next check."""
        self.cancelled = True

    def passed(self) -> bool:
        """Whether the work should stop: cancelled, or past :attr:`at`."""
        return self.cancelled or time.monotonic() >= self.at

    def left(self) -> float:
        """Seconds until :attr:`at` (negative once past; ``inf`` for none)."""
        return self.at - time.monotonic()

    def check(self) -> None:
        """:class:`DeadlineExceeded` if the work should stop (:meth:`passed`)."""
        if self.cancelled:
            raise DeadlineExceeded("cancelled: its request was given up")
        if time.monotonic() >= self.at:
            raise DeadlineExceeded("stopped at its deadline")
