"""The encoder's position-wise work on real source tokens only (CPU training).

Batches are sorted by target length first (:func:`nmtkit.data.batching.token_batches`), so
the targets of a batch have nearly equal lengths and the sources do not: on Multi30k 11% of
the encoder's positions in a 4096-token batch are padding. The readable encoder computes
every sub-layer at every position, padding included, and the masks make the results at
padding positions irrelevant.

Only attention mixes positions; layer norm, the feed-forward network, dropout and the
residual sums work on each position alone. :class:`UnpaddedEncoderTransformer` therefore
runs the encoder stack on the real positions, gathered into one sequence (1, n, d), and
:class:`UnpaddedSelfAttention` spreads their queries, keys and values out to the padded
(batch, S) layout for Eq. 1 only, and gathers the result back. The memory handed to the
decoder is (batch, S, d) again, with zeros at padding positions (which the source mask
hides from the decoder, as before). The layers' own code is not copied: an
:class:`~nmtkit.models.transformer.EncoderLayer` runs unchanged on the gathered sequence.

Used while gradients are recorded on a CPU; otherwise (decoding, attention maps, other
devices) the readable ``encode`` runs. ``tests/test_fast_unpadded_encoder.py`` checks that
memory, loss and every gradient agree.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..models.transformer import Transformer
from .attention import CpuTrainingAttention


def real_rows(mask: Tensor) -> Tensor:
    """Positions of the real tokens in the flattened (batch * S) layout: mask (batch, 1, S)."""
    return mask.reshape(-1).nonzero().squeeze(1)


class UnpaddedSelfAttention(CpuTrainingAttention):
    """Self-attention that accepts the encoder's unpadded sequence (1, n, d) with the padded
    batch's mask (batch, 1, S); a query in the padded layout goes the readable way."""

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        if (mask is None or need_attention or not (query is key and key is value)
                or query.shape[:2] == (mask.size(0), mask.size(-1))):
            return super().forward(query, key, value, mask, need_attention)
        b, s, d = mask.size(0), mask.size(-1), self.d_model
        rows = real_rows(mask)  # (n,)
        qkv = self.in_proj(query[0])  # (n, 3d): projections of the real positions only
        qkv = qkv.new_zeros(b * s, 3 * d).index_copy(0, rows, qkv)  # (b * S, 3d), 0 at padding
        q, k, v = (self._split(x) for x in qkv.view(b, s, 3 * d).chunk(3, dim=-1))
        if self.rotary is not None:
            q, k = self.rotary(q, 0), self.rotary(k, 0)
        x, _ = self.heads_attention(q, k, v, mask.unsqueeze(1), False)  # (b, heads, S, d_k)
        x = x.transpose(1, 2).reshape(b * s, d).index_select(0, rows)  # (n, d), real positions
        return self.out_proj(x).unsqueeze(0), None


class UnpaddedEncoderTransformer(Transformer):
    """:class:`~nmtkit.models.transformer.Transformer` whose training ``encode`` runs the
    encoder stack on the real positions only (module docstring)."""

    def encode(self, src: Tensor, src_mask: Tensor, need_attention: bool = False) -> Any:
        if (need_attention or src.device.type != "cpu" or not torch.is_grad_enabled()
                or not all(isinstance(layer.self_attn, UnpaddedSelfAttention)
                           for layer in self.encoder_layers)):  # e.g. packed for decoding
            return super().encode(src, src_mask, need_attention)
        b, s = src.shape
        rows = real_rows(src_mask)
        if rows.numel() == b * s:  # no padding: nothing to leave out
            return super().encode(src, src_mask)
        x = self.position(self.src_embed(src))  # (b, S, d)
        d = x.size(-1)
        x = x.reshape(b * s, d).index_select(0, rows).unsqueeze(0)  # (1, n, d)
        for layer in self.encoder_layers:
            x, _ = layer(x, src_mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x.new_zeros(b * s, d).index_copy(0, rows, x[0]).view(b, s, d)
