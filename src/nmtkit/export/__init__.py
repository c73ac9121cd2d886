"""Export trained checkpoints to other inference runtimes.

- :mod:`nmtkit.export.ctranslate2`: CTranslate2 (OpenNMT's C++ engine: int8/fp16 weights,
  CPU and GPU), needs the ``export`` extra (``pip install 'nmtkit[export]'``).

This package itself imports no runtime, so ``nmtkit`` works without the extra installed.
"""

from __future__ import annotations

from ..errors import UserError

FORMATS = ("ctranslate2",)
"""Formats that ``nmtkit export --format`` knows."""


class ExportError(UserError):
    """A checkpoint that cannot be exported (wrong architecture, existing output, ...);
    the message names the file and the problem."""
