"""Limits on what a user may ask of a search, shared by the command line, the server and the
Python API (kept free of torch, so that ``nmtkit translate --help`` can state them without
loading it)."""

MAX_PHRASES = 4
"""Constraint phrases a sentence may have, wherever they come from (``nmtkit translate
--constraints-file``, a request to ``nmtkit serve``,
:meth:`nmtkit.decode.translator.Translator.translate`): the constrained search
(:mod:`nmtkit.decode.constraints`) does Python work for every phrase of every hypothesis at
every step, so that 1000 one-token phrases kept a beam of 64 busy for minutes on one 5-token
sentence."""
