"""The text pipeline of every translator, :class:`TextTranslator`, whatever engine runs the
search: nmtkit's own :class:`~nmtkit.decode.translator.Translator` (PyTorch),
:class:`~nmtkit.decode.lite_translator.LiteTranslator` (numpy) or
:class:`~nmtkit.export.ctranslate2_engine.CTranslate2Translator`. It runs the whole
line-to-line pipeline once (:meth:`TextTranslator.translate`): split each line into
sentences and protect the spans the vocabulary cannot say (:mod:`nmtkit.decode.lines`),
encode, sort all sentences by length, batch, search (the engine's one method,
:meth:`TextTranslator.search`, over :mod:`nmtkit.decode.engine`'s records), unsort, choose
(MBR, reranking), restore the spans, detokenize and join each line's sentences. A call takes
the lines and one :class:`TranslateOptions`. :func:`decode_options` is the one way optional
decoding arguments (command line, server, Python API) become a
:class:`~nmtkit.config.DecodeConfig`.

This module imports no PyTorch (what an engine returns is numpy), so that an engine that
needs none starts without it: a one-sentence ``nmtkit translate`` does not pay PyTorch's
import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..config import Config, DecodeConfig, build_section
from ..data.placeholders import unknown_spans, vocabulary_characters
from ..data.sentences import sentence_separator
from ..data.vocab import BOS, EOS, PAD, UNK
from ..errors import UserError
from ..rules import output_cap
from .choice import candidate_options, choose_all
from .engine import Found, SearchRequest, Source
from .limits import MAX_PHRASES
from .lines import (
    join_lines,
    plan_lines,
    protect_plan,
    restore_translation,
    source_reading_order,
)
from .options import TranslateOptions
from .rerank import require_reverse
from .targets import SentenceTargets, holds, least_cost, prefix_pieces
from .translation import Translation

if TYPE_CHECKING:
    from ..data.placeholders import Protected
    from ..data.tokenizers import Tokenizer
    from ..data.vocab import Vocab
    from .rerank import Reranker

log = logging.getLogger(__name__)


LONG_SEARCH = 256
"""An output cap (tokens) from which a beam search without early stopping is warned of: it
runs every hypothesis on until it ends or reaches the cap, and one that does not end makes
the work grow with the cap's square (a copy model's 900-token line at beam 2: 34 s, 0.2 s
with ``decode.early_stop``; a 10,000-character line of a Multi30k model: 100 s against 9 s)."""


def warn_of_a_long_search(cfg: DecodeConfig, src_lengths: Sequence[int],
                          max_length: int | None) -> None:
    """A warning when the longest source lets a beam search without early stopping run to
    :data:`LONG_SEARCH` output tokens or more, naming what bounds it."""
    if cfg.sampling or cfg.beam == 1 or cfg.early_stop or not src_lengths:
        return
    longest = max(src_lengths)
    cap = output_cap(longest, cfg.max_len_a, cfg.max_len_b, max_length)  # the search's
    if cap >= LONG_SEARCH:
        log.warning("an input of %d source tokens lets the beam search (beam %d) run to %d "
                    "output tokens: without early stopping every hypothesis goes on until it "
                    "ends or reaches that cap, which can take minutes; --early-stop "
                    "(decode.early_stop) ends each sentence once its n best have ended, "
                    "--max-len-a/--max-len-b (decode.max_len_a/max_len_b; the server's "
                    "max_length) lower the cap", longest, cfg.beam, cap)


class TargetTextError(UserError):
    """A forced prefix or constraint phrase that cannot be used. ``field`` ("prefixes" or
    "constraints") and ``index`` (its line, from 0) say where it was given, so that the
    command line can name the file and line, and the server the request field;
    ``problem`` is the message without them."""

    def __init__(self, field: str, index: int, problem: str) -> None:
        super().__init__(f"{field}[{index}]: {problem}")
        self.field, self.index, self.problem = field, index, problem


def text_lines(lines: Iterable[str], name: str = "lines") -> Iterator[str]:
    """The items of ``lines``, each checked as it is consumed (nothing is copied): a
    ``TypeError`` naming ``name`` for a ``str`` or ``bytes`` where a list of lines is expected
    (iterated, it would give one "line" per character), for something not iterable, and for
    an item that is not a ``str`` (naming its index). The Python API's door for text."""
    if isinstance(lines, (str, bytes, bytearray)) or not isinstance(lines, Iterable):
        raise TypeError(f"{name} must be an iterable of str, got {type(lines).__name__}")
    return _checked_items(lines, name)


