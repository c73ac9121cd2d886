"""The attention maps of one translated sentence: every kind, layer and head.

The one computation behind ``nmtkit plot attention`` (:mod:`nmtkit.viz.attention`) and
``POST /v1/attention`` (:mod:`nmtkit.serve.app`). :func:`sentence_attention` translates a
sentence with the translator's own search, then feeds the translation back through the model
with teacher forcing (``model.attention_maps``), which returns the probabilities of every
attention sub-layer:

- ``encoder``: encoder self-attention, (layers, heads, S, S);
- ``decoder_self``: masked decoder self-attention, (layers, heads, T, T);
- ``decoder_src``: decoder attention over the encoder output, (layers, heads, T, S).

S counts the source subwords plus ``</s>``; T the translation's subwords plus ``</s>``.
Decoder row t reads ``<s> y_1 .. y_t`` and predicts ``y_{t+1}``. A model that reads the
source reversed (``data.reverse_source``) gets its maps back in reading order
(:func:`reading_order`, also used for the attention the search records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..data.vocab import BOS, BOS_TOKEN, EOS_TOKEN
from .options import TranslateOptions

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq
    from .translator import Translation, Translator

KINDS = ("encoder", "decoder_self", "decoder_src")

AXES = {"encoder": ("source", "source"), "decoder_self": ("target", "target_in"),
        "decoder_src": ("target", "source")}
"""kind -> which tokens label its (rows, columns): ``source`` (subwords, ``</s>``), ``target``
(what each decoder position predicts: subwords, ``</s>``), ``target_in`` (what it reads:
``<s>``, subwords)."""


def reading_order(weights: Tensor, n_src: int, dims: Sequence[int]) -> Tensor:
    """``weights`` with its source positions along ``dims`` put back in reading order, for a
    model that read the source reversed: the first ``n_src`` positions (the subwords) are
    flipped; later ones (``</s>``, padding) stay where they are."""
    for d in dims:
        size, dev = weights.size(d), weights.device
        perm = torch.cat([torch.arange(n_src - 1, -1, -1, device=dev),
                          torch.arange(n_src, size, device=dev)])  # (size,)
        weights = weights.index_select(d, perm)
    return weights


def _layers_heads(layers: Sequence[Tensor]) -> Tensor:
    """Per-layer (1, heads, q, k) maps (or (heads, q, k), or one head's (q, k)) ->
    (layers, heads, q, k) float32 on the CPU."""
    out = []
    for w in layers:
        w = w.detach().float().cpu()
        w = w[0] if w.dim() == 4 else w  # (heads, q, k): drop the batch of one
        out.append(w.unsqueeze(0) if w.dim() == 2 else w)  # (heads, q, k)
    return torch.stack(out)  # (layers, heads, q, k)


def layer_head(weights: Tensor, layer: int = -1, head: int = -1) -> Tensor:
    """One map of (layers, heads, queries, keys) ``weights``: ``layer`` (-1: the last) and
    ``head`` (-1: the heads' mean) -> (queries, keys). ``ValueError`` for an index outside
    the maps (naming how many layers and heads there are)."""
    n_layers, n_heads = weights.shape[:2]
    if not -1 <= layer < n_layers or not -1 <= head < n_heads:
        raise ValueError(f"alignment layer {layer}, head {head}: the model has {n_layers} decoder "
                         f"layers of {n_heads} heads (-1: the last layer, the heads' mean)")
    w = weights[layer]  # (heads, queries, keys)
    return w.mean(dim=0) if head == -1 else w[head]


@torch.no_grad()
def teacher_forced_maps(model: Seq2Seq, src_ids: Sequence[int], tgt_in_ids: Sequence[int],
                        reverse_source: bool = False) -> dict[str, Tensor]:
    """Attention of one sentence pair: kind -> (layers, heads, queries, keys), float32, CPU.

    ``src_ids``: the source as the model reads it (reversed if ``reverse_source``), ending
    with ``</s>``; ``tgt_in_ids``: ``<s>`` then the target ids. With ``reverse_source`` the
    source axes come back in reading order. Kinds are in :data:`KINDS` order; kinds the model
    does not have are left out.
    """
    device = next(model.parameters()).device
    src = torch.as_tensor(list(src_ids), dtype=torch.long, device=device).view(1, -1)  # (1, S)
    tgt_in = torch.as_tensor(list(tgt_in_ids), dtype=torch.long, device=device).view(1, -1)  # (1, T)
    was_training = model.training
    model.eval()
    try:
        raw = model.attention_maps(src, tgt_in)
    finally:
        model.train(was_training)
    n_src = src.size(1) - 1  # subwords before </s>
    maps: dict[str, Tensor] = {}
    for kind in [k for k in KINDS if k in raw] + [k for k in raw if k not in KINDS]:
        if not raw[kind]:
            continue
        w = _layers_heads(raw[kind])
        if reverse_source:
            axes = AXES.get(kind, ("target", "source"))
            w = reading_order(w, n_src, [d for d, a in zip((-2, -1), axes, strict=True) if a == "source"])
        maps[kind] = w
    return maps


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
                       tgt_lang: str | None = None, mbr: int | None = None) -> SentenceAttention:
    """Translate ``text`` with ``translator`` (into ``tgt_lang`` for a multilingual model:
    the source then starts with its ``<2xx>`` token), then teacher-force ``<s>`` + the
    translation through ``model.attention_maps`` (``model``: the translator's unless given).

    ``prefix``: a target text the translation must start with (a forced prefix, see
    :meth:`~nmtkit.decode.translator.Translator.translate`); ``token_scores``: the translation
    carries its ``token_log_probs``; ``mbr``: the translation chosen by minimum Bayes risk
    among that many candidates (None: the translator's ``decode.mbr``).

    A model without ``attention_maps`` falls back to the source attention the search recorded
    (one layer, one head; needs ``need_attention``). Raises ``ValueError`` for a text with no
    tokens, a source longer than ``max_src_tokens``, or a model that exposes no attention.
    """
    if getattr(translator, "reverse_target", False):
        raise ValueError("attention: a right-to-left model (data.reverse_target) reranks a "
                         "left-to-right model's candidates; inspect the left-to-right model")
    model = translator.model if model is None else model
    src_toks, src_ids = translator.encode_source(text, tgt_lang)
    if not src_toks:
        raise ValueError("text: nothing to translate (empty after tokenization)")
    if max_src_tokens is not None and len(src_toks) > max_src_tokens:
        raise ValueError(f"text: {len(src_toks)} source tokens, attention is limited to "
                         f"{max_src_tokens}")
    options = TranslateOptions(beam=beam, max_length=max_length, need_attention=need_attention,
                               token_scores=token_scores,
                               prefixes=None if prefix is None else [prefix], tgt_lang=tgt_lang,
                               mbr=mbr)
    hyp = translator.translate([text], options)[0][0]
    if hasattr(model, "attention_maps"):
        tgt_in = [BOS, *translator.tgt_vocab.encode(hyp.tokens, add_eos=False)]
        maps = teacher_forced_maps(model, src_ids.tolist(), tgt_in, translator.reverse_source)
    elif hyp.attention is not None:  # (T, S), already in reading order
        maps = {"decoder_src": hyp.attention.float()[None, None]}  # (1, 1, T, S)
    else:
        raise ValueError(f"attention: model {type(model).__name__} exposes no attention")
    return SentenceAttention(text, hyp, maps)
