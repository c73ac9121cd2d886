"""Back-translation (Sennrich et al. 2016): synthetic training pairs from monolingual text.

A model trained in the reverse direction (target -> source) translates monolingual
target-language sentences; each translation becomes a synthetic source beside its
original sentence, the target. ``nmtkit backtranslate`` writes the pairs as
``PREFIX.<src_lang>`` / ``PREFIX.<tgt_lang>``, which the forward run reads through
``data.extra`` (weighted, and tagged so that the model can tell synthetic sources from
real ones: Caswell et al. 2019)::

    nmtkit backtranslate --model runs/en_de/best.pt -i mono.en -o synth --sampling --seed 1
    # forward recipe: data.extra: [{path: synth, weight: 1, tag: "<bt>"}]

It lives in ``train/`` because it prepares training data with a trained model; the data
modules below it never load a model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import DataConfig
from ..decode.text_translator import TextTranslator
from ..errors import UserError
from ..io import check_file_prefix, write_all_or_keep

log = logging.getLogger(__name__)


@dataclass
class BackTranslation:
    """What :func:`backtranslate` wrote."""

    src_file: Path
    """The synthetic sources (the reverse model's translations), ``PREFIX.<src_lang>``."""
    tgt_file: Path
    """The monolingual lines, ``PREFIX.<tgt_lang>``."""
    pairs: int
    dropped_empty: int
    """Empty (or blank) input lines, left out of both files."""
    empty_translations: int
    """Pairs whose translation came out empty (kept for alignment; training skips them)."""


def synthetic_files(reverse: DataConfig, prefix: str | Path) -> tuple[Path, Path]:
    """(``PREFIX.<src_lang>``, ``PREFIX.<tgt_lang>``) of the forward direction: the reverse
    model's target language is the forward source language, and the other way round."""
    return Path(f"{prefix}.{reverse.tgt_lang}"), Path(f"{prefix}.{reverse.src_lang}")


def backtranslate(translator: TextTranslator, reverse: DataConfig, lines: list[str],
                  prefix: str | Path, tgt_lang: str | None = None,
                  progress: Callable[[int, int], None] | None = None) -> BackTranslation:
    """Translate the monolingual ``lines`` (target language of the forward direction, the
    source language of the ``reverse`` model) and write the synthetic pairs, line-aligned,
    both files or neither. Blank lines are dropped; surrounding whitespace is stripped.
    ``tgt_lang``: the language a model of ``data.directions`` translates into (``reverse``
    then reads that one direction: :func:`nmtkit.data.directions.evaluation_direction`).
    ``progress``: told of the sentences translated
    (:attr:`~nmtkit.decode.options.TranslateOptions.progress`)."""
    check_file_prefix(prefix, "output prefix")
    mono = [line.strip() for line in lines]
    kept = [line for line in mono if line]
    if not kept:
        raise UserError(f"nothing to back-translate: the input's {len(mono)} line(s) are all "
                         "blank")
    translator.target_tag(tgt_lang)  # a missing or unknown language: an error before any work
    src_file, tgt_file = synthetic_files(reverse, prefix)
    if src_file == tgt_file:  # before any work, too
        raise UserError(f"the reverse model translates {reverse.src_lang} into itself: "
                         "back-translation needs two languages")
    hyps = [" ".join(h.splitlines()) for h in translator.translate_lines(kept, tgt_lang=tgt_lang,
                                                                    progress=progress)]
    write_all_or_keep([(src_file, "".join(h + "\n" for h in hyps), "back-translations"),
                       (tgt_file, "".join(line + "\n" for line in kept), "monolingual lines")])
    result = BackTranslation(src_file, tgt_file, len(kept), len(mono) - len(kept),
                             sum(1 for h in hyps if not h.strip()))
    log.info("back-translated %d lines (%d blank dropped, %d empty translations) into %s, %s",
             result.pairs, result.dropped_empty, result.empty_translations, src_file, tgt_file)
    return result
