"""nmtkit.decode: text in, text out. :func:`load_translator` loads a translator of one or
more models and chooses the engine that runs it (:mod:`nmtkit.decode.load`)."""

from .load import load_translator

__all__ = ["load_translator"]