def _checked_items(lines: Iterable[str], name: str) -> Iterator[str]:
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(line).__name__}")
        yield line


def alignment_from_attention(attention: np.ndarray, n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """For each of the ``n_tgt`` target tokens, the source token (of the first ``n_src``:
    ``</s>`` excluded) with the most attention: [(i, j)], j = 0, 1, ...

    attention: (>= n_tgt, >= n_src), the source attention at each output step (the last
    decoder layer's averaged over heads, or a named layer/head: :func:`chosen_source_attention`).
    """
    if n_src == 0 or n_tgt == 0:
        return []
    best = attention[:n_tgt, :n_src].argmax(axis=1).tolist()  # (n_tgt,)
    return [(int(i), j) for j, i in enumerate(best)]


def pharaoh(alignment: list[tuple[int, int]] | None) -> str:
    """``0-0 1-2 ...``: source-target pairs in Pharaoh format."""
    return " ".join(f"{i}-{j}" for i, j in alignment or [])


def decode_options(cfg: DecodeConfig, *, max_beam: int | None = None,
                   **overrides: Any) -> DecodeConfig:
    """``cfg`` with the given options replaced; ``None`` means "not given, keep the default".

    The one way the command line, the server and the Python API turn optional arguments
    into a :class:`~nmtkit.config.DecodeConfig` (defaults live only in :mod:`nmtkit.config`):

    - a beam given without ``n_best`` keeps the configured ``n_best`` if it fits, else
      ``n_best`` becomes the beam;
    - ``max_beam`` (the server's limit) clamps the resolved beam (and ``n_best``) to it;
    - the options are checked as a config file's ``decode`` section is (a ``ConfigError``,
      which is a ``ValueError``, naming the option): an unknown one (the known ones listed),
      a wrong type (``beam="4"``, ``beam=2.5``, ``beam=True``);
    - the result is checked: ``ValueError`` for a beam below 1, an ``n_best`` outside
      ``[1, beam]`` (with ``sampling``, ``mbr`` or ``rerank``: below 1; they bound it), a
      ``batch_size`` below 1, or any other value
      that :meth:`~nmtkit.config.DecodeConfig.validate` rejects (e.g. a ``sampling_top_p``).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given and max_beam is None:
        return cfg
    typed = build_section(DecodeConfig, given, "decoding options")  # names and types, as in a config
    given = {k: getattr(typed, k) for k in given}
    beam = given.get("beam", cfg.beam)
    if max_beam is not None:
        beam = max(1, min(beam, max_beam))
        given["beam"] = beam
    free = (given.get("sampling", cfg.sampling) or given.get("mbr", cfg.mbr)
            or given.get("rerank", cfg.rerank))  # n_best not bounded by the beam
    if "n_best" not in given and cfg.n_best > beam and not free:
        given["n_best"] = beam
    out = replace(cfg, **given)
    if out.beam < 1:
        raise UserError(f"beam must be >= 1, got {out.beam}")
    if out.n_best < 1 or (not (out.sampling or out.mbr or out.rerank) and out.n_best > out.beam):
        raise UserError(f"n_best must be between 1 and the beam size ({out.beam}), got {out.n_best}")
    if out.batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {out.batch_size}")
    out.validate("decoding options")
    return out


class LoadedModel(Protocol):
    """What a translator is loaded from, as its callers read it: the model's config."""

    @property
    def cfg(self) -> Config: ...


class TextTranslator:
    """The text pipeline every engine shares, run once per call (:meth:`translate`):

    lines -> sentences (``decode.split_sentences``) -> protected spans
    (``decode.protect_spans``) -> source tokens, cut to the model's position table
    (``max_positions``, ``</s>`` included), reversed for a model that reads them backwards ->
    length order, batches -> :meth:`search` (the engine) -> input order, MBR or reranking
    (:mod:`nmtkit.decode.choice`) -> spans restored -> detokenized -> each line's sentences
    joined (:mod:`nmtkit.decode.lines`).

    An engine subclasses it and writes :meth:`search`, the search of one batch of token
    sequences; it may also say what it cannot do (:meth:`refuses`) and cut batches its own way
    (:meth:`batches`). What it refuses goes to :attr:`fallback` where one is set (the numpy
    engine's: PyTorch's), else it is a ``UserError``.
    """

    engine: ClassVar[str] = "torch"
    """The engine's name, as ``nmtkit translate --engine`` and the library
    (:func:`nmtkit.decode.load.load_translator`) call it."""
    src_vocab: Vocab
    """The source vocabulary: a sentence's ids, and what it lacks is protected
    (``decode.protect_spans``)."""
    tgt_vocab: Vocab
    """The target vocabulary: forced prefixes' and constraint phrases' ids."""
    bundle: LoadedModel | None = None
    """What the translator was loaded from, where :func:`~nmtkit.decode.load.load_translator`
    loaded it (a checkpoint's :class:`~nmtkit.checkpoint.Bundle`, a
    :class:`~nmtkit.lite.checkpoint.LiteBundle`, an export's bundle): its ``cfg`` is the
    model's config."""
    reverse_target: bool = False
    """A right-to-left model (``data.reverse_target``): it cannot continue a forced prefix,
    and its constraint phrases are searched for reversed; its engine gives the output back in
    reading order."""

    def __init__(self, src_tok: Tokenizer, tgt_tok: Tokenizer, decode: DecodeConfig,
                 reverse_source: bool = False, max_positions: int | None = None, *,
                 target_tags: dict[str, str] | None = None,
                 languages: tuple[str | None, str | None] = (None, None)) -> None:
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.languages = languages
        """(input language, output language), :func:`~nmtkit.data.sentences.text_languages`:
        whose rules cut lines into sentences (``None``: English's) and how their
        translations are joined (``None``: the call's ``tgt_lang``, else with a space)."""
        self.decode_cfg = decode
        self.reverse_source = reverse_source
        self.max_positions = max_positions
        """The model's position limit: a source keeps at most ``max_positions - 1`` tokens
        (then ``</s>``), an output at most ``max_positions - 1`` tokens."""
        self.target_tags = dict(target_tags or {})
        """Target language -> the token put first in its sources
        (:func:`nmtkit.data.directions.target_tags`): ``<2xx>`` for a model of
        ``data.directions``, ``""`` for the one target of a model of one direction; empty:
        not known (any ``tgt_lang`` is taken, no token added)."""
        self.reverse: Reranker | None = None
        """The model(s) of the reverse direction that ``decode.rerank`` scores candidates
        with (:mod:`nmtkit.decode.rerank`); ``None``: reranking is refused."""
        self.fallback: Callable[[], TextTranslator] | None = None
        """The translator of the same model that takes a call this engine refuses
        (:meth:`refuses`), built when first needed (:meth:`handed_over`); ``None``: a refused
        call is an error."""
        self._fallback: TextTranslator | None = None

    def target_tag(self, tgt_lang: str | None) -> str:
        """The token that asks the model for ``tgt_lang`` (``""``: none). ``None`` is the
        model's only target language; ``ValueError`` naming the model's languages when it has
        several (Johnson et al. 2017: the target-language token picks the direction) or when
        ``tgt_lang`` is not one of them."""
        tags = self.target_tags
        if not tags:
            return ""
        langs = ", ".join(sorted(tags))
        if tgt_lang is None:
            if len(tags) == 1:
                return next(iter(tags.values()))
            raise UserError(f"this model translates into {langs}: name the target language "
                             "(nmtkit translate --tgt-lang, \"tgt_lang\" in a request, tgt_lang= "
                             "in Python)")
        if tgt_lang not in tags:
            raise UserError(f"target language {tgt_lang!r}: this model translates into {langs} "
                             "only")
        return tags[tgt_lang]

    def source_tokens(self, line: str, tag: str = "") -> tuple[list[str], list[str]]:
        """(the line's tokens in reading order, the same in the order the model reads them),
        cut so that they and ``</s>`` fit in ``max_positions``. A ``tag`` (the target-language
        token, :meth:`target_tag`) comes first in both, unless the line has no token (an
        empty line stays empty)."""
        toks = self.src_tok.encode(line.strip())
        head = [tag] if tag and toks else []
        if self.max_positions is not None and len(head) + len(toks) + 1 > self.max_positions:
            keep = self.max_positions - 1 - len(head)
            log.warning("input of %d tokens truncated to %d", len(head) + len(toks), keep + len(head))
            toks = toks[:keep]
        return head + toks, head + (toks[::-1] if self.reverse_source else list(toks))

    def call_options(self, options: TranslateOptions) -> tuple[DecodeConfig, int | None]:
        """(this call's :class:`DecodeConfig`, its ``max_length``): the decoding options of
        ``options`` resolved as :func:`decode_options` does; ``max_length`` (output tokens,
        EOS not counted; at least 1) lowered to what the position table allows."""
        cfg = decode_options(self.decode_cfg, **options.decode_overrides())
        max_length = options.max_length
        if max_length is not None and (not isinstance(max_length, int) or isinstance(max_length, bool)
                                       or max_length < 1):
            raise UserError(f"max_length must be an int >= 1, got {max_length!r}")
        if self.max_positions is not None:  # the output may not outgrow the position table
            limit = self.max_positions - 1
            max_length = limit if max_length is None else min(max_length, limit)
        return cfg, max_length

    def in_length_order(self, sources: Sequence[Sequence[str]], n_best: int,
                        batches: Callable[[list[int]], Iterable[list[int]]],
                        run: Callable[[list[int]], list[list[Translation]]],
                        progress: Callable[[int, int], None] | None = None
                        ) -> list[list[Translation]]:
        """One list of ``n_best`` translations per source, in input order.

        An empty source gets ``n_best`` empty translations. The others' indices, sorted by
        length (shortest first), go to ``batches``, which cuts them into batches; ``run``
        translates one batch (a list of indices) and returns one list per index.
        ``progress(done, total)`` (:attr:`TranslateOptions.progress`) hears of the empty
        sources, then of each batch.
        """
        results: list[list[Translation] | None] = [None] * len(sources)
        todo = []
        for i, toks in enumerate(sources):
            if toks:
                todo.append(i)
            else:  # nothing to translate: an empty line stays empty
                results[i] = [Translation("", [], [], 0.0)] * n_best
        if progress is not None and len(todo) < len(sources):
            progress(len(sources) - len(todo), len(sources))
        todo.sort(key=lambda i: len(sources[i]))
        for batch in batches(todo):
            for i, translations in zip(batch, run(batch), strict=True):
                results[i] = translations
            if progress is not None:
                progress(len(batch), len(sources))
        return results  # type: ignore[return-value]

    def forced_tokens(self, index: int, prefix: str, max_length: int | None) -> list[str]:
        """The target tokens of line ``index``'s forced prefix. The output cap ``max_length``
        holds the whole output, prefix included: a longer prefix is a :class:`TargetTextError`
        (no translation can start with it; the server's 422 says the same). A prefix longer
        than the length rule (``max_len_a`` x source + ``max_len_b``) stretches the rule."""
        toks = self.prefix_tokens(prefix, None)
        if max_length is not None and len(toks) > max_length:
            raise TargetTextError("prefixes", index, f"prefix of {len(toks)} target tokens, "
                                  f"more than the output cap ({max_length}): a forced prefix "
                                  "is part of the output; shorten it")
        return toks

    def prefix_tokens(self, prefix: str, max_length: int | None, what: str = "prefix") -> list[str]:
        """A forced prefix's (or another text of the output's, ``what``: a constraint) target
        tokens (target tokenizer), cut to ``max_length`` with a warning: the output holds no
        more."""
        toks = self.tgt_tok.encode(prefix.strip()) if prefix.strip() else []
        if max_length is not None and len(toks) > max_length:
            log.warning("%s of %d tokens truncated to %d", what, len(toks), max_length)
            toks = toks[:max_length]
        return toks

    def target_ids(self, prefixes: Sequence[str] | None,
                   constraints: Sequence[Sequence[str]] | None, n_lines: int,
                   max_length: int | None = None
                   ) -> tuple[list[list[int]] | None, list[list[list[int]]] | None]:
        """(each line's forced prefix, each line's constraint phrases) as target ids, for
        ``n_lines`` lines (``None`` where not given; blank phrases dropped), each text cut to
        ``max_length`` tokens with a warning (:meth:`prefix_tokens`).

        Checked before any search: one prefix, and one list of phrases, per line
        (``ValueError``); text where text is expected (``TypeError``, :func:`text_lines`);
        then, as a :class:`TargetTextError` naming the line, more than
        :data:`~nmtkit.decode.limits.MAX_PHRASES` phrases, or a token the target
        vocabulary lacks (:meth:`known_ids`). The server calls it to answer such requests
        with a 422 before they queue."""
        forced = None
        if prefixes is not None:
            texts = list(text_lines(prefixes, "prefixes"))
            if len(texts) != n_lines:
                raise UserError(f"{len(texts)} prefixes for {n_lines} lines: give one per line "
                                 "(an empty one for none)")
            if self.reverse_target and any(p.strip() for p in texts):
                raise UserError("a right-to-left model (data.reverse_target) writes the "
                                 "translation's end first: it cannot continue a forced prefix")
            forced = [self.known_ids("prefixes", i, p, max_length) for i, p in enumerate(texts)]
        phrases = None
        if constraints is not None:
            if isinstance(constraints, (str, bytes, bytearray)):
                raise TypeError("constraints must be a list (one per line) of lists of str, got "
                                f"{type(constraints).__name__}")
            rows = [[p for p in text_lines(cs, f"constraints[{i}]") if p.strip()]
                    for i, cs in enumerate(constraints)]
            if len(rows) != n_lines:
                raise UserError(f"{len(rows)} constraint lists for {n_lines} lines: give one "
                                 "per line (an empty one for none)")
            step = -1 if self.reverse_target else 1
            for i, row in enumerate(rows):
                if len(row) > MAX_PHRASES:
                    raise TargetTextError("constraints", i, f"{len(row)} phrases, more than "
                                          f"{MAX_PHRASES} a line (each one costs search work "
                                          "for every hypothesis at every step)")
            phrases = [[self.known_ids("constraints", i, p, max_length)[::step] for p in row]
                       for i, row in enumerate(rows)]  # a right-to-left model writes them reversed
        return forced, phrases

    def known_ids(self, field: str, index: int, text: str, max_length: int | None) -> list[int]:
        """Target ids of a forced prefix (``field`` "prefixes") or a constraint phrase
        ("constraints") of line ``index``, cut to ``max_length`` tokens (:meth:`prefix_tokens`).
        A :class:`TargetTextError` if a token of it is not in the target vocabulary: the
        search would write it as ``<unk>`` (or SentencePiece's ``⁇``) into the translation.
        With a subword tokenizer that is a piece the vocabulary lacks (a character never
        seen in training): a word it spells in known pieces is fine."""
        what = "prefix" if field == "prefixes" else "constraint"
        toks = (self.forced_tokens(index, text, max_length) if field == "prefixes"
                else self.prefix_tokens(text, max_length, what))
        ids = self.text_ids(toks)
        unknown = list(dict.fromkeys(t for t, i in zip(toks, ids, strict=True) if i == UNK))
        if unknown:
            raise TargetTextError(field, index, f"{what} {text.strip()!r}: the model's target "
                                  f"vocabulary has no {', '.join(map(repr, unknown))} (it would "
                                  "come out as <unk>); use words the model knows")
        return ids

    def text_ids(self, tokens: list[str]) -> list[int]:
        """Target ids of a user's text (a forced prefix, a constraint): a literal ``<pad>``,
        ``<s>`` or ``</s>`` in it is a word the vocabulary does not know (``<unk>``), never the
        control token, which would end or corrupt the hypothesis."""
        return [UNK if i in (PAD, BOS, EOS) else i
                for i in self.tgt_vocab.encode(tokens, add_eos=False)]


    # --- what an engine writes ------------------------------------------------------------

    def search(self, sources: list[Source], request: SearchRequest) -> list[list[Found]]:
        """The engine: the ``request.cfg.n_best`` best hypotheses of each of ``sources`` (one
        batch, shortest first), best first."""
        raise NotImplementedError(f"{type(self).__name__} runs no search")

    def refuses(self, options: TranslateOptions, cfg: DecodeConfig, n_sentences: int) -> str | None:
        """Why this engine does not translate a call of ``n_sentences`` sentences (the lines
        after sentence splitting: the work, not the lines) with ``options`` (resolved:
        ``cfg``); ``None``: it does. Every option by default."""
        return None

    def batches(self, order: list[int], sources: list[Source],
                request: SearchRequest) -> Iterable[list[int]]:
        """The batches :meth:`search` gets: ``order`` (indices of ``sources``, shortest
        first) cut into lists of indices, ``request.cfg.batch_size`` at a time by default."""
        size = request.cfg.batch_size
        return (order[i:i + size] for i in range(0, len(order), size))

    # --- the pipeline ---------------------------------------------------------------------

    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None
                  ) -> list[list[Translation]]:
        """One list of ``n_best`` translations per line, in input order: searched (or sampled)
        with this translator's decoding options, ``options`` replacing some and asking for
        more (forced prefixes, constraints, scores, attention, alignments; see
        :class:`TranslateOptions`). Lines with prefixes or constraints are cut into sentences
        too: :mod:`nmtkit.decode.targets` says which sentence gets what. Whether this engine
        takes the call (:meth:`refuses`) is asked with the number of sentences: the work,
        not the lines."""
        o = TranslateOptions() if options is None else options
        texts = list(text_lines(lines))
        cfg, max_length = self.call_options(o)
        plan = plan_lines(texts, self.languages[0] or "en", cfg.split_sentences, None)
        refused = self.refuses(o, cfg, len(plan.sentences))
        if refused is not None:
            if self.fallback is not None:
                return self.handed_over().translate(texts, o)
            raise UserError(f"the {self.engine} engine cannot do this: {refused}")
        tag = self.target_tag(o.tgt_lang)  # a missing or unknown language: before any work
        require_reverse(cfg, self.reverse)
        targets = self.sentence_targets(o, plan.lines, max_length)
        if cfg.protect_spans:
            plan = protect_plan(plan, self.unsayable)
        sentences = [p.text for p in plan.sentences]
        spans = [bool(p.groups) for p in plan.sentences]
        results = self.translate_sentences(sentences, spans, o, cfg, max_length, targets)
        if targets.pending:
            self.place_phrases(targets, sentences, spans, results, o, cfg, max_length)
        separator = sentence_separator(o.tgt_lang or self.languages[1] or "en")
        for i, p in enumerate(plan.sentences):
            if p.groups:
                results[i] = [self.restored(t, p, tag, separator) for t in results[i]]
            if not o.need_attention:
                results[i] = [replace(t, attention=None) for t in results[i]]
        return join_lines(results, plan, cfg.n_best, separator)

    def sentence_targets(self, o: TranslateOptions, lines: Sequence[Sequence[int]],
                         max_length: int | None) -> SentenceTargets:
        """The forced prefixes and constraint phrases of ``o`` (one per line; ``lines[i]``:
        the sentences of line i) as target ids placed on the sentences
        (:mod:`nmtkit.decode.targets`): a prefix on the first sentence, or shared out by its
        own sentences; the phrases of a line of one sentence on it, those of a longer line
        left ``pending`` for :meth:`place_phrases`. Checked per line first
        (:meth:`target_ids`: errors name the line)."""
        n = sum(len(ids) for ids in lines)
        prefixes = None if o.prefixes is None else list(text_lines(o.prefixes, "prefixes"))
        forced, phrases = self.target_ids(prefixes, o.constraints, len(lines), max_length)
        out = SentenceTargets([None] * n, [None] * n)
        lang = o.tgt_lang or self.languages[1] or "en"
        for i, ids in enumerate(lines):
            if not ids:  # a blank line: nothing to translate, its translation is empty
                continue
            if forced is not None and prefixes is not None:
                pieces = prefix_pieces(prefixes[i], len(ids), lang)
                if len(pieces) == 1:
                    out.prefixes[ids[0]] = forced[i]
                for k, piece in enumerate(pieces if len(pieces) > 1 else []):
                    out.prefixes[ids[k]] = self.known_ids("prefixes", i, piece, max_length)
            if phrases is not None and phrases[i]:
                if len(ids) == 1:
                    out.phrases[ids[0]] = phrases[i]
                else:
                    out.pending.append((i, list(ids), phrases[i]))
        return out

    def place_phrases(self, targets: SentenceTargets, sentences: list[str], spans: list[bool],
                      results: list[list[Translation]], o: TranslateOptions, cfg: DecodeConfig,
                      max_length: int | None) -> None:
        """Each phrase of ``targets.pending`` placed on one sentence of its line
        (:mod:`nmtkit.decode.targets`: where the free translation ``results`` already holds
        it, else where holding it costs the least, tried by one search of every sentence of
        the line with that phrase), then the sentences that got phrases searched again with
        all of theirs; their ``results`` replaced."""
        step = -1 if self.reverse_target else 1  # pending phrases are in the model's order
        trials: list[tuple[list[int], list[int]]] = []  # (phrase, the sentences to try)
        for _, line, phrases in targets.pending:
            ids = [i for i in line if sentences[i].strip()]  # not one of nothing but spans
            for phrase in phrases if ids else []:  # (none: the line's output is its spans)
                home = next((i for i in ids if holds(self.output_ids(results[i][0]),
                                                      phrase[::step])), None)
                if home is None:
                    trials.append((phrase, ids))
                else:
                    targets.phrases[home] = [*(targets.phrases[home] or []), phrase]
        if trials:
            tried = [(i, phrase) for phrase, ids in trials for i in ids]
            quiet = replace(o, need_attention=False, alignments=False, token_scores=False,
                            progress=None)
            found = self.search_sentences([sentences[i] for i, _ in tried], quiet,
                                          replace(cfg, n_best=1, mbr=0, rerank=0), max_length,
                                          False, [(targets.prefixes[i], [p]) for i, p in tried])
            at = 0
            for phrase, ids in trials:
                k = least_cost([results[i][0] for i in ids], [f[0] for f in found[at:at + len(ids)]])
                at += len(ids)
                targets.phrases[ids[k]] = [*(targets.phrases[ids[k]] or []), phrase]
        again = sorted({i for _, ids, _ in targets.pending for i in ids
                        if targets.phrases[i] is not None})
        redone = self.translate_sentences([sentences[i] for i in again], [spans[i] for i in again],
                                          replace(o, progress=None), cfg, max_length,
                                          targets, again)
        for i, r in zip(again, redone, strict=True):
            results[i] = r

    def output_ids(self, t: Translation) -> list[int]:
        """The target ids of a translation's tokens, in reading order."""
        return self.tgt_vocab.encode(t.tokens, add_eos=False)

    def translate_sentences(self, sentences: list[str], spans: list[bool], o: TranslateOptions,
                            cfg: DecodeConfig, max_length: int | None,
                            targets: SentenceTargets | None = None,
                            index: Sequence[int] | None = None) -> list[list[Translation]]:
        """Each sentence's translations, with the source attention where ``o`` asks for it
        or its spans (``spans``) need it to be put back: in one search, or two where only
        some sentences have spans (those with the attention, which costs the search about a
        tenth more, and the others without). ``targets``: the prefixes and phrases of the
        call's sentences, ``index[k]`` the call's sentence that ``sentences[k]`` is
        (default: the k-th)."""
        index = list(range(len(sentences))) if index is None else list(index)

        def of(ks: list[int]) -> list[tuple[list[int] | None, list[list[int]] | None]] | None:
            return None if targets is None else targets.of([index[k] for k in ks])

        looks = [i for i, s in enumerate(spans) if s]
        if o.need_attention or not looks or len(looks) == len(sentences):
            return self.search_sentences(sentences, o, cfg, max_length, bool(looks),
                                         of(list(range(len(sentences)))))
        results: list[list[Translation]] = [[] for _ in sentences]
        rest = [i for i, s in enumerate(spans) if not s]
        for ids, attention in ((looks, True), (rest, False)):
            part = self.search_sentences([sentences[i] for i in ids], o, cfg, max_length,
                                         attention, of(ids))
            for i, r in zip(ids, part, strict=True):
                results[i] = r
        return results

    def search_sentences(self, texts: list[str], o: TranslateOptions, asked: DecodeConfig,
                         max_length: int | None, attention: bool,
                         targets: Sequence[tuple[list[int] | None, list[list[int]] | None]]
                         | None = None) -> list[list[Translation]]:
        """The translations of ``texts`` (sentences): encoded, searched in length order in
        :meth:`batches` by :meth:`search`, back in input order, chosen among (MBR,
        reranking; ``asked``: the call's options). ``attention``: the source attention also
        where ``o`` does not ask for it; ``targets``: each text's forced prefix and
        constraint phrases as target ids (:meth:`sentence_targets`; ``None``: none)."""
        cfg = candidate_options(asked)  # MBR's or reranking's candidates, else the same
        tag = self.target_tag(o.tgt_lang)
        given = targets if targets is not None else [(None, None)] * len(texts)
        sources = [self.source(text, tag, prefix, phrases)
                   for text, (prefix, phrases) in zip(texts, given, strict=True)]
        warn_of_a_long_search(cfg, [len(s.ids) for s in sources], max_length)
        request = SearchRequest(cfg, max_length, attention or o.need_attention or o.alignments,
                                o.token_scores, o.deadline)

        def run(batch: list[int]) -> list[list[Translation]]:
            found = self.search([sources[i] for i in batch], request)
            return [[self.translation_of(f, sources[i], o.alignments) for f in hyps]
                    for i, hyps in zip(batch, found, strict=True)]

        results = self.in_length_order([s.tokens for s in sources], cfg.n_best,
                                       lambda order: self.batches(order, sources, request),
                                       run, o.progress)
        return choose_all(results, texts, asked, self.reverse)

    def source(self, text: str, tag: str = "", prefix: list[int] | None = None,
               phrases: list[list[int]] | None = None) -> Source:
        """The :class:`Source` of one sentence (``tag``: the target-language token,
        :meth:`target_tag`)."""
        toks, model_order = self.source_tokens(text, tag)
        ids = np.asarray(self.src_vocab.encode(model_order, add_eos=True), dtype=np.int64)
        return Source(toks, model_order, ids, prefix, phrases)

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """(source tokens in reading order, the ids the model reads: ``</s>`` at the end); a
        multilingual model's start with the token of ``tgt_lang`` (:meth:`target_tag`)."""
        s = self.source(line, self.target_tag(tgt_lang))
        return s.tokens, s.ids

    def translation_of(self, found: Found, source: Source, alignments: bool) -> Translation:
        """The :class:`Translation` of an engine's hypothesis of ``source``: detokenized, its
        attention's source columns in reading order, its alignment where asked."""
        attention = found.attention
        if attention is not None and self.reverse_source:
            attention = source_reading_order(attention, len(source.tokens))
        alignment = None
        if alignments and attention is not None:
            alignment = alignment_from_attention(attention, len(source.tokens), len(found.tokens))
        return Translation(self.tgt_tok.decode(found.tokens), found.tokens, source.tokens,
                           found.score, attention, found.token_log_probs, alignment,
                           found.constraints_met, found.log_prob)

    def unsupported(self, options: TranslateOptions) -> str | None:
        """What this translator cannot do of what ``options`` ask, said before any work (the
        server answers 501 with it): :meth:`refuses`, unless a :attr:`fallback` takes it."""
        if self.fallback is not None:
            return None
        return self.refuses(options, self.call_options(options)[0], 0)

    def handed_over(self) -> TextTranslator:
        """The :attr:`fallback` translator, built once, with this translator's options and
        reranking models."""
        if self._fallback is None:
            assert self.fallback is not None
            self._fallback = self.fallback()
        self._fallback.decode_cfg, self._fallback.reverse = self.decode_cfg, self.reverse
        return self._fallback

    def unsayable(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of the parts of ``text`` the source tokenizer and vocabulary cannot
        say (:func:`~nmtkit.data.placeholders.unknown_spans`)."""
        return unknown_spans(text, self.src_tok, self.src_vocab, self.source_characters)

    @cached_property
    def source_characters(self) -> frozenset[str]:
        """The characters the source vocabulary can say
        (:func:`~nmtkit.data.placeholders.vocabulary_characters`)."""
        return vocabulary_characters(self.src_vocab)

    def restored(self, t: Translation, p: Protected, tag: str, separator: str) -> Translation:
        """``t`` with the protected groups of ``p`` back
        (:func:`~nmtkit.decode.lines.restore_translation`); the source position of each group
        counted with the source tokenizer (and the target-language token first)."""
        head = 1 if tag and t.src_tokens else 0
        n_before = [head + len(self.src_tok.encode(g.before.strip())) if g.before.strip() else head
                    for g in p.groups]
        return restore_translation(t, p, n_before, self.tgt_tok.decode, separator)

    def translate_lines(self, lines: list[str], beam: int | None = None,
                        batch_size: int | None = None, *, tgt_lang: str | None = None,
                        progress: Callable[[int, int], None] | None = None) -> list[str]:
        """The best translation of each line, in order (into ``tgt_lang``, see
        :meth:`target_tag`). ``lines``: a list (any iterable) of str; a bare str or bytes is
        a ``TypeError`` (:func:`text_lines`), as are a ``beam`` or ``batch_size`` that is not
        an int (:func:`decode_options`). ``progress``: :attr:`TranslateOptions.progress`."""
        options = TranslateOptions(beam=beam, batch_size=batch_size, tgt_lang=tgt_lang,
                                   progress=progress)
        return [r[0].text for r in self.translate(lines, options)]
