"""Beam search with one copy of each sentence's source keys and values, shared by its hypotheses.

The readable decoder state (:class:`~nmtkit.models.transformer.TransformerState`) holds the
encoder memory's keys and values for the encoder-decoder attention (Sec. 3.2.3) once per
row, and beam search decodes ``beam`` rows per sentence, all with the same source: after
its first step the state holds ``beam`` identical copies of every sentence's keys and
values, and each step's source attention reads all of them, one query per copy.

Here the copies are never made. :class:`SharedSourceTransformer` keeps one row of source
keys/values (and mask) per sentence while the decoder rows come in equal, consecutive
groups per sentence, which is what beam search's reorders give (its rows are sentence by
sentence, ``beam`` each); any other reorder spreads the sources to one row per decoder row
again, as the readable model keeps them. :class:`SharedSourceAttention` then lets each
sentence's group of queries attend to its keys as one block: queries
(sentences, heads, group, d_k) against keys (sentences, heads, S, d_k), Eq. 1 written out
(:func:`~nmtkit.models.attention.scaled_dot_product_attention`, faster than the fused kernel
for these shapes on a CPU). The same numbers as the readable model, up to float rounding
(``tests/test_fast_shared_source.py``); ``benchmarks/decode_ab.py`` measures the gain.

:func:`share_sources` installs both on a Transformer (``nmtkit.fast.for_inference`` does,
on a CPU), :func:`unshare_sources` takes them off.
"""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from ..models.attention import MultiHeadAttention, scaled_dot_product_attention
from ..models.transformer import DecoderLayer, Transformer, TransformerState
from .packing import PackedAttention
from .swap import restore_class, swap_class

GROUP = "rows_per_source"  # TransformerState.extras key: decoder rows per source row


class SharedSourceAttention(MultiHeadAttention):
    """Encoder-decoder attention whose keys/values may have fewer rows than its queries:
    ``g`` consecutive query rows per key row (a sentence's hypotheses)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               causal: bool = False,
               need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        rows, sources = q.size(0), k.size(0)
        if rows == sources or causal:
            return super().attend(q, k, v, mask, causal, need_attention)
        g = rows // sources  # queries per source
        _, h, t, d_k = q.shape
        block = q.view(sources, g, h, t, d_k).transpose(1, 2).reshape(sources, h, g * t, d_k)
        x, probs = scaled_dot_product_attention(block, k, v, mask)  # (sources, h, g*t, d_k)
        x = x.view(sources, h, g, t, d_k).transpose(1, 2).reshape(rows, h, t, d_k)
        x = x.transpose(1, 2).reshape(rows, t, self.d_model)  # Concat(heads): (rows, t, d_model)
        if need_attention:  # (sources, h, g*t, S) -> (rows, h, t, S)
            s = probs.size(-1)
            return self.out_proj(x), probs.view(sources, h, g, t, s).transpose(1, 2).reshape(rows, h, t, s)
        return self.out_proj(x), None


class PackedSharedSourceAttention(SharedSourceAttention, PackedAttention):
    """:class:`SharedSourceAttention` with the packed query projection of
    :class:`~nmtkit.fast.packing.PackedAttention`."""


class SharedSourceTransformer(Transformer):
    """A Transformer whose decoder state keeps one source row per sentence in beam search."""

    def reorder(self, state: TransformerState, index: Tensor,
                same_source: bool = False) -> TransformerState:
        """As :meth:`Transformer.reorder`; the source rows follow the decoder rows' sentences.

        New row i continues old row ``index[i]``, whose source is source row
        ``index[i] // g`` (``g``: decoder rows per source row). When those sources come in
        equal runs of distinct, increasing rows (a beam search's sentences), one source row
        per run is kept and ``g`` becomes the run length; otherwise each decoder row gets
        its own source row (``g`` = 1).
        """
        if not same_source:  # (with same_source every row keeps its sentence's source row)
            g = state.extras.get(GROUP, 1)
            source_of = index // g  # (rows,) the source row of each new decoder row
            sources, runs = source_of.unique_consecutive(return_counts=True)
            run = int(runs[0]) if runs.numel() else 1
            grouped = bool((runs == run).all()) and bool((sources[1:] > sources[:-1]).all())
            keep = sources if grouped else source_of
            state.extras[GROUP] = run if grouped else 1
            state.src_mask = state.src_mask.index_select(0, keep)
            state.src_kv = [(k.index_select(0, keep), v.index_select(0, keep)) for k, v in state.src_kv]
        return super().reorder(state, index, same_source=True)  # the self-attention caches


def share_sources(model: nn.Module) -> int:
    """Install the shared sources on every Transformer in ``model`` (itself, or the members
    of an ensemble), after packing, whose packed query projections they keep; returns how
    many Transformers have them. Idempotent."""
    count = 0
    for module in model.modules():
        if not isinstance(module, Transformer):
            continue
        for layer in module.decoder_layers:
            attn = cast(DecoderLayer, layer).src_attn
            if not isinstance(attn, SharedSourceAttention):
                swap_class(attn, PackedSharedSourceAttention if isinstance(attn, PackedAttention)
                           else SharedSourceAttention)
        if not isinstance(module, SharedSourceTransformer):
            swap_class(module, SharedSourceTransformer)
        count += 1
    return count


def unshare_sources(model: nn.Module) -> None:
    """Take :func:`share_sources` off: the classes ``model`` had before it."""
    for module in model.modules():
        if isinstance(module, (SharedSourceAttention, SharedSourceTransformer)):
            restore_class(module)
