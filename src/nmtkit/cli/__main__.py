"""``python -m nmtkit.cli ...`` (and ``torchrun -m nmtkit.cli train ...``): the ``nmtkit``
command."""

import sys

from nmtkit.cli import main

sys.exit(main())
