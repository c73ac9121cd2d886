"""``python -m nmtkit.cli ...`` (and ``torchrun -m nmtkit.cli train ...``): the ``nmtkit``
command."""

from nmtkit.cli import console

console()
