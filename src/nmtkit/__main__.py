"""``python -m nmtkit ...``: the ``nmtkit`` command where its script is not on the PATH (a
checkout used through ``PYTHONPATH=src``, or a subprocess that must use this interpreter)."""

import sys

from nmtkit.cli import main

sys.exit(main())
