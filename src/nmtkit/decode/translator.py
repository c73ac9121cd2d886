"""Translator: nmtkit's own search (:mod:`nmtkit.decode.search`) on a loaded checkpoint's
model: the engine that supplies the search of one batch
(:meth:`Translator.search`) to the text pipeline every engine shares
(:class:`~nmtkit.decode.text_translator.TextTranslator`): text in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .. import fast
from ..config import DecodeConfig, ModelConfig, check_alignment_choice
from ..data.batching import pad_batch, pad_mask
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.vocab import BOS, EOS
from ..errors import UserError
from ..models.seq2seq import Seq2Seq
from ..rules import Hypothesis
from .attention import layer_head, teacher_forced_maps
from .engine import Found, SearchRequest, Source
from .search import search
from .text_translator import TextTranslator, decode_options

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
        token first; :meth:`_found` puts tokens, their scores and attention rows back in
        reading order, and constraint phrases are searched for reversed."""
        self.model = model.eval()
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.device = next(model.parameters()).device
        if decode.fast:  # CPU: packed weights, shared sources, freed memory kept (nmtkit.fast)
            fast.for_inference(self.model, retain_memory=True)

    @torch.no_grad()
    def search(self, sources: list[Source], request: SearchRequest) -> list[list[Found]]:
        """nmtkit's search (:func:`nmtkit.decode.search.search`: greedy, beam, sampling,
        forced prefixes, constraints) of one padded batch. The source attention of another
        layer or head than the search's own (``cfg.alignment_layer``/``alignment_head`` not
        -1, -1) comes from one teacher-forced pass per hypothesis
        (:func:`chosen_source_attention`)."""
        cfg = request.cfg
        chosen = (cfg.alignment_layer, cfg.alignment_head)
        if request.attention:  # before any decoding: a clear error
            check_model_alignment_choice(self.model, *chosen)
        teacher_forced = request.attention and chosen != (-1, -1)
        src = pad_batch([s.ids for s in sources]).to(self.device)  # (batch, S)
        forced = any(s.prefix is not None for s in sources)
        constrained = any(s.phrases is not None for s in sources)
        hyps = search(self.model, src, pad_mask(src), cfg,
                      need_attention=request.attention and not teacher_forced,
                      max_length=request.max_length, token_scores=request.token_scores,
                      prefixes=[s.prefix or [] for s in sources] if forced else None,
                      constraints=[s.phrases or [] for s in sources] if constrained else None,
                      deadline=request.deadline)
        return [[self._found(h, s, chosen if teacher_forced else None) for h in hs]
                for s, hs in zip(sources, hyps, strict=True)]

    def _found(self, h: Hypothesis[torch.Tensor], source: Source, chosen: tuple[int, int] | None) -> Found:
        """A hypothesis of the search as the pipeline takes it: tokens (and for a
        right-to-left model their scores and attention rows) in reading order, the attention
        (of the ``chosen`` layer and head, where given) as a numpy array whose columns are
        the source in the order the model read it."""
        ids = [t for t in h.tokens if t != EOS]  # in the order the model wrote them
        attn = None if h.attention is None else h.attention.float().cpu().numpy()  # (T, S)
        if chosen is not None:
            attn = chosen_source_attention(self.model, source.ids.tolist(), ids,
                                           *chosen).numpy()  # (T, S)
        token_log_probs = h.token_log_probs
        if self.reverse_target:  # the output's tokens back in reading order, </s> stays last
            ids = ids[::-1]
            if attn is not None:
                attn = attn[[*range(len(ids) - 1, -1, -1), *range(len(ids), attn.shape[0])]]
            if token_log_probs is not None:
                token_log_probs = [*token_log_probs[:len(ids)][::-1], *token_log_probs[len(ids):]]
        return Found(self.tgt_vocab.decode(ids), h.score, h.log_prob, token_log_probs, attn,
                     h.constraints_met)
