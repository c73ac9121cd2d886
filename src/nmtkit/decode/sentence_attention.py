"""The attention maps of one sentence as a translator translates it: what ``nmtkit plot
attention`` (:mod:`nmtkit.viz.attention`) and ``POST /v1/attention`` (:mod:`nmtkit.serve.app`)
show. The translation comes from the translator's own search; the maps from feeding it back
with teacher forcing (:func:`nmtkit.decode.attention.teacher_forced_maps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.vocab import BOS, BOS_TOKEN, EOS_TOKEN
from ..errors import UserError
from ..models.seq2seq import Seq2Seq
from .attention import teacher_forced_maps
from .deadline import Deadline
from .options import TranslateOptions
from .translation import Translation
from .translator import Translator


@dataclass
class SentenceAttention:
    """One translated sentence and its attention maps, source axes in reading order."""

    text: str
    translation: Translation
    """The best translation (its ``src_tokens`` are the source subwords in reading order)."""
    maps: dict[str, Tensor]
    """kind -> (layers, heads, queries, keys); every row is a probability distribution."""

    @property
    def tokens(self) -> dict[str, list[str]]:
        """The labels named in :data:`AXES`: ``source``, ``target`` and ``target_in``."""
        t = self.translation
        return {"source": [*t.src_tokens, EOS_TOKEN], "target": [*t.tokens, EOS_TOKEN],
                "target_in": [BOS_TOKEN, *t.tokens]}


def sentence_attention(translator: Translator, text: str, *, model: Seq2Seq | None = None,
                       beam: int | None = None, max_length: int | None = None,
                       need_attention: bool = False, max_src_tokens: int | None = None,
                       prefix: str | None = None, token_scores: bool = False,
                       tgt_lang: str | None = None, mbr: int | None = None,
                       deadline: Deadline | None = None) -> SentenceAttention:
    """Translate ``text`` with ``translator`` (into ``tgt_lang`` for a multilingual model:
    the source then starts with its ``<2xx>`` token), then teacher-force ``<s>`` + the
    translation through ``model.attention_maps`` (``model``: the translator's unless given).

    ``prefix``: a target text the translation must start with (a forced prefix, see
    :meth:`~nmtkit.decode.translator.Translator.translate`); ``token_scores``: the translation
    carries its ``token_log_probs``; ``mbr``: the translation chosen by minimum Bayes risk
    among that many candidates (None: the translator's ``decode.mbr``); ``deadline``: the
    search's (:attr:`~nmtkit.decode.options.TranslateOptions.deadline`).

    The text is read whole and as it is (no sentence splitting, no protected spans,
    :mod:`nmtkit.decode.lines`): the maps are the model's own, token for token.

    A model without ``attention_maps`` falls back to the source attention the search recorded
    (one layer, one head; needs ``need_attention``). Raises ``ValueError`` for a text with no
    tokens, a source longer than ``max_src_tokens``, or a model that exposes no attention.
    """
    if getattr(translator, "reverse_target", False):
        raise UserError("attention: a right-to-left model (data.reverse_target) reranks a "
                         "left-to-right model's candidates; inspect the left-to-right model")
    model = translator.model if model is None else model
    src_toks, src_ids = translator.encode_source(text, tgt_lang)
    if not src_toks:
        raise UserError("text: nothing to translate (empty after tokenization)")
    if max_src_tokens is not None and len(src_toks) > max_src_tokens:
        raise UserError(f"text: {len(src_toks)} source tokens, attention is limited to "
                         f"{max_src_tokens}")
    options = TranslateOptions(beam=beam, max_length=max_length, need_attention=need_attention,
                               token_scores=token_scores,
                               prefixes=None if prefix is None else [prefix], tgt_lang=tgt_lang,
                               mbr=mbr, deadline=deadline,
                               split_sentences=False, protect_spans=False)  # the model's own reading
    hyp = translator.translate([text], options)[0][0]
    if hasattr(model, "attention_maps"):
        tgt_in = [BOS, *translator.tgt_vocab.encode(hyp.tokens, add_eos=False)]
        maps = teacher_forced_maps(model, src_ids.tolist(), tgt_in, translator.reverse_source)
    elif hyp.attention is not None:  # (T, S), already in reading order
        maps = {"decoder_src": torch.from_numpy(hyp.attention).float()[None, None]}  # (1, 1, T, S)
    else:
        raise UserError(f"attention: model {type(model).__name__} exposes no attention")
    return SentenceAttention(text, hyp, maps)
