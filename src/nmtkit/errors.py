"""The one family of errors that are the user's to fix, not nmtkit's.

:class:`UserError` is raised wherever the input is at fault: a config, a flag, a checkpoint,
a data file, a run directory, a request. Its message names the input and the problem, and
says what to do where there is something to do. ``nmtkit`` answers one with its message and
exit status 2, no traceback (:func:`nmtkit.cli.main`); any other exception is a bug in
nmtkit, and its traceback is shown (exit status 1).

It is a ``ValueError``, so that code catching ``ValueError`` around a call (the server's 422
answers, a caller's own checks) keeps catching it. The errors of one kind subclass it where
they live (``ConfigError``, ``CorpusError``, ``CheckpointError``, ``TrainingError``...).
This module imports nothing of nmtkit: every layer may raise one.
"""

from __future__ import annotations


class UserError(ValueError):
    """The user's input is at fault; the message says which input and why."""
