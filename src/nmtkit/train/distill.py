"""Sequence-level knowledge distillation (Kim & Rush 2016, Sec. 3.2).

A teacher (one model, or an ensemble: ``--model A.pt --model B.pt``) translates the source
side of the training split with beam search, and a student is trained on the teacher's
translations in place of, or beside, the references. The student learns the teacher's
(simpler, more regular) output distribution, and an ensemble can so be folded into one
model of the same size and speed. ``nmtkit distill`` writes the distilled pairs as
``PREFIX.<src_lang>`` (the training sources) / ``PREFIX.<tgt_lang>`` (the teacher's
translations), which a run reads through ``data.extra``::

    nmtkit distill --model runs/a/best.pt --model runs/b/best.pt --beam 5 -o distilled
    # student recipe: data.extra: [{path: distilled, weight: 1, tag: ""}]

It lives in ``train/`` beside back-translation: both prepare training data with a trained
model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..config import DataConfig
from ..data.corpora import load_parallel, split_files
from ..decode.text_translator import TextTranslator
from ..errors import UserError
from ..io import check_file_prefix, refuse_overwriting_inputs, write_all_or_keep

log = logging.getLogger(__name__)


@dataclass
class Distillation:
    """What :func:`distill` wrote."""

    src_file: Path
    """The training split's sources, ``PREFIX.<src_lang>``."""
    tgt_file: Path
    """The teacher's translations of them, ``PREFIX.<tgt_lang>``."""
    pairs: int
    empty_translations: int
    """Pairs whose translation came out empty (kept for alignment; training skips them)."""


def distill(translator: TextTranslator, data: DataConfig, prefix: str | Path,
            split: str | None = None, models: Iterable[str | Path] = (),
            progress: Callable[[int, int], None] | None = None) -> Distillation:
    """Translate the sources of ``split`` (default: the teacher's training split,
    ``data.train``) of the teacher's corpus and write the distilled pairs, line-aligned,
    both files or neither. Refused before any work: output files that are the split's own
    files (``-o`` equal to the split's prefix would replace its references with the
    teacher's translations), or the teacher's checkpoints ``models`` (``-o runs/t/best`` of
    a teacher into Portuguese would write ``best.pt``). ``progress``: told of the sentences
    translated (:attr:`~nmtkit.decode.options.TranslateOptions.progress`)."""
    if data.directions:
        raise UserError("distill translates one direction: a model of data.directions is "
                         "not supported as a teacher (distil each direction's data with a "
                         "single-direction model)")
    check_file_prefix(prefix, "output prefix")
    split = split or data.train
    src_file, tgt_file = Path(f"{prefix}.{data.src_lang}"), Path(f"{prefix}.{data.tgt_lang}")
    if src_file == tgt_file:
        raise UserError(f"the teacher translates {data.src_lang} into itself: the two files "
                         "would be one")
    read = split_files(data, split)
    refuse_overwriting_inputs([src_file, tgt_file], [*(read[:2] if read else ()), *models],
                              "output prefix")
    sources = load_parallel(data, split).src
    hyps = [" ".join(h.splitlines()) for h in translator.translate_lines(sources, progress=progress)]
    write_all_or_keep([(src_file, "".join(s + "\n" for s in sources), "training sources"),
                       (tgt_file, "".join(h + "\n" for h in hyps), "teacher's translations")])
    result = Distillation(src_file, tgt_file, len(sources), sum(1 for h in hyps if not h.strip()))
    log.info("distilled %d pairs (%d empty translations) into %s, %s", result.pairs,
             result.empty_translations, src_file, tgt_file)
    return result
