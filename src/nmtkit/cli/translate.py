"""``nmtkit translate``: lines in, translations out (files or stdin/stdout, or a stream),
with N best, scores, alignments, forced prefixes and terminology constraints."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from ..decode.limits import MAX_PHRASES
from ..errors import UserError
from ..io import refuse_overwriting_inputs, write_or_keep
from .decode_options import (
    add_alignment_choice_args,
    add_decode_args,
    add_engine_args,
    add_n_best_args,
    model_files,
    translator_from_args,
)
from .options import Subparsers, add_command
from .text import InputError, check_lines, one_line, read_input

if TYPE_CHECKING:
    from ..decode.text_translator import TextTranslator
    from ..decode.translation import Translation
    from .progress import Progress

log = logging.getLogger("nmtkit.cli")

EXAMPLES = ('  echo "Ein Hund läuft." | nmtkit translate --model runs/NAME/best.pt\n'
            "  nmtkit translate --model runs/NAME/best.pt --beam 5 -i in.de -o out.en\n"
            "  nmtkit translate --engine ctranslate2 --model ct2 -i in.de -o out.en\n"
            "  nmtkit translate --model runs/DE_EN_DE/best.pt --tgt-lang de -i in.en -o out.de\n"
            "  nmtkit translate --model runs/EN_DE/best.pt --rerank 20 "
            "--reverse-model runs/DE_EN/best.pt -i in.en -o out.de")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    tr = add_command(sub, "translate", run, examples=EXAMPLES,
                     help="translate lines (stdin/stdout by default)")
    add_decode_args(tr)
    add_engine_args(tr, numpy=True)
    tr.add_argument("-i", "--input", help="input file (default stdin)")
    tr.add_argument("-o", "--output", help="output file (default stdout)")
    tr.add_argument("--tgt-lang", metavar="LANG",
                    help="the language to translate into, for a model of several directions "
                    "(data.directions; required when it has several target languages)")
    tr.add_argument("--src-lang", metavar="LANG",
                    help="a model of several directions reranking with --reverse-model: the "
                    "language of the input (needed when several directions go into --tgt-lang)")
    add_n_best_args(tr)
    tr.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                    help="answer each stdin line as soon as it arrives (one line per batch) "
                    "instead of reading all input first; the default when stdin is a terminal")
    tr.add_argument("--prefix-file", metavar="FILE",
                    help="forced target prefixes, one per input line (an empty line for none): "
                    "each translation starts with its prefix, and decoding continues after it")
    tr.add_argument("--constraints-file", metavar="FILE",
                    help="terminology: per input line, tab-separated target phrases that the "
                    f"translation must contain (an empty line for none; at most {MAX_PHRASES} a "
                    "line, of words the model knows); lexically constrained beam search (dynamic "
                    "beam allocation, Post & Vilar 2018). Only the output cap can keep a phrase "
                    "out (one longer than the cap is cut to it): that line gets a warning; N best "
                    "lists only translations with every phrase (and the best one always)")
    tr.add_argument("--scores", action="store_true",
                    help="write 'score<TAB>token log-probs<TAB>text' ('i<TAB>' first with N best): "
                    "the ranking score, then the log-probability of each output token and of </s> "
                    "(they sum to the sentence log-probability)")
    tr.add_argument("--alignments", action="store_true",
                    help="append '<TAB>i-j ...' (Pharaoh): each target token j with the source "
                    "token i it attends to most (last layer, heads averaged, unless "
                    "--alignment-layer/--alignment-head; token positions)")
    add_alignment_choice_args(tr)


def run(a: argparse.Namespace) -> int:
    if (a.alignment_layer is not None or a.alignment_head is not None) and not a.alignments:
        raise UserError("--alignment-layer/--alignment-head choose the attention that "
                         "--alignments reads: add --alignments")
    refuse_overwriting_inputs([a.output], [a.input, a.prefix_file, a.constraints_file,
                                           *model_files(a)], "-o")
    bundle, tr = translator_from_args(a, engine=a.engine or "auto")  # the library chooses
    tr.target_tag(a.tgt_lang)  # a multilingual model needs --tgt-lang: say so before reading input
    if a.src_lang:  # read for reranking only, but a language the model does not know is a mistake
        from ..data.directions import evaluation_direction

        evaluation_direction(bundle.cfg.data, a.src_lang, a.tgt_lang)
    prefixes, constraints = per_line_files(a)
    if a.stream or (a.stream is None and not a.input and not a.output and sys.stdin.isatty()):
        if a.input or a.output:
            raise UserError("--stream reads stdin and writes stdout: drop -i/-o")
        return stream(a, tr, prefixes, constraints)
    lines = read_input(a.input)
    check_lines(a.prefix_file, prefixes, len(lines))
    check_lines(a.constraints_file, constraints, len(lines))
    from .progress import progress_bar

    with progress_bar(a.quiet, "translate") as progress:
        results = translate_with_files(a, tr, lines, prefixes, constraints, 1, progress)
    n_best = tr.decode_cfg.n_best > 1
    out = "".join(answer(i, hs, a, n_best) for i, hs in enumerate(results))
    if a.output:
        write_or_keep(a.output, out, "translations")
    else:
        sys.stdout.write(out)
    return 0


def output_line(i: int, h: Translation, n_best: bool, scores: bool, alignments: bool) -> str:
    """One output line: ``[i<TAB>][score<TAB>][token log-probs<TAB>]text[<TAB>alignment]``."""
    from ..decode.text_translator import pharaoh

    cols = [str(i)] if n_best else []
    if n_best or scores:
        cols.append(f"{h.ranking_score:.4f}")  # the order of an n-best list follows it
    if scores:
        cols.append(" ".join(f"{x:.4f}" for x in h.token_log_probs or []))
    cols.append(one_line(h.text))
    if alignments:
        cols.append(pharaoh(h.alignment))
    return "\t".join(cols) + "\n"


def per_line_files(a: argparse.Namespace) -> tuple[list[str] | None, list[list[str]] | None]:
    """(the ``--prefix-file`` lines, the ``--constraints-file`` lines split at tabs)."""
    from ..data.corpora import read_lines

    prefixes = read_lines(a.prefix_file) if a.prefix_file else None
    constraints = ([[p for p in line.split("\t") if p.strip()] for line in read_lines(a.constraints_file)]
                   if a.constraints_file else None)
    return prefixes, constraints


def answer(i: int, hs: list[Translation], a: argparse.Namespace, n_best: bool) -> str:
    """The output lines of input line ``i`` (from 0): its best translation, and with N best
    the others that contain every phrase of its ``--constraints-file`` line (one that lacks
    some is left out). A best translation that lacks some (only the output cap can cause it)
    is written with a warning that names the line."""
    if not hs[0].constraints_met:
        where = a.input or "<stdin>"
        log.warning("%s:%d: the translation lacks some phrases of %s:%d: they did not fit under "
                    "the output cap", where, i + 1, a.constraints_file, i + 1)
    shown = [h for j, h in enumerate(hs) if j == 0 or h.constraints_met] if n_best else hs[:1]
    return "".join(output_line(i, h, n_best, a.scores, a.alignments) for h in shown)


def translate_with_files(a: argparse.Namespace, tr: TextTranslator, lines: list[str],
                         prefixes: list[str] | None, constraints: list[list[str]] | None,
                         first: int, progress: Progress | None = None) -> list[list[Translation]]:
    """``tr.translate`` of input lines ``first``, ``first + 1``, ... (from 1) with their
    ``--prefix-file`` / ``--constraints-file`` lines (``progress``: the bar's callback); a
    prefix or constraint that cannot be used is an error naming its file and line."""
    from ..decode.options import TranslateOptions
    from ..decode.text_translator import TargetTextError

    options = TranslateOptions(prefixes=prefixes, constraints=constraints, token_scores=a.scores,
                               alignments=a.alignments, tgt_lang=a.tgt_lang, progress=progress)
    try:
        return tr.translate(lines, options)
    except TargetTextError as e:
        path = a.prefix_file if e.field == "prefixes" else a.constraints_file
        raise InputError(f"{path}:{first + e.index}: {e.problem}") from None


def stream(a: argparse.Namespace, tr: TextTranslator, prefixes: list[str] | None,
           constraints: list[list[str]] | None) -> int:
    """``translate --stream``: answer each stdin line as soon as it has arrived (one line per
    model call), flushing stdout after each, until the end of the input."""
    n_best = tr.decode_cfg.n_best > 1
    for n, raw in enumerate(iter(sys.stdin.buffer.readline, b""), 1):
        try:
            line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise InputError(f"<stdin>:{n}: invalid UTF-8") from None
        for path, given in ((a.prefix_file, prefixes), (a.constraints_file, constraints)):
            if given is not None and n > len(given):
                raise InputError(f"{path} has {len(given)} lines but the input has more")
        (hs,) = translate_with_files(
            a, tr, [line], None if prefixes is None else [prefixes[n - 1]],
            None if constraints is None else [constraints[n - 1]], n)
        sys.stdout.write(answer(n - 1, hs, a, n_best))
        sys.stdout.flush()
    return 0
