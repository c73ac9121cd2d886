"""What every command's parser shares: the help formatter that shows defaults, one way to add
a command (its help, examples and run function), and the argument types and texts several
commands use (``--device``, ``--threads``, ``--port``, ``--no-fast``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

Subparsers = argparse._SubParsersAction  # what ArgumentParser.add_subparsers returns

NO_FAST_HELP = ("run the readable model as written: no nmtkit.fast speed-ups "
                "(same results within float tolerance)")
THREADS_HELP = ("torch threads (0 = PyTorch's default, one per core); beside another job "
                "take fewer: two jobs that each use every core slow each other far more "
                "than twofold (training: train.threads)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown after each help text, ``(default: X)``, unless the text already says
    ``(default ...)`` or there is none to show (``None``, a flag's ``False``, an empty list);
    descriptions wrapped by paragraph; the indented lines of an example epilog kept as they
    are."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("(default" in text or default is None or default is False or default == []
                or default is argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in text.strip("\n").split("\n\n"):
            if para.startswith("  "):  # example commands: verbatim
                paragraphs.append("\n".join(indent + line for line in para.splitlines()))
            else:
                paragraphs.append(super()._fill_text(para, width, indent))
        return "\n\n".join(paragraphs)


def add_command(sub: Subparsers[argparse.ArgumentParser], name: str,
                run: Callable[[argparse.Namespace], int], *, help: str, examples: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``nmtkit NAME``: ``help`` is its line in the top-level summary, its own
    ``--help`` shows defaults (:class:`HelpFormatter`) and ends with ``examples`` (indented
    command lines); ``run(args)`` carries it out and returns the exit status."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, formatter_class=HelpFormatter,
        epilog="examples:\n\n" + examples)
    parser.set_defaults(func=run)
    return parser


def finite_float(text: str) -> float:
    """The type of every float flag (``--length-penalty``, ``--temperature``, tune's grids
    ...): a finite number. ``inf``, ``nan`` and ``1e999`` are refused as the flag is parsed,
    before any model loads (the ranges are the config's: :meth:`DecodeConfig.validate`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def add_quiet_arg(p: argparse.ArgumentParser) -> None:
    """``-q``/``--quiet``: no progress bar (:mod:`nmtkit.cli.progress`)."""
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (one is drawn on stderr only when stderr is a terminal)")


def thread_count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"threads must be 0 (the default) or more, got {value}")
    return value


def device(text: str) -> str:
    """A torch device this machine has (refused at the command line, not as a traceback
    from deep inside the first tensor moved there: :func:`nmtkit.checkpoint.check_device`)."""
    if text == "cpu":  # every machine has one: no need to import torch to say so
        return text
    from ..checkpoint import check_device  # torch: imported when another device is named

    try:
        check_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {value}")
    return value


def set_threads(threads: int) -> None:
    """``--threads``: torch's intra-op threads for this process (0 = PyTorch's default, one per
    core). Two jobs that each use every core of a small CPU slow each other far more than
    twofold (threads wait on each other's time slices), so a job beside another takes fewer."""
    if threads:
        import torch

        torch.set_num_threads(threads)
