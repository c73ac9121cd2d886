"""Multi-head attention for training on a CPU: the written-out kernel instead of the fused one.

:class:`~nmtkit.models.attention.MultiHeadAttention` calls PyTorch's fused
``F.scaled_dot_product_attention`` unless the probabilities are asked for. On a CPU the
fused kernel (flash attention, blocked for long sequences) is slower forward and backward
than the three plain operations (matmul, softmax, matmul) for sentence-length inputs,
while at inference it is as fast or faster. :class:`CpuTrainingAttention` therefore takes
the written-out :func:`~nmtkit.models.attention.scaled_dot_product_attention` while
gradients are recorded on a CPU, and the readable model's choice otherwise. Both compute
Eq. 1; only the dropout masks (random) are drawn differently. Under CPU autocast
(``train.amp: bf16`` on a CPU with bf16 in hardware) the kernel's two products stay in float32: their
shapes, (sentences x heads, query length, key length), are as many as a batch has length
groups, too many for the cache of oneDNN's bf16 kernels (see :mod:`.linear`), and their
FLOPs are about 1% of a step's at sentence lengths. Its query and key-value
projections of weight slices (the decoder's cross-attention) go through
:func:`.linear.linear`, as the swapped ``in_proj`` and ``out_proj`` do
(:class:`~.linear.OneDnnLinear`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..models.attention import MultiHeadAttention, scaled_dot_product_attention
from .linear import linear


class CpuTrainingAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with the written-out kernel for CPU training steps."""

    def heads_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                        need_attention: bool) -> tuple[Tensor, Tensor | None]:
        if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
            drop = self.dropout if self.training and self.dropout.p > 0 else None
            if torch.is_autocast_enabled("cpu"):
                # Eq. 1's two products in float32 (module docstring): under autocast their
                # bf16 kernels would fill oneDNN's cache, one per (sentences x heads, lengths).
                with torch.autocast("cpu", enabled=False):
                    x, probs = scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                            mask, drop)
            else:
                x, probs = scaled_dot_product_attention(q, k, v, mask, drop)
            return x, probs if need_attention else None
        return super().heads_attention(q, k, v, mask, need_attention)

    def project_q(self, x: Tensor) -> Tensor:
        d = self.d_model
        return self._split(linear(x, self.in_proj.weight[:d], self.in_proj.bias[:d]))

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        d = self.d_model
        kv = linear(x, self.in_proj.weight[d:], self.in_proj.bias[d:])  # (batch, time, 2 d)
        k, v = kv.chunk(2, dim=-1)
        return self._split(k), self._split(v)
