"""Beam search with one copy of each sentence's source keys and values, shared by its hypotheses.

The readable decoder state (:class:`~nmtkit.models.transformer.TransformerState`) holds the
encoder memory's keys and values for the encoder-decoder attention (Sec. 3.2.3) once per
row, and beam search decodes up to ``beam`` rows per sentence, all with the same source:
after its first step the state holds that many copies of every sentence's keys and values,
gathered again whenever the rows change sentences, and each step's source attention reads
all of them, one query per copy.

Here the copies are never made. :class:`SharedSourceTransformer` keeps one row of source
keys/values (and mask) per sentence while the decoder rows come sentence by sentence
(consecutive rows, sentences in increasing order: what beam search's reorders give, with
any number of rows per sentence) and records which source row each decoder row reads;
any other order spreads the sources to one row per decoder row again, as the readable
model keeps them. :class:`SharedSourceAttention` then lets each sentence's queries attend
to its keys as one block: queries (sentences, heads, slots, d_k) against keys
(sentences, heads, S, d_k), Eq. 1 written out
(:func:`~nmtkit.models.attention.scaled_dot_product_attention`, faster than the fused kernel
for these shapes on a CPU); a sentence with fewer rows than the widest leaves its last
slots empty (zero queries, their outputs dropped). The same numbers as the readable model,
up to float rounding (``tests/test_fast_shared_source.py``); ``benchmarks/decode_ab.py``
measures the gain.

The attention learns the decoder rows' layout from the step being run: the model's
:meth:`SharedSourceTransformer.step` puts it where the attention of the same thread reads
it (a ``threading.local``), so two threads may decode with one model at once.

:func:`share_sources` installs both on a Transformer (``nmtkit.fast.for_inference`` does,
on a CPU), :func:`unshare_sources` takes them off.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from ..models.attention import MultiHeadAttention, scaled_dot_product_attention
from ..models.transformer import DecoderLayer, Transformer, TransformerState
from .packing import PackedAttention
from .swap import restore_class, swap_class

LAYOUT = "shared_source_layout"  # TransformerState.extras key


@dataclass
class RowLayout:
    """Where each decoder row's source is: row i reads source row ``source[i]``; in the block
    of queries of its source it takes slot ``slot[i]`` of ``width`` (``slot`` is None when
    every source has ``width`` consecutive rows: row i is then slot i of the flat grid)."""

    source: Tensor  # (rows,) nondecreasing
    width: int
    slot: Tensor | None  # (rows,) index into the (sources * width) grid of query slots


_current = threading.local()  # .layout: the RowLayout of the step running in this thread


def row_layout(source_of: Tensor) -> tuple[Tensor, RowLayout | None]:
    """For decoder rows reading sources ``source_of`` (rows,): the source rows to keep and
    the rows' layout over them; ``(source_of, None)`` (one source row per decoder row, as
    the readable model keeps them) when each row has a source of its own or the rows do
    not come sentence by sentence."""
    if bool((source_of[1:] > source_of[:-1]).all()):  # one row per source (greedy search)
        return source_of, None
    sources, counts = torch.unique_consecutive(source_of, return_counts=True)
    if bool((sources[1:] <= sources[:-1]).any()):  # a sentence's rows are not consecutive
        return source_of, None
    which = torch.repeat_interleave(torch.arange(sources.numel(), device=source_of.device), counts)
    width = int(counts.max())
    slot = None
    if bool((counts != width).any()):  # slot of row i: its source's first slot + its rank there
        first_row = counts.cumsum(0) - counts  # (sources,)
        rank = torch.arange(source_of.numel(), device=source_of.device) - first_row[which]
        slot = which * width + rank
    return sources, RowLayout(which, width, slot)


class SharedSourceAttention(MultiHeadAttention):
    """Encoder-decoder attention whose keys/values may have fewer rows than its queries: the
    decoder rows of each source, laid out by the running step's :class:`RowLayout`."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               causal: bool = False,
               need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        rows, sources = q.size(0), k.size(0)
        layout: RowLayout | None = getattr(_current, "layout", None)
        if rows == sources or causal or layout is None:
            return super().attend(q, k, v, mask, causal, need_attention)
        _, h, t, d_k = q.shape
        w = layout.width
        grid = q
        if layout.slot is not None:  # rows into their slots; empty slots stay zero
            grid = q.new_zeros(sources * w, h, t, d_k).index_copy_(0, layout.slot, q)
        block = grid.view(sources, w, h, t, d_k).transpose(1, 2).reshape(sources, h, w * t, d_k)
        x, probs = scaled_dot_product_attention(block, k, v, mask)  # (sources, h, w*t, d_k)
        x = x.view(sources, h, w, t, d_k).transpose(1, 2).reshape(sources * w, h, t, d_k)
        if layout.slot is not None:
            x = x.index_select(0, layout.slot)  # (rows, h, t, d_k)
        x = x.transpose(1, 2).reshape(rows, t, self.d_model)  # Concat(heads): (rows, t, d_model)
        if not need_attention:
            return self.out_proj(x), None
        s = probs.size(-1)  # (sources, h, w*t, S) -> (rows, h, t, S)
        probs = probs.view(sources, h, w, t, s).transpose(1, 2).reshape(sources * w, h, t, s)
        return self.out_proj(x), probs if layout.slot is None else probs.index_select(0, layout.slot)


class PackedSharedSourceAttention(SharedSourceAttention, PackedAttention):
    """:class:`SharedSourceAttention` with the packed query projection of
    :class:`~nmtkit.fast.packing.PackedAttention`."""


class SharedSourceTransformer(Transformer):
    """A Transformer whose decoder state keeps one source row per sentence in beam search."""

    def step(self, state: TransformerState,
             prev_tokens: Tensor) -> tuple[Tensor, TransformerState, Tensor | None]:
        _current.layout = state.extras.get(LAYOUT)
        try:
            return super().step(state, prev_tokens)
        finally:
            _current.layout = None

    def reorder(self, state: TransformerState, index: Tensor,
                same_source: bool = False) -> TransformerState:
        """As :meth:`Transformer.reorder`; the source rows follow the decoder rows' sentences.

        New row i continues old row ``index[i]`` and reads its source. When the new rows
        come sentence by sentence, one source row per sentence is kept (not copied when
        that is every source row already) with the rows' :class:`RowLayout`; otherwise each
        decoder row gets its own source row, as in the readable model.
        """
        if not same_source:  # (with same_source every row keeps its sentence: nothing changes)
            layout: RowLayout | None = state.extras.get(LAYOUT)
            source_of = index if layout is None else layout.source[index]  # (rows,)
            keep, state.extras[LAYOUT] = row_layout(source_of)
            sources = state.src_kv[0][0].size(0)
            if keep.numel() != sources or bool((keep != torch.arange(sources, device=keep.device)).any()):
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
