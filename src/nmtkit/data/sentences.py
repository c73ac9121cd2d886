"""Lines -> sentences: what a line of running text is cut into before it is translated.

Models trained on one-sentence pairs (Multi30k's captions, most parallel corpora) read a
paragraph as one long sentence and drop or merge parts of it; the translator
(:mod:`nmtkit.decode.lines`) therefore cuts each line into sentences, translates them all in
one batch and joins each line's translations again. The cutting is pysbd's (Sadvilkar and
Neumann 2020, "PySBD: Pragmatic Sentence Boundary Disambiguation"): the Golden Rules of
the Pragmatic Segmenter, per language, so that German abbreviations and ordinals ("Dr.
Müller kam am 3. Mai.") end no sentence. A language pysbd has no rules for is cut with its
English rules (a warning, once per language).

:func:`split_sentences` never cuts inside a span it is told to keep whole (a URL, an e-mail
address, a decimal number: :func:`nmtkit.data.placeholders.find_spans`), and
:func:`sentence_separator` says how translations are joined again: with a space, or with
nothing for a target language written without spaces (Chinese, Japanese, Thai, ...).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import pysbd

from ..config import DataConfig

log = logging.getLogger(__name__)

NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo"})
"""Languages whose sentences follow each other without a space (Chinese, Japanese, Thai, Lao,
Khmer, Burmese, Tibetan): their translations are joined with ``""``."""

SENTENCE_ENDS = frozenset(".!?…;\u037e。！？｡؟۔।॥։።᠃")
"""The marks that can end a sentence in pysbd's languages. A line with none of them before
its last word is one sentence: it is returned without asking pysbd (most lines of a corpus
of captions or of one-sentence pairs, at no cost)."""

_TRAILING = re.compile("[\\s.!?…;\u037e。！？｡؟۔।॥։።᠃\"'”’»«)\\]}]*$")
"""What may follow a sentence's last word: its end marks, closing quotes and brackets."""

_warned: set[str] = set()


def base_language(lang: str) -> str:
    """The language of a code without its region or script (``pt_br`` -> ``pt``, ``zh-Hans``
    -> ``zh``), lowercased."""
    return re.split(r"[-_]", lang.strip(), maxsplit=1)[0].lower()


def sentence_separator(lang: str) -> str:
    """What goes between two translated sentences of one line in ``lang``: ``""`` for a
    language written without spaces (:data:`NO_SPACE_LANGUAGES`), else one space."""
    return "" if base_language(lang) in NO_SPACE_LANGUAGES else " "


@cache
def _segmenter(lang: str) -> Any:
    if lang not in pysbd.languages.LANGUAGE_CODES:
        if lang not in _warned:
            _warned.add(lang)
            log.warning("sentence splitting: pysbd has no rules for language %r; its English "
                        "rules are used", lang)
        lang = "en"
    return pysbd.Segmenter(language=lang, clean=False)


def sentence_bounds(text: str, lang: str, keep: Sequence[tuple[int, int]] = ()) -> list[int]:
    """Character offsets in ``text`` where a new sentence starts (0 not included), none of
    them inside a range of ``keep`` ((start, end) offsets, end exclusive)."""
    if not any(c in SENTENCE_ENDS for c in _TRAILING.sub("", text)):
        return []
    bounds, pos = [], 0
    for piece in _segmenter(base_language(lang)).segment(text):
        piece = piece.strip()
        if not piece:
            continue
        at = text.find(piece, pos)
        if at < 0:  # pysbd changed the text: no reliable offsets, keep the line whole
            log.debug("sentence splitting: segment %r not found in %r", piece, text)
            return []
        if pos:
            bounds.append(at)
        pos = at + len(piece)
    return [b for b in bounds if not any(start < b < end for start, end in keep)]


def split_sentences(text: str, lang: str, keep: Sequence[tuple[int, int]] = ()) -> list[str]:
    """The sentences of ``text`` (a line in language ``lang``, an ISO 639-1 code such as
    ``de``), stripped, in order; ``[]`` for a blank line. No sentence ends inside a range of
    ``keep`` ((start, end) character offsets into ``text``)."""
    if not text.strip():
        return []
    cuts = [0, *sentence_bounds(text, lang, keep), len(text)]
    sentences = (text[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False))
    return [s for s in sentences if s]


def text_languages(data: DataConfig) -> tuple[str | None, str | None]:
    """(the language of a model's input, of its output) for the rules that cut sentences
    and join them: ``data.src_lang``/``tgt_lang``, or for a model of ``data.directions`` the
    one source (target) language of its directions, ``None`` where it has several (the input's
    sentences are then cut with English rules; the output's language is the call's
    ``tgt_lang``)."""
    if not data.directions:
        return data.src_lang, data.tgt_lang
    pairs = [d.split("-", 1) for d in data.directions]
    sources, targets = {p[0] for p in pairs}, {p[-1] for p in pairs}
    return (next(iter(sources)) if len(sources) == 1 else None,
            next(iter(targets)) if len(targets) == 1 else None)
