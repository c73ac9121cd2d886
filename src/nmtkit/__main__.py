"""``python -m nmtkit ...``: the ``nmtkit`` command where its script is not on the PATH (a
checkout used through ``PYTHONPATH=src``, or a subprocess that must use this interpreter)."""

from nmtkit.cli import console

console()
