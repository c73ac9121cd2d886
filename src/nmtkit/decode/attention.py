"""The attention maps of one translated sentence: every kind, layer and head.

The one computation behind ``nmtkit plot attention`` (:mod:`nmtkit.viz.attention`) and
``POST /v1/attention`` (:mod:`nmtkit.serve.app`):
:func:`nmtkit.decode.sentence_attention.sentence_attention` translates a sentence with the
translator's own search, then feeds the translation back through the model with teacher
forcing (:func:`teacher_forced_maps`: ``model.attention_maps``), which returns the
probabilities of every attention sub-layer:

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
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..errors import UserError

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq

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
        raise UserError(f"alignment layer {layer}, head {head}: the model has {n_layers} decoder "
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
