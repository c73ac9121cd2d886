"""The text side of every translator, :class:`TextTranslator`, whatever runs the search:
nmtkit's own :class:`~nmtkit.decode.translator.Translator` (PyTorch) or
:class:`~nmtkit.export.ctranslate2_engine.CTranslate2Translator`. Split each line into
sentences and protect the spans the vocabulary cannot say (:mod:`nmtkit.decode.lines`),
sort all sentences by length, batch, search, unsort, restore the spans, detokenize and
join each line's sentences. A call takes the lines and one :class:`TranslateOptions`.
:func:`decode_options` is the one way optional decoding arguments (command line, server,
Python API) become a :class:`~nmtkit.config.DecodeConfig`.

This module imports no PyTorch (only the attention of a translation is a tensor, made by
the engine that asks for it), so that an engine that needs none starts without it: a
one-sentence ``nmtkit translate --engine ctranslate2`` does not pay PyTorch's import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..config import DecodeConfig, build_section
from ..data.placeholders import unknown_spans, vocabulary_characters
from ..data.sentences import sentence_separator
from ..errors import UserError
from ..rules import output_cap
from .lines import join_lines, plan_lines, restore_translation
from .options import TranslateOptions
from .translation import Translation

if TYPE_CHECKING:
    import torch

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


def alignment_from_attention(attention: Any, n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """For each of the ``n_tgt`` target tokens, the source token (of the first ``n_src``:
    ``</s>`` excluded) with the most attention: [(i, j)], j = 0, 1, ...

    attention: (>= n_tgt, >= n_src), the source attention at each output step (the last
    decoder layer's averaged over heads, or a named layer/head: :func:`chosen_source_attention`).
    """
    if n_src == 0 or n_tgt == 0:
        return []
    best = attention[:n_tgt, :n_src].argmax(1).tolist()  # (n_tgt,): a tensor or an array
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


class TextTranslator:
    """The text side of a translator, shared by every engine that runs the search.

    Tokenizes a line and cuts it to the model's position table (``max_positions``, ``</s>``
    included), reverses the source for a model that reads it backwards, resolves a call's
    options (:func:`decode_options`, plus the output cap), leaves empty lines empty, searches
    the rest in length order and returns them in input order, and detokenizes.
    """

    src_vocab: Vocab | None = None
    """The source vocabulary, where the engine has one: what it lacks is protected
    (``decode.protect_spans``); ``None``: only URLs and e-mail addresses are."""
    tensor_attention: bool = True
    """Whether a translation's attention is a tensor (PyTorch's engines) or a numpy array
    (the numpy engine, inside :meth:`by_sentence` only)."""

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

    def translation(self, tokens: list[str], src_tokens: list[str], score: float,
                    attention: torch.Tensor | None = None, *,
                    token_log_probs: list[float] | None = None,
                    alignment: list[tuple[int, int]] | None = None,
                    constraints_met: bool = True, log_prob: float | None = None) -> Translation:
        """A :class:`Translation` of output ``tokens`` (detokenized with the target tokenizer)."""
        return Translation(self.tgt_tok.decode(tokens), tokens, src_tokens, score, attention,
                           token_log_probs, alignment, constraints_met, log_prob)

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

    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None
                  ) -> list[list[Translation]]:
        """One list of translations per line, in input order (``options``: what this call
        asks for besides the lines, ``None``: the translator's decoding options)."""
        raise NotImplementedError

    def by_sentence(self, lines: Iterable[str], o: TranslateOptions, cfg: DecodeConfig,
                    engine: Callable[[list[str], TranslateOptions], list[list[Translation]]],
                    attention: bool = True) -> list[list[Translation]]:
        """:meth:`translate` with ``cfg.split_sentences`` or ``cfg.protect_spans``: the
        lines cut into sentences (not lines with prefixes or constraints: they are read
        whole), their spans protected, all of them translated by ``engine`` (this
        translator's own search, both switched off; in one call, or two where some
        sentences have spans to put back: those with the source attention that places them,
        which costs the search about a tenth more, and the others without), the spans
        restored and each line's sentences joined (:mod:`nmtkit.decode.lines`).
        ``attention``: the engine gives the source attention (else spans go back by
        relative position)."""
        texts = list(text_lines(lines))
        split = cfg.split_sentences and o.prefixes is None and o.constraints is None
        plan = plan_lines(texts, self.languages[0] or "en", split,
                          self.unsayable if cfg.protect_spans else None)
        inner = replace(o, split_sentences=False, protect_spans=False)
        sentences = [p.text for p in plan.sentences]
        # the attention that puts spans back costs ~10% of a search: asked for where needed
        looks = [i for i, p in enumerate(plan.sentences) if p.groups] if attention else []
        if o.need_attention or not looks or o.prefixes is not None or o.constraints is not None:
            results = engine(sentences, replace(inner, need_attention=o.need_attention
                                                or bool(looks)))
        else:
            results = [[] for _ in sentences]
            rest = [i for i, p in enumerate(plan.sentences) if not p.groups]
            for ids, opts in ((looks, replace(inner, need_attention=True)), (rest, inner)):
                if ids:
                    part = engine([sentences[i] for i in ids], opts)
                    for i, r in zip(ids, part, strict=True):
                        results[i] = r
        tag = self.target_tag(o.tgt_lang)
        separator = sentence_separator(o.tgt_lang or self.languages[1] or "en")
        for i, p in enumerate(plan.sentences):
            if p.groups:
                results[i] = [self.restored(t, p, tag, separator) for t in results[i]]
            if not o.need_attention:
                results[i] = [replace(t, attention=None) for t in results[i]]
        return join_lines(results, plan, cfg.n_best, separator)

    def unsayable(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of the parts of ``text`` the source tokenizer and vocabulary cannot
        say (:func:`~nmtkit.data.placeholders.unknown_spans`); none without a vocabulary."""
        if self.src_vocab is None:
            return []
        return unknown_spans(text, self.src_tok, self.src_vocab, self.source_characters)

    @cached_property
    def source_characters(self) -> frozenset[str]:
        """The characters the source vocabulary can say
        (:func:`~nmtkit.data.placeholders.vocabulary_characters`)."""
        return vocabulary_characters(self.src_vocab) if self.src_vocab is not None else frozenset()

    def restored(self, t: Translation, p: Protected, tag: str, separator: str) -> Translation:
        """``t`` with the protected groups of ``p`` back
        (:func:`~nmtkit.decode.lines.restore_translation`); the source position of each group
        counted with the source tokenizer (and the target-language token first)."""
        head = 1 if tag and t.src_tokens else 0
        n_before = [head + len(self.src_tok.encode(g.before.strip())) if g.before.strip() else head
                    for g in p.groups]
        return restore_translation(t, p, n_before, self.tgt_tok.decode, separator,
                                   as_tensor=self.tensor_attention)

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
