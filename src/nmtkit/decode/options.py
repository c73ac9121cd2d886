"""What one translation call asks for besides its lines: :class:`TranslateOptions`, taken by
every translator (:meth:`nmtkit.decode.translator.Translator.translate`,
:meth:`nmtkit.export.ctranslate2_engine.CTranslate2Translator.translate`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .deadline import Deadline


@dataclass(frozen=True)
class TranslateOptions:
    """What one ``translate`` call asks for besides its lines. A ``None`` keeps the
    translator's own decoding option (its ``decode_cfg``: ``decode.beam``,
    ``decode.batch_size``, ...; resolved and checked by
    :func:`~nmtkit.decode.text_translator.decode_options`, so a wrong type or value is a
    ``ValueError`` naming it)."""

    beam: int | None = None
    batch_size: int | None = None
    n_best: int | None = None
    """Translations per line (at most the beam, unless ``mbr``, ``decode.rerank`` or
    sampling gives the candidates)."""
    length_penalty: float | None = None
    mbr: int | None = None
    """Minimum Bayes risk decoding over that many candidates: the list holds them, the best
    expected utility first, cut to ``n_best`` (:mod:`nmtkit.decode.mbr`)."""
    max_length: int | None = None
    """Caps every output at that many tokens (EOS not counted; at least 1) on top of the
    configured ``max_len_a * src_len + max_len_b`` (and the model's position table)."""
    tgt_lang: str | None = None
    """The language to translate into, for a model of ``data.directions`` (Johnson et al.
    2017): its ``<2xx>`` token goes first in every source (the source tokens of each
    translation start with it). ``None`` for a model with one target language; a
    ``ValueError`` naming the languages when it has several or for another one
    (:meth:`~nmtkit.decode.text_translator.TextTranslator.target_tag`)."""
    prefixes: Sequence[str] | None = None
    """One target text per line (``""``: none) that its translation must start with; it is
    tokenized with the target tokenizer, kept as it is, and the search continues after it
    (an empty source line still gives an empty translation). A line cut into sentences
    gets it on its first sentence; a prefix of several sentences is shared out, its k-th
    sentence starting the line's k-th (:mod:`nmtkit.decode.targets`)."""
    constraints: Sequence[Sequence[str]] | None = None
    """Per line, target phrases (texts) its translation must contain (lexically constrained
    beam search, :mod:`nmtkit.decode.constraints`), at most
    :data:`~nmtkit.decode.limits.MAX_PHRASES` a line. Only the output cap can keep a phrase
    out (a phrase longer than it is cut to it, with a warning): each translation says
    whether it has them all (``constraints_met``), and in an n-best list those that have
    them all come first. A line cut into sentences has each phrase placed on one of them:
    where the model's free translation holds it, else where holding it costs the least
    (:mod:`nmtkit.decode.targets`). A prefix or phrase with a token the target vocabulary
    lacks is refused (:meth:`~nmtkit.decode.translator.Translator.target_ids`) rather than
    written as ``<unk>``."""
    token_scores: bool = False
    """Each translation carries ``token_log_probs``."""
    alignments: bool = False
    """Each translation carries its ``alignment`` (source position, target position) from
    the attention."""
    need_attention: bool = False
    """Each translation carries the source attention, (len(tokens) + 1, source positions)."""
    alignment_layer: int | None = None
    alignment_head: int | None = None
    """The source attention that alignments and ``attention`` come from (``None``:
    ``decode.alignment_layer``/``_head``); other than -1, -1 (the last layer, the heads'
    mean: what the search records) it costs one teacher-forced pass per translation
    (:func:`~nmtkit.decode.translator.chosen_source_attention`)."""
    deadline: Deadline | None = None
    """Checked by the search before every step (:mod:`nmtkit.decode.deadline`): once it has
    passed, or was cancelled, the call stops with
    :class:`~nmtkit.decode.deadline.DeadlineExceeded` within one step (``nmtkit serve``
    gives each request one, from ``--timeout``); ``None``: no limit, no checks."""
    split_sentences: bool | None = None
    """Cut each line into sentences and join their translations (``None``:
    ``decode.split_sentences``; :mod:`nmtkit.decode.lines` says what n-best lists, scores
    and alignments of a line of several sentences are). Lines with ``prefixes`` or
    ``constraints`` are cut too (:mod:`nmtkit.decode.targets` places them)."""
    protect_spans: bool | None = None
    """Carry over what the vocabulary cannot say, URLs and e-mail addresses (``None``:
    ``decode.protect_spans``; :mod:`nmtkit.data.placeholders`)."""
    progress: Callable[[int, int], None] | None = None
    """Called as ``progress(done, total)`` while the call works: ``done`` more sentences
    translated (a batch, or the empty lines at once), of ``total`` sentences in the call
    (after sentence splitting: the sentences, not the lines). ``nmtkit translate`` and the
    other commands draw their progress bar with it (:mod:`nmtkit.cli.progress`)."""

    def decode_overrides(self) -> dict[str, Any]:
        """The fields that replace the translator's decoding options
        (:func:`~nmtkit.decode.text_translator.decode_options`)."""
        return {"beam": self.beam, "batch_size": self.batch_size, "n_best": self.n_best,
                "length_penalty": self.length_penalty, "mbr": self.mbr,
                "alignment_layer": self.alignment_layer, "alignment_head": self.alignment_head,
                "split_sentences": self.split_sentences, "protect_spans": self.protect_spans}
