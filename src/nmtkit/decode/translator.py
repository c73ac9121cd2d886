"""Translator: nmtkit's own search (:mod:`nmtkit.decode.search`) on a loaded checkpoint's
model, behind the text pipeline every engine shares
(:class:`~nmtkit.decode.text_translator.TextTranslator`): text in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import fast
from ..config import DecodeConfig, ModelConfig, check_alignment_choice
from ..data.batching import pad_batch, pad_mask
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.vocab import BOS, EOS, PAD, UNK
from ..errors import UserError
from ..models.seq2seq import Seq2Seq
from ..rules import Hypothesis
from .attention import layer_head, reading_order, teacher_forced_maps
from .choice import candidate_options, choose_all
from .limits import MAX_PHRASES
from .options import TranslateOptions
from .rerank import require_reverse
from .search import search
from .text_translator import (
    TargetTextError,
    TextTranslator,
    alignment_from_attention,
    decode_options,
    text_lines,
    warn_of_a_long_search,
)
from .translation import Translation

if TYPE_CHECKING:
    from ..checkpoint import Bundle
    from ..data.tokenizers import Tokenizer
    from ..data.vocab import Vocab


def check_model_alignment_choice(model: Seq2Seq, layer: int, head: int) -> None:
    """``ValueError`` if ``model`` cannot give the source attention of ``layer``/``head``
    (both -1: the search's own, always fine): the RNN (one attention to choose from), a model
    without per-layer maps (an ensemble), an index past the model's layers or heads."""
    if (layer, head) == (-1, -1):
        return
    model_cfg = getattr(model, "cfg", None)
    if isinstance(model_cfg, ModelConfig):
        check_alignment_choice(model_cfg, layer, head)
    if type(model).attention_maps is Seq2Seq.attention_maps:  # not implemented
        raise UserError(f"alignment layer {layer}, head {head}: {type(model).__name__} has no "
                         "per-layer attention maps (an ensemble aligns with its members' mean "
                         "last layer); leave alignment_layer and alignment_head at -1")


def chosen_source_attention(model: Seq2Seq, src_ids: Sequence[int], tgt_ids: Sequence[int],
                            layer: int, head: int, reverse_source: bool = False) -> torch.Tensor:
    """(len(tgt_ids) + 1, len(src_ids)) source attention of one decoder ``layer`` (-1: the
    last) and ``head`` (-1: the heads' mean) for the output ``tgt_ids`` (no ``</s>``), source
    positions in reading order: one teacher-forced pass (``model.attention_maps``, the maps
    of :func:`nmtkit.decode.attention.teacher_forced_maps`). Row t is the step that predicts
    target token t (the last row ``</s>``), as in the attention the search records.

    ``ValueError`` for a model without per-layer maps (an ensemble), the RNN (one attention:
    nothing to choose, :func:`nmtkit.config.check_alignment_choice`) or an index out of range.
    """
    check_model_alignment_choice(model, layer, head)
    maps = teacher_forced_maps(model, src_ids, [BOS, *tgt_ids], reverse_source)
    return layer_head(maps["decoder_src"], layer, head)  # (T + 1, S) of (layers, heads, T + 1, S)


class Translator(TextTranslator):
    """Wraps a model with its tokenizers and vocabularies (everything a checkpoint holds)."""

    src_vocab: Vocab

    @classmethod
    def from_bundle(cls, bundle: Bundle, decode: DecodeConfig | None = None,
                    **decode_overrides: Any) -> Translator:
        """A translator for a loaded checkpoint (:func:`nmtkit.checkpoint.load_bundle`) with
        ``decode`` (default: the stored decoding options), ``decode_overrides`` replacing
        some (see :func:`decode_options`)."""
        cfg = bundle.cfg
        decode = decode_options(cfg.decode if decode is None else decode, **decode_overrides)
        return cls(bundle.model, bundle.src_tok, bundle.tgt_tok, bundle.src_vocab,
                   bundle.tgt_vocab, decode,
                   cfg.data.reverse_source, cfg.model.max_positions,
                   target_tags=target_tags(cfg.data), reverse_target=cfg.data.reverse_target,
                   languages=text_languages(cfg.data))

    def __init__(self, model: Seq2Seq, src_tok: Tokenizer, tgt_tok: Tokenizer, src_vocab: Vocab,
                 tgt_vocab: Vocab, decode: DecodeConfig, reverse_source: bool = False,
                 max_positions: int | None = None, *,
                 target_tags: dict[str, str] | None = None, reverse_target: bool = False,
                 languages: tuple[str | None, str | None] = (None, None)) -> None:
        super().__init__(src_tok, tgt_tok, decode, reverse_source, max_positions,
                         target_tags=target_tags, languages=languages)
        self.reverse_target = reverse_target
        """A right-to-left model (``data.reverse_target``): the search writes the output last
        token first; :meth:`_finish` puts tokens, their scores and attention rows back in
        reading order, and constraint phrases are searched for reversed."""
        self.model = model.eval()
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.device = next(model.parameters()).device
        if decode.fast:  # CPU: packed weights, shared sources, freed memory kept (nmtkit.fast)
            fast.for_inference(self.model, retain_memory=True)

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """(source tokens in reading order, the ids the model reads: ``</s>`` at the end); a
        multilingual model's start with the token of ``tgt_lang`` (:meth:`target_tag`)."""
        toks, model_order = self.source_tokens(line, self.target_tag(tgt_lang))
        return toks, np.asarray(self.src_vocab.encode(model_order, add_eos=True), dtype=np.int64)

    @torch.no_grad()
    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None
                  ) -> list[list[Translation]]:
        """One list of ``n_best`` translations per input line, in input order: searched (or
        sampled) with this translator's decoding options, ``options`` replacing some and
        asking for more (forced prefixes, constraints, scores, attention, alignments; see
        :class:`TranslateOptions`)."""
        o = TranslateOptions() if options is None else options
        asked, max_length = self.call_options(o)
        if asked.split_sentences or asked.protect_spans:  # lines -> sentences -> here again
            return self.by_sentence(lines, o, asked, self.translate)
        cfg = candidate_options(asked)  # MBR's or reranking's candidates, else the same
        chosen = (cfg.alignment_layer, cfg.alignment_head)
        attention = o.need_attention or o.alignments
        if attention:  # before any decoding: a clear error
            check_model_alignment_choice(self.model, *chosen)
        self.target_tag(o.tgt_lang)  # before any work: a clear error for a missing/unknown language
        require_reverse(asked, self.reverse)
        texts = list(text_lines(lines))
        encoded = [self.encode_source(line, o.tgt_lang) for line in texts]
        forced, phrases = self.target_ids(o.prefixes, o.constraints, len(encoded), max_length)
        warn_of_a_long_search(cfg, [len(ids) for _, ids in encoded], max_length)
        search_attention = attention and chosen == (-1, -1)  # else a teacher-forced pass

        def batches(todo: list[int]) -> Iterable[list[int]]:
            return (todo[i:i + cfg.batch_size] for i in range(0, len(todo), cfg.batch_size))

        def run(batch: list[int]) -> list[list[Translation]]:
            src = pad_batch([encoded[i][1] for i in batch]).to(self.device)  # (batch, S)
            src_mask = pad_mask(src)  # (batch, 1, S)
            hyps = search(self.model, src, src_mask, cfg, need_attention=search_attention,
                          max_length=max_length, token_scores=o.token_scores,
                          prefixes=None if forced is None else [forced[i] for i in batch],
                          constraints=None if phrases is None else [phrases[i] for i in batch],
                          deadline=o.deadline)
            return [[self._finish(h, encoded[i][0], o.need_attention, o.alignments,
                                  None if chosen == (-1, -1) else (encoded[i][1], chosen))
                     for h in hs] for i, hs in zip(batch, hyps, strict=True)]

        return choose_all(self.in_length_order([toks for toks, _ in encoded], cfg.n_best,
                                               batches, run, o.progress),
                          texts, asked, self.reverse)

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
                raise ValueError(f"{len(texts)} prefixes for {n_lines} lines: give one per line "
                                 "(an empty one for none)")
            if self.reverse_target and any(p.strip() for p in texts):
                raise ValueError("a right-to-left model (data.reverse_target) writes the "
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
                raise ValueError(f"{len(rows)} constraint lists for {n_lines} lines: give one "
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

    def _finish(self, h: Hypothesis[torch.Tensor], src_tokens: list[str], need_attention: bool = True,
                alignments: bool = False,
                chosen: tuple[np.ndarray, tuple[int, int]] | None = None) -> Translation:
        """``chosen``: (the source ids, (layer, head)) when the attention comes from a named
        layer/head instead of the search's."""
        ids = [t for t in h.tokens if t != EOS]  # in the order the model wrote them
        attn = h.attention.cpu() if h.attention is not None else None  # (T, S)
        if attn is not None and self.reverse_source:
            attn = reading_order(attn, len(src_tokens), dims=[1])
        if chosen is not None and (need_attention or alignments):
            src_ids, (layer, head) = chosen
            attn = chosen_source_attention(self.model, src_ids.tolist(), ids, layer, head,
                                           self.reverse_source)  # (T, S), reading order
        token_log_probs = h.token_log_probs
        if self.reverse_target:  # the output's tokens back in reading order, </s> stays last
            ids = ids[::-1]
            if attn is not None:
                attn = reading_order(attn, len(ids), dims=[0])  # rows: (T, S)
            if token_log_probs is not None:
                token_log_probs = [*token_log_probs[:len(ids)][::-1], *token_log_probs[len(ids):]]
        toks = self.tgt_vocab.decode(ids)
        align = None
        if alignments and attn is not None:
            align = alignment_from_attention(attn, len(src_tokens), len(toks))
        return self.translation(toks, src_tokens, h.score, attn if need_attention else None,
                                token_log_probs=token_log_probs, alignment=align,
                                constraints_met=h.constraints_met, log_prob=h.log_prob)
