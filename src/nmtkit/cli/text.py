"""Text the commands read: input lines (a file or stdin, one output line per input line), and
the scored text of evaluate and tune (a corpus split, or ``--src FILE --ref FILE``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..errors import UserError

if TYPE_CHECKING:
    from ..config import DataConfig
    from ..decode.text_translator import LoadedModel


class InputError(UserError):
    """Input text that cannot be read (the message names where)."""


def read_input(path: str | None) -> list[str]:
    """The lines of ``path`` (``None`` or ``-``: stdin), without their line ends. An empty
    file and empty stdin alike give no lines, with a warning: no lines in, no lines out (an
    empty file was an error where empty stdin was not)."""
    if path and path != "-":
        from ..data.corpora import read_lines

        lines = read_lines(path, empty_ok=True)
    else:
        lines = read_stdin()
    if not lines:
        print(f"nmtkit: warning: {path if path and path != '-' else '<stdin>'} is empty: "
              "nothing to translate", file=sys.stderr)
    return lines


def read_stdin() -> list[str]:
    """The lines of stdin (UTF-8), without their line ends."""
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"<stdin>:{line}: invalid UTF-8") from None
    # Split on "\n" only: str.splitlines() would also break at \x1c, \x85, \u2028 and friends,
    # and one input line must always give exactly one output line.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def one_line(text: str) -> str:
    """A translation never spans lines (output line i answers input line i)."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def check_lines(path: str | None, given: list[Any] | None, n: int) -> None:
    """``InputError`` unless the lines of ``path`` (``given``, if any) are one per input line."""
    if given is not None and len(given) != n:
        raise InputError(f"{path} has {len(given)} lines but the input has {n}: give one line per "
                         "input line (empty for none)")


def add_scored_text_args(q: argparse.ArgumentParser, split_help: str) -> None:
    """``--split`` or ``--src``/``--ref``, and the direction of a multilingual model."""
    q.add_argument("--split", help=split_help)
    q.add_argument("--src", help="source file")
    q.add_argument("--ref", help="reference file")
    q.add_argument("--src-lang", metavar="LANG",
                   help="a model of several directions (data.directions): the source "
                   "language of --split (needed when several directions go into --tgt-lang)")
    q.add_argument("--tgt-lang", metavar="LANG",
                   help="a model of several directions: the direction's target language "
                   "(needed when it has several)")


def scored_text(a: argparse.Namespace, bundle: LoadedModel, command: str
                ) -> tuple[list[str], list[str], str, DataConfig, str | None]:
    """(sources, references, their name, the data section they come from, the target
    language to ask for) of ``--split NAME`` (a corpus split, one direction of a multilingual
    model) or of ``--src FILE --ref FILE``."""
    from ..data.corpora import load_parallel, read_lines
    from ..data.directions import evaluation_direction

    data = bundle.cfg.data
    if a.split and (a.src or a.ref):
        raise InputError(f"{command} takes --split NAME or --src FILE --ref FILE, not both")
    if a.split:  # one direction of a multilingual model (data.directions): its files
        data, direction = evaluation_direction(data, a.src_lang, a.tgt_lang)
        tgt_lang = direction.tgt if bundle.cfg.data.directions else a.tgt_lang
        par = load_parallel(data, a.split)
        return par.src, par.tgt, a.split, data, tgt_lang
    if a.src and a.ref:
        if a.src_lang:  # not needed to translate --src, but a wrong one is a mistake: say so
            evaluation_direction(data, a.src_lang, a.tgt_lang)
        src, ref = read_lines(a.src), read_lines(a.ref)
        if len(src) != len(ref):
            raise InputError(f"{a.src} has {len(src)} lines but {a.ref} has {len(ref)}: "
                             "give one reference line per source line")
        return src, ref, a.src, data, a.tgt_lang
    raise InputError(f"{command} needs --split NAME or --src FILE --ref FILE")


def split_inputs(data: DataConfig, split: str) -> list[str]:
    """The files ``--split`` was read from (no output may land on them): a parallel or
    prepared corpus's two files, a TSV file; none for the copy task."""
    from ..data.corpora import split_files

    files = split_files(data, split)
    if files is not None:
        return [str(files[0]), str(files[1])]
    if data.corpus == "tsv":
        return [data.tsv_file if data.tsv_split else split]
    return []
