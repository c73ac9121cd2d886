"""Dropout (Srivastava et al. 2014; used after every sub-layer and on the embeddings sums,
Vaswani et al. 2017, Sec. 5.4) with a faster mask on CPU.

``torch.nn.functional.dropout`` on CPU draws its mask with ``bernoulli_`` in float32,
which costs about as much as a 256-wide matmul row and was 9% of a small Transformer's
training step here. :class:`Dropout` draws 15-bit integers instead (``random_`` on int16,
about 4x cheaper) and keeps an element when its draw is at or above ``round(p * 2^15)``.
The drop probability is therefore ``p`` rounded to a multiple of 2^-15 (0.3 -> 0.300018),
and kept elements are scaled by the exact inverse of the realised keep probability, so the
expectation of the output equals the input, as with the standard layer. The mask is saved
as one byte per element for the backward pass (the same as PyTorch's own dropout).

On other devices (CUDA's fused dropout kernel is already fast), in eval mode and for
``p == 0`` it is the standard function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 15  # int16 random_(0, _LEVELS) draws uniformly from 0 .. 2^15 - 1


class _MaskedScale(torch.autograd.Function):
    """y = x * keep * scale; dy/dx = keep * scale (keep is a saved boolean mask)."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:  # noqa: D102
        threshold = round(p * _LEVELS)
        keep = torch.empty(x.shape, dtype=torch.int16, device=x.device).random_(0, _LEVELS)
        keep = keep >= threshold
        scale = _LEVELS / (_LEVELS - threshold)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout: zero each element with probability ~p, scale the rest by 1/(1-p)."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    if x.device.type != "cpu" or not x.dtype.is_floating_point:
        return F.dropout(x, p, True)
    return _MaskedScale.apply(x, p)


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` (same ``p`` attribute and state dict: none)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
