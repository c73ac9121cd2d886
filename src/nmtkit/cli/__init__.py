"""The ``nmtkit`` command: :func:`main` and the top-level parser.

Each command is a module of this package with its parser (``add_parser``), its examples and
its run function (``run``); :data:`COMMANDS` lists them in the order of ``nmtkit --help``.
The decoding flags are declared once (:mod:`nmtkit.cli.decode_options`). The layers below
are imported when a command runs, so that ``nmtkit --help`` and a mistyped flag answer
without loading PyTorch.
"""

from __future__ import annotations

import argparse
import gc
import logging
import re
import sys

from .. import __version__
from ..errors import UserError
from ..io import OutputError
from . import (
    average,
    backtranslate,
    convert,
    distill,
    evaluate,
    export,
    plot,
    prepare,
    serve,
    train,
    translate,
    tune,
)
from .options import HelpFormatter

COMMANDS = (prepare, train, translate, evaluate, tune, backtranslate, distill, average, convert,
            serve, plot, export)
"""The command modules, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""


def build_parser() -> argparse.ArgumentParser:
    """``nmtkit`` and every command's parser; the summary names every command."""
    p = argparse.ArgumentParser(prog="nmtkit", formatter_class=HelpFormatter,
                                description="nmtkit: attention-based neural machine translation.")
    p.add_argument("--version", action="version", version=f"nmtkit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug-level logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of the commands below; nmtkit COMMAND --help for its options")
    for command in COMMANDS:
        command.add_parser(sub)
    p.description = f"{p.description}\n\nCommands: {', '.join(sub.choices)}."
    return p


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


_ALLOCATOR_FAILURE = re.compile(r"out of memory|not enough memory|tried to allocate|"
                                r"(could not|cannot|can't|failed to|unable to) allocate", re.I)
"""What PyTorch's allocators say when they fail: a ``RuntimeError`` (CUDA's
``torch.OutOfMemoryError`` is one) rather than Python's ``MemoryError``: ``DefaultCPUAllocator:
not enough memory: you tried to allocate ...``, ``CUDA out of memory. Tried to allocate ...``,
``MPS backend out of memory``."""


def out_of_memory(e: BaseException) -> bool:
    """``e`` says that memory ran out: Python's ``MemoryError``, or an allocator's failure
    reported as a ``RuntimeError`` (:data:`_ALLOCATOR_FAILURE`, read in its first 1,000
    characters)."""
    if isinstance(e, MemoryError):
        return True
    return isinstance(e, RuntimeError) and bool(_ALLOCATOR_FAILURE.search(str(e)[:1000]))


def out_of_memory_message(command: str, e: BaseException) -> str:
    """The one line for a command that ran out of memory: what ran, the allocator's own words
    (their first line, cut short) and what to change."""
    said = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    return (f"nmtkit: error: out of memory while running nmtkit {command} ({said}): the model, "
            "batch or input asks for more memory than this machine has; make it smaller (a "
            "smaller model, train.max_tokens, --batch-size, --beam) or use a larger machine")


def main(argv: list[str] | None = None) -> int:
    """Run ``nmtkit ARGV`` (default: the command line); the exit status: 0; 2 for an error of
    the user's input (:class:`~nmtkit.errors.UserError`, a path that is not there, an output
    that cannot be written) or for memory running out (``MemoryError``, an allocator's
    failure: :func:`out_of_memory`), answered with one line and no traceback; 130 when
    interrupted. Any other exception is a bug: it propagates with its traceback (Python's
    exit status 1)."""
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    if isinstance(getattr(args, "beam", None), int) and args.beam < 1:
        print(f"nmtkit: error: --beam must be >= 1, got {args.beam}", file=sys.stderr)
        return 2
    try:
        rc: int = args.func(args)
        return rc
    # The input's fault (ConfigError, CorpusError, CheckpointError...), a path given that is
    # not there, an output that cannot be written (the work kept, the message says where).
    except (UserError, FileNotFoundError, OutputError) as e:
        print(f"nmtkit: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable output, run directory or export directory
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"nmtkit: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        print(out_of_memory_message(args.command, e), file=sys.stderr)
        return 2


def console() -> None:
    """The ``nmtkit`` console script (and ``python -m nmtkit``): :func:`main`, then exit with
    its status.

    Before the interpreter shuts down, every object alive is moved out of the garbage
    collector's sight (``gc.freeze``): the collections of the shutdown then skip PyTorch's
    hundreds of thousands of objects, which otherwise take about 0.4 s of a one-sentence
    ``nmtkit translate`` on a 2-core CPU (``benchmarks/cold_start.py``). Nothing else of the
    shutdown changes: atexit handlers run, files are flushed and closed, modules are
    cleared. (Not in :func:`main`, which tests and scripts call in a process that goes on.)
    """
    rc = main()
    gc.freeze()
    sys.exit(rc)
