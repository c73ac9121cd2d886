"""Progress bars of the commands that work through many sentences (translate, evaluate, tune,
distill, backtranslate) or checkpoints (average): tqdm on stderr, with the total and the rate
(sentences/s), shown only where stderr is a terminal and ``--quiet`` was not given, so that
a log file, a pipe or a batch job gets no bar characters.

The layers below never draw: they take a plain callback ``progress(done, total)`` ("``done``
more of ``total`` in all", :attr:`nmtkit.decode.options.TranslateOptions.progress`), which
:func:`progress_bar` gives (or ``None`` where no bar is shown, so that they skip the calls).
The commands import this module when they run (``nmtkit --help`` does not import tqdm);
their ``--quiet`` flag is :func:`nmtkit.cli.options.add_quiet_arg`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

Progress = Callable[[int, int], None]
"""``progress(done, total)``: ``done`` more items finished, of ``total`` in all."""


def shows_bar(quiet: bool) -> bool:
    """A bar is drawn unless ``--quiet``, and only on a terminal."""
    return not quiet and sys.stderr.isatty()


class _Bar:
    """A tqdm bar fed by ``(done, total)`` calls: its total follows what the layer below
    says (e.g. the sentences a line splitting gave, rather than the lines)."""

    def __init__(self, desc: str, unit: str):
        self.bar = tqdm(desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                        smoothing=0.1)

    def __call__(self, done: int, total: int) -> None:
        if self.bar.total != total:
            self.bar.total = total
            self.bar.refresh()
        self.bar.update(done)


@contextmanager
def progress_bar(quiet: bool, desc: str, unit: str = "sent") -> Iterator[Progress | None]:
    """The callback of a bar named ``desc`` counting ``unit`` (closed after the block), or
    ``None`` where none is shown (:func:`shows_bar`)."""
    if not shows_bar(quiet):
        yield None
        return
    bar = _Bar(desc, unit)
    try:
        yield bar
    finally:
        bar.bar.close()
